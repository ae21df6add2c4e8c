//! `pileup-bpf-build`: what every pileup crate with eBPF programs does in
//! its `build.rs`. The programs include `pileup_bpf.h`, the header they
//! share (kernel types, map types, the stack copy, counters and the
//! per-second budget), which this crate carries and writes beside the
//! build's output; libbpf's headers come from libbpf-sys, so only clang is
//! needed from the system (Debian: clang).
//!
//! A crate's `build.rs` calls `pileup_bpf_build::skeleton("src/bpf/futex.bpf.c",
//! "futex")`, and its code takes the skeleton with
//! `include!(concat!(env!("OUT_DIR"), "/futex.skel.rs"))`.

use std::path::PathBuf;

/// The header every pileup eBPF program includes.
pub const HEADER: &str = include_str!("../bpf/pileup_bpf.h");

fn out_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
}

/// Write the shared header into the build's output and return clang's
/// arguments that find it.
fn clang_args() -> Vec<String> {
    let include = out_dir().join("pileup-bpf-include");
    std::fs::create_dir_all(&include).expect("creating the header's directory in OUT_DIR");
    std::fs::write(include.join("pileup_bpf.h"), HEADER).expect("writing pileup_bpf.h into OUT_DIR");
    vec!["-Wall".into(), "-Wno-unused-function".into(), format!("-I{}", include.display())]
}

/// Compile `src` (a path in the crate) and generate its Rust skeleton as
/// `OUT_DIR/NAME.skel.rs`. A failure ends the build with what to install.
pub fn skeleton(src: &str, name: &str) {
    libbpf_cargo::SkeletonBuilder::new()
        .source(src)
        .clang_args(clang_args())
        .build_and_generate(out_dir().join(format!("{name}.skel.rs")))
        .unwrap_or_else(|e| panic!("building {src} (needs clang: apt-get install clang): {e:#}"));
    println!("cargo:rerun-if-changed={src}");
}

/// Compile `src` into the object `OUT_DIR/NAME.bpf.o` only (a program
/// loaded from its bytes, without a skeleton).
pub fn object(src: &str, name: &str) {
    libbpf_cargo::SkeletonBuilder::new()
        .source(src)
        .obj(out_dir().join(format!("{name}.bpf.o")))
        .clang_args(clang_args())
        .build()
        .unwrap_or_else(|e| panic!("building {src} (needs clang: apt-get install clang): {e:#}"));
    println!("cargo:rerun-if-changed={src}");
}
