//! Compiles the eBPF program that reads a waiting thread's registers
//! (src/capture/bpf/task_regs.bpf.c) into an object embedded in the library.

fn main() {
    pileup_bpf_build::object("src/capture/bpf/task_regs.bpf.c", "task_regs");
}
