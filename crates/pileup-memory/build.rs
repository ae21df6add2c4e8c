//! Compiles the allocation probes (src/bpf/malloc.bpf.c) and their skeleton.

fn main() {
    pileup_bpf_build::skeleton("src/bpf/malloc.bpf.c", "malloc");
}
