//! A thread's registers as capture reads them and unwinding, lock reading
//! and annotation use them (x86_64), and the futex window copied beside them.

use serde::{Deserialize, Serialize};

/// The registers unwinding and annotation need (x86_64).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Regs {
    /// Instruction pointer (`rip`).
    pub ip: u64,
    /// Stack pointer (`rsp`).
    pub sp: u64,
    /// Frame pointer (`rbp`).
    pub bp: u64,
    /// Syscall number if the thread was stopped inside one (`orig_rax`), else -1.
    pub orig_ax: i64,
    /// `rax`: a system call's return value (an -ERESTART* code while the stop interrupts it).
    pub ax: i64,
    /// First syscall argument (the futex address for futex waits).
    pub di: u64,
    /// Second syscall argument (`rsi`).
    pub si: u64,
    /// Third syscall argument (the byte count of a read or write).
    pub dx: u64,
}

impl Regs {
    /// The syscall the thread was blocked in when interrupted, if any.
    /// A syscall interrupted by the stop returns one of the -ERESTART* codes
    /// and is restarted transparently when the thread resumes.
    pub fn blocked_syscall(&self) -> Option<u64> {
        (self.orig_ax >= 0 && (-516..=-512).contains(&self.ax)).then_some(self.orig_ax as u64)
    }
}

/// Bytes copied before the futex word: rwlock waiters block on a field inside
/// the lock (offset 8 or 12), not at its start.
pub const FUTEX_BEFORE: u64 = 16;
pub const FUTEX_WINDOW: usize = 48;

/// The name of x86-64 system call `nr` (`syscall_N` for a number with no
/// name).
pub fn syscall_name(nr: u64) -> String {
    match syscalls::Sysno::new(nr as usize) {
        Some(s) => s.name().to_string(),
        None => format!("syscall_{nr}"),
    }
}
