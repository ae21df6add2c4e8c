//! Compiles the allocation probes (src/bpf/malloc.bpf.c) with clang and
//! generates their Rust skeleton. libbpf's headers come from libbpf-sys,
//! so only clang is needed from the system (Debian: clang).

use std::path::PathBuf;

fn main() {
    let src = "src/bpf/malloc.bpf.c";
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("malloc.skel.rs");
    libbpf_cargo::SkeletonBuilder::new()
        .source(src)
        .clang_args(["-Wall", "-Wno-unused-function", "-I../pileup-engine/src/capture/bpf"])
        .build_and_generate(&out)
        .unwrap_or_else(|e| panic!("building {src} (needs clang: apt-get install clang): {e:#}"));
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed=../pileup-engine/src/capture/bpf/pileup_bpf.h");
}
