//! Compiles the lock-wait probes (src/bpf/futex.bpf.c) and their skeleton.

fn main() {
    pileup_bpf_build::skeleton("src/bpf/futex.bpf.c", "futex");
}
