//! Compiles the system call counter (src/bpf/syscalls.bpf.c) and its
//! skeleton (`pileup bench accept` counts the accept thread's calls).

fn main() {
    pileup_bpf_build::skeleton("src/bpf/syscalls.bpf.c", "syscalls");
}
