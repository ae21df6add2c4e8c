//! Compiles the eBPF program that reads a waiting thread's registers
//! (src/capture/bpf/task_regs.bpf.c) with clang into an object embedded in
//! the library. libbpf's headers come from libbpf-sys, so only clang is
//! needed from the system (Debian: clang).

use std::path::PathBuf;

fn main() {
    let src = "src/capture/bpf/task_regs.bpf.c";
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("task_regs.bpf.o");
    libbpf_cargo::SkeletonBuilder::new()
        .source(src)
        .obj(&out)
        .clang_args(["-Wall", "-Wno-unused-function", "-Isrc/capture/bpf"])
        .build()
        .unwrap_or_else(|e| panic!("building {src} (needs clang: apt-get install clang): {e:#}"));
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed=src/capture/bpf/pileup_bpf.h");
}
