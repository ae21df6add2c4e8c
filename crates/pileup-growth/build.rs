//! Compiles the growth tracer (src/bpf/growth.bpf.c) and its skeleton.

fn main() {
    pileup_bpf_build::skeleton("src/bpf/growth.bpf.c", "growth");
}
