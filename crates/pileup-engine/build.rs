//! Compiles the eBPF programs with clang: the one that reads a waiting
//! thread's registers (src/capture/bpf/task_regs.bpf.c) into an object
//! embedded in the library, and the memory growth tracer
//! (src/capture/bpf/growth.bpf.c) and one thread's system call counter
//! (src/capture/bpf/syscalls.bpf.c) with their Rust skeletons. libbpf's headers
//! come from libbpf-sys, so only clang is needed from the system (Debian:
//! clang).

use std::path::PathBuf;

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let args = ["-Wall", "-Wno-unused-function", "-Isrc/capture/bpf"];
    let src = "src/capture/bpf/task_regs.bpf.c";
    libbpf_cargo::SkeletonBuilder::new()
        .source(src)
        .obj(out_dir.join("task_regs.bpf.o"))
        .clang_args(args)
        .build()
        .unwrap_or_else(|e| panic!("building {src} (needs clang: apt-get install clang): {e:#}"));
    println!("cargo:rerun-if-changed={src}");
    for name in ["growth", "syscalls"] {
        let src = format!("src/capture/bpf/{name}.bpf.c");
        libbpf_cargo::SkeletonBuilder::new()
            .source(&src)
            .clang_args(args)
            .build_and_generate(out_dir.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {src} (needs clang: apt-get install clang): {e:#}"));
        println!("cargo:rerun-if-changed={src}");
    }
    println!("cargo:rerun-if-changed=src/capture/bpf/pileup_bpf.h");
}
