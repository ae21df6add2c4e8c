//! What every eBPF tracer of pileup checks and measures the same way: the
//! privileges and kernel features tracing needs (with the fix in the
//! error), the kernel's run-time statistics for a probe's own cost, and
//! the clock the probes stamp events with.
//!
//! Everything the kernel holds for a tracer (programs, maps, links) lives
//! in file descriptors of pileup's process: when pileup exits, by any means,
//! SIGKILL included, the kernel closes them and every probe is gone.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Why eBPF tracing cannot run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// Capabilities missing (their names, comma-separated).
    #[error("missing {0}")]
    Privileges(String),
    /// The kernel or the environment cannot trace (the reason).
    #[error("{0}")]
    Kernel(String),
}

/// What the kernel must offer: root, or CAP_BPF and CAP_PERFMON
/// (CAP_SYS_ADMIN covers both) and CAP_SYS_PTRACE to read the server's
/// memory; Linux 5.15+ (a task's user registers); the kernel's BTF (typed
/// tracepoints); the host's PID namespace (the probes compare the host's
/// process ids).
pub fn preflight() -> Result<(), Unavailable> {
    missing_caps()?;
    if let Some((major, minor)) = running_kernel() {
        if (major, minor) < (5, 15) {
            return Err(Unavailable::Kernel(format!(
                "Linux {major}.{minor} lacks what reading a thread's registers needs (bpf_task_pt_regs, Linux 5.15+)"
            )));
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if status.lines().find_map(|l| l.strip_prefix("NSpid:")).is_some_and(|v| v.split_whitespace().count() > 1) {
        return Err(Unavailable::Kernel(
            "pileup runs in a PID namespace (a container); run it on the host, where the server's process id is the one the kernel probes see".into(),
        ));
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(Unavailable::Kernel(
            "the kernel has no BTF (/sys/kernel/btf/vmlinux), which typed tracepoints need (Linux 5.15+ built with CONFIG_DEBUG_INFO_BTF)".into(),
        ));
    }
    Ok(())
}

/// Whether the syscall tracepoints (`syscalls:sys_enter_*`) can be
/// attached: they are found through tracefs, which must be mounted.
pub fn syscall_tracepoints() -> Result<(), Unavailable> {
    let found = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .any(|d| Path::new(d).join("events/syscalls/sys_enter_mmap").exists());
    if found {
        return Ok(());
    }
    if Path::new("/sys/kernel/tracing/events").exists() || Path::new("/sys/kernel/debug/tracing/events").exists() {
        return Err(Unavailable::Kernel(
            "the kernel has no syscall tracepoints (built without CONFIG_FTRACE_SYSCALLS)".into(),
        ));
    }
    Err(Unavailable::Kernel(
        "tracefs is not mounted, and the syscall tracepoints are found through it; mount it with `mount -t tracefs nodev /sys/kernel/tracing`".into(),
    ))
}

fn missing_caps() -> Result<(), Unavailable> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |bit: u32| eff & (1u64 << bit) != 0;
    const SYS_ADMIN: u32 = 21;
    const SYS_PTRACE: u32 = 19;
    const PERFMON: u32 = 38;
    const BPF: u32 = 39;
    let mut missing = vec![];
    if !has(SYS_ADMIN) {
        if !has(BPF) {
            missing.push("CAP_BPF");
        }
        if !has(PERFMON) {
            missing.push("CAP_PERFMON");
        }
    }
    if !has(SYS_PTRACE) {
        missing.push("CAP_SYS_PTRACE");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Unavailable::Privileges(missing.join(", ")))
    }
}

/// What a probe cost in the kernel while attached, from the kernel's own
/// run-time statistics for the program (`BPF_ENABLE_STATS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProbeCost {
    /// Times the program ran.
    pub runs: u64,
    /// Time it ran in all, nanoseconds, on whichever thread it ran.
    pub run_ns: u64,
}

impl std::ops::AddAssign for ProbeCost {
    fn add_assign(&mut self, o: ProbeCost) {
        self.runs += o.runs;
        self.run_ns += o.run_ns;
    }
}

/// Turn on the kernel's run-time statistics for BPF programs; they stay on
/// (for every BPF program of the host) while the returned descriptor is
/// open, so they end with pileup however it exits. libbpf-sys wraps the
/// system call; libbpf-rs has no call for it.
pub fn enable_run_time_stats() -> std::io::Result<OwnedFd> {
    // SAFETY: a plain system call wrapper taking an enum value.
    let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
    if fd < 0 {
        return Err(std::io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: fd is a new descriptor this process owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A program's run count and run time so far (zero unless the run-time
/// statistics were on).
pub fn run_time(prog: BorrowedFd<'_>) -> Option<ProbeCost> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info is a bpf_prog_info of the length given; no pointer
    // fields are set, so the kernel writes only into it.
    let r = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) };
    (r == 0).then_some(ProbeCost { runs: info.run_cnt, run_ns: info.run_time_ns })
}

/// When loading or attaching an eBPF program failed because the kernel
/// refused it to a privileged user (kernel lockdown, a security module):
/// that, in words. Any other failure is the caller's to word.
pub fn refused(what: &str, e: &libbpf_rs::Error) -> Option<Unavailable> {
    (e.kind() == libbpf_rs::ErrorKind::PermissionDenied).then(|| {
        Unavailable::Kernel(format!(
            "the kernel refused {what} the eBPF program ({e}); kernel lockdown or a security module may forbid eBPF tracing"
        ))
    })
}

/// The size of a ring buffer that holds the stack records of a budget of
/// `per_second` stacks, each `record_bytes`, between two reads of it. A
/// per-second budget resets on the second, so a burst at its end and one
/// at the next second's start can fall between the same two reads: the
/// ring holds two seconds' worth, in a power of two (the kernel's rule),
/// 16 MiB at the least and 512 MiB at the most.
pub fn ring_bytes(per_second: u64, record_bytes: u64) -> u32 {
    let want = per_second.saturating_mul(record_bytes).saturating_mul(2);
    want.clamp(16 << 20, 512 << 20).next_power_of_two() as u32
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `major.minor` of the running kernel, if its release string parses.
pub fn running_kernel() -> Option<(u32, u32)> {
    kernel_version(&std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?)
}

/// `major.minor` of a kernel release string (`6.1.0-13-amd64`).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_buffers_hold_two_seconds_of_the_budget_in_a_power_of_two() {
        let rec = 72 + 16384 + 8;
        // The default budget fits the smallest ring.
        assert_eq!(ring_bytes(200, rec), 16 << 20);
        // 2,000 stacks a second: 65.9 MB for two seconds, in 64 MiB; 2,100
        // need the next power of two.
        assert_eq!(ring_bytes(2000, rec), 64 << 20);
        assert_eq!(ring_bytes(2100, rec), 128 << 20);
        assert_eq!(ring_bytes(1 << 40, rec), 512 << 20);
        assert_eq!(ring_bytes(0, rec), 16 << 20);
        for b in [1, 500, 999, 5000] {
            let r = ring_bytes(b, rec);
            assert!(r.is_power_of_two() && u64::from(r) >= (2 * b * rec).min(512 << 20), "{b}: {r}");
        }
    }

    #[test]
    fn kernel_versions_parse_from_release_strings() {
        assert_eq!(kernel_version("6.1.0-13-amd64\n"), Some((6, 1)));
        assert_eq!(kernel_version("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(kernel_version("4.18.0-513.el8.x86_64"), Some((4, 18)));
        assert_eq!(kernel_version("garbage"), None);
    }
}
