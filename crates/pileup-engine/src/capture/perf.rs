//! One on-CPU sample of a running thread, taken by the kernel as the thread
//! runs: a `perf_event` clock armed for a single overflow
//! (`PERF_EVENT_IOC_REFRESH 1`) 10 µs ahead, which records the user
//! registers and the top of the user stack of the thread on the CPU then
//! (`PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER`, as `perf record
//! --call-graph dwarf` does) into a ring buffer. The thread is never
//! stopped: the sample costs it one timer interrupt and a copy.
//!
//! Two kinds of event, chosen by the caller ([`super::passive`]):
//! * [`Event::open_cpu`]: a CPU's wall clock. Opened once per CPU and kept,
//!   it costs nothing while disarmed, and nothing at any other thread's
//!   context switch. Its sample is of whichever thread runs there when it
//!   fires, so the caller arms it only when its thread is on that CPU and
//!   checks the sample's thread id.
//! * [`Event::open`]: one thread's CPU clock. Its sample is always of that
//!   thread, once it has run 10 µs, but while any event attached to a
//!   thread exists (and for about a second after) the kernel runs its perf
//!   hooks at every context switch of the machine (`bench/perf-context`).
//!
//! The record layout is parsed by hand: it is a handful of fixed fields for
//! the sample type chosen here, and the crates that parse perf records
//! bring a whole `perf.data` reader with them.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use perf_event_open_sys as sys;
use sys::bindings as b;

use crate::regs::Regs;

/// Registers sampled, in the kernel's order (ascending `PERF_REG_X86_*`):
/// AX, SI, DI, BP, SP, IP.
const REG_AX: u32 = 0;
const REG_SI: u32 = 4;
const REG_DI: u32 = 5;
const REG_BP: u32 = 6;
const REG_SP: u32 = 7;
const REG_IP: u32 = 8;
const REGS_MASK: u64 = 1 << REG_AX | 1 << REG_SI | 1 << REG_DI | 1 << REG_BP | 1 << REG_SP | 1 << REG_IP;
const NREGS: usize = 6;

/// The kernel refuses user stack copies of 64 KiB or more (the size is a
/// u16 in the record header).
pub const MAX_STACK: usize = 65528;

/// The smallest period the kernel allows for a clock event.
const PERIOD_NS: u64 = 10_000;

/// A sample read from the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnCpu {
    pub tid: u32,
    pub regs: Regs,
    pub stack: Vec<u8>,
}

/// One event (a thread's or a CPU's) and its ring buffer.
pub struct Event {
    fd: OwnedFd,
    ring: *mut u8,
    ring_len: usize,
    data_len: usize,
    armed: bool,
    /// A CPU's event (it never ends; a thread's ends with the thread).
    cpu: bool,
}

// SAFETY: the ring mapping is owned by this value alone.
unsafe impl Send for Event {}

impl Event {
    /// Open a disabled event on thread `tid`'s CPU clock; `stack_bytes` is
    /// capped at [`MAX_STACK`]. Fails without `CAP_PERFMON` (or root) or
    /// when the kernel has no perf events.
    pub fn open(tid: i32, stack_bytes: usize) -> std::io::Result<Event> {
        Event::open_on(tid, -1, b::PERF_COUNT_SW_TASK_CLOCK, stack_bytes)
    }

    /// Open a disabled event on CPU `cpu`'s clock, sampling whichever thread
    /// runs there. Needs `CAP_PERFMON` (or root, or `perf_event_paranoid`
    /// at 0 or below); fails with `ENODEV` for a CPU that is offline.
    pub fn open_cpu(cpu: i32, stack_bytes: usize) -> std::io::Result<Event> {
        Event::open_on(-1, cpu, b::PERF_COUNT_SW_CPU_CLOCK, stack_bytes)
    }

    fn open_on(tid: i32, cpu: i32, clock: u32, stack_bytes: usize) -> std::io::Result<Event> {
        let stack = (stack_bytes.min(MAX_STACK) & !7) as u32;
        let mut attr = b::perf_event_attr {
            type_: b::PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<b::perf_event_attr>() as u32,
            config: clock as u64,
            sample_type: (b::PERF_SAMPLE_TID | b::PERF_SAMPLE_REGS_USER | b::PERF_SAMPLE_STACK_USER) as u64,
            sample_regs_user: REGS_MASK,
            sample_stack_user: stack,
            ..Default::default()
        };
        attr.__bindgen_anon_1.sample_period = PERIOD_NS;
        attr.__bindgen_anon_2.wakeup_events = 1;
        attr.set_disabled(1);
        // SAFETY: attr is a valid, fully initialised perf_event_attr.
        let fd = unsafe { sys::perf_event_open(&mut attr, tid, cpu, -1, b::PERF_FLAG_FD_CLOEXEC as libc::c_ulong) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by the kernel and is ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // A power-of-two data area holding at least two whole samples.
        let page = 4096usize;
        let mut data_len = page;
        while data_len < 2 * (stack as usize + 256) {
            data_len *= 2;
        }
        let ring_len = page + data_len;
        // SAFETY: maps the event's ring buffer (metadata page + data area).
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Event { fd, ring: ring as *mut u8, ring_len, data_len, armed: false, cpu: tid < 0 })
    }

    fn meta(&self) -> *mut b::perf_event_mmap_page {
        self.ring as *mut b::perf_event_mmap_page
    }

    /// Take one sample 10 µs ahead (of the thread's CPU time, or of the
    /// CPU's wall time). Whatever the ring still holds from before is
    /// dropped.
    pub fn arm(&mut self) -> std::io::Result<()> {
        self.drain();
        if !self.armed {
            // SAFETY: ioctl on our own perf fd.
            if unsafe { sys::ioctls::REFRESH(self.fd.as_raw_fd(), 1) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
            self.armed = true;
        }
        Ok(())
    }

    /// Wait up to `timeout` for the armed sample. `None` when none came
    /// (the event stays armed: a thread's event, the thread went to sleep
    /// before running 10 µs) or when the one that came has no user context
    /// (a CPU's event fired in a kernel thread or the idle task).
    pub fn wait(&mut self, timeout: Duration) -> Option<OnCpu> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(fired) = self.take() {
                return fired;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // A CPU's clock fires within 10 µs: none by now means the
                // kernel disabled the event after the refresh that armed
                // it (its disable is deferred), so arm it afresh next time
                // (a spare refresh only allows one more sample, which
                // arming drains).
                if self.cpu {
                    self.armed = false;
                }
                return None;
            }
            let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().clamp(1, i32::MAX as u128) as i32) };
            // A thread's event hangs up for good when the thread exits. A
            // CPU's never does, but its ring reports one hang-up when a
            // sample used up its refresh: left over from the last sample,
            // it means nothing now (reading it cleared it).
            if n > 0
                && pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0
                && pfd.revents & libc::POLLIN == 0
                && !self.cpu
            {
                return None; // the thread exited
            }
        }
    }

    /// The last sample in the ring, if the event fired (`Some(None)` for a
    /// sample without user context); the ring is emptied.
    fn take(&mut self) -> Option<Option<OnCpu>> {
        let meta = self.meta();
        // SAFETY: the metadata page is mapped; data_head is written by the
        // kernel and read with acquire ordering as the ABI requires.
        let head = unsafe { std::ptr::read_volatile(&(*meta).data_head) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let tail = unsafe { (*meta).data_tail };
        if head == tail {
            return None;
        }
        // SAFETY: the data area follows the metadata page, data_len long.
        let data = unsafe { std::slice::from_raw_parts(self.ring.add(self.ring_len - self.data_len), self.data_len) };
        let mut last = None;
        let mut fired = false;
        let mut at = tail;
        while at < head {
            let hdr = ring_bytes(data, at, 8);
            let kind = u32::from_ne_bytes(hdr[0..4].try_into().unwrap());
            let size = u16::from_ne_bytes(hdr[6..8].try_into().unwrap()) as u64;
            if size < 8 {
                break;
            }
            if kind == b::PERF_RECORD_SAMPLE {
                fired = true;
                last = parse_sample(&ring_bytes(data, at + 8, size as usize - 8));
            }
            at += size;
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // SAFETY: hands the consumed space back to the kernel.
        unsafe { std::ptr::write_volatile(&mut (*meta).data_tail, head) };
        if !fired {
            return None;
        }
        // REFRESH 1 disabled the event at its overflow, whatever it caught.
        self.armed = false;
        Some(last)
    }

    fn drain(&mut self) {
        let _ = self.take();
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: unmaps what open() mapped; the fd closes after.
        unsafe { libc::munmap(self.ring as *mut libc::c_void, self.ring_len) };
    }
}

/// `len` bytes of the ring starting at the (unwrapped) offset `at`.
fn ring_bytes(data: &[u8], at: u64, len: usize) -> Vec<u8> {
    let n = data.len();
    let start = (at % n as u64) as usize;
    let mut out = Vec::with_capacity(len);
    let first = len.min(n - start);
    out.extend_from_slice(&data[start..start + first]);
    if first < len {
        out.extend_from_slice(&data[..len - first]);
    }
    out
}

/// A `PERF_RECORD_SAMPLE` body for `TID | REGS_USER | STACK_USER`:
/// pid u32, tid u32; abi u64, then one u64 per register in the mask when
/// abi is not 0; stack size u64, that many bytes and the bytes actually
/// copied (u64) when the size is not 0.
pub fn parse_sample(body: &[u8]) -> Option<OnCpu> {
    let u64_at = |o: usize| body.get(o..o + 8).map(|b| u64::from_ne_bytes(b.try_into().unwrap()));
    let tid = u32::from_ne_bytes(body.get(4..8)?.try_into().ok()?);
    let abi = u64_at(8)?;
    if abi == 0 {
        return None; // a kernel thread, or no user context
    }
    let mut r = [0u64; NREGS];
    for (i, v) in r.iter_mut().enumerate() {
        *v = u64_at(16 + 8 * i)?;
    }
    let at = 16 + 8 * NREGS;
    let size = u64_at(at)? as usize;
    let stack = if size == 0 {
        vec![]
    } else {
        let bytes = body.get(at + 8..at + 8 + size)?;
        let dyn_size = u64_at(at + 8 + size)? as usize;
        bytes[..dyn_size.min(size)].to_vec()
    };
    let regs = Regs {
        ax: r[0] as i64,
        si: r[1],
        di: r[2],
        bp: r[3],
        sp: r[4],
        ip: r[5],
        // Sampled as it runs: not blocked in a syscall.
        orig_ax: -1,
        dx: 0,
    };
    Some(OnCpu { tid, regs, stack })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(stack: &[u8], copied: usize) -> Vec<u8> {
        let mut b = vec![];
        b.extend_from_slice(&7u32.to_ne_bytes());
        b.extend_from_slice(&9u32.to_ne_bytes());
        b.extend_from_slice(&2u64.to_ne_bytes()); // PERF_SAMPLE_REGS_ABI_64
        for v in [1u64, 2, 3, 4, 5, 6] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&(stack.len() as u64).to_ne_bytes());
        b.extend_from_slice(stack);
        b.extend_from_slice(&(copied as u64).to_ne_bytes());
        b
    }

    #[test]
    fn a_sample_gives_registers_in_mask_order_and_the_copied_stack() {
        let s = parse_sample(&body(&[10, 11, 12, 13, 14, 15, 16, 17], 5)).unwrap();
        assert_eq!(s.tid, 9);
        assert_eq!((s.regs.ax, s.regs.si, s.regs.di, s.regs.bp, s.regs.sp, s.regs.ip), (1, 2, 3, 4, 5, 6));
        assert_eq!(s.regs.orig_ax, -1);
        assert_eq!(s.stack, vec![10, 11, 12, 13, 14]);
    }

    #[test]
    fn no_user_context_and_truncated_records_give_nothing() {
        let mut b = body(&[0; 8], 8);
        b[8..16].copy_from_slice(&0u64.to_ne_bytes());
        assert_eq!(parse_sample(&b), None);
        let b = body(&[0; 8], 8);
        assert_eq!(parse_sample(&b[..b.len() - 12]), None);
    }

    /// A CPU's event, armed again and again, samples the process that
    /// spins there each time. Needs root (or CAP_PERFMON) and two CPUs.
    #[test]
    fn a_cpu_event_samples_the_thread_on_that_cpu_each_time_it_is_armed() {
        let _cpu0 = crate::capture::CPU0_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(
            cpus >= 2,
            "this test needs two CPUs (it spins on one and watches from another); this machine has {cpus}"
        );
        let pin = |pid: i32, cpu: usize| {
            // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes into it.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            unsafe { libc::CPU_SET(cpu, &mut set) };
            // SAFETY: set is a valid cpu_set_t of the size given.
            assert_eq!(unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) }, 0);
        };
        let mut ev = match Event::open_cpu(0, 16384) {
            Ok(e) => e,
            // SAFETY: geteuid has no preconditions.
            Err(e) if unsafe { libc::geteuid() } != 0 => panic!("this test needs root (or CAP_PERFMON): {e}"),
            Err(e) => panic!("{e}"),
        };
        let mut spinner = std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
        let pid = spinner.id() as i32;
        pin(pid, 0);
        pin(0, 1);
        std::thread::sleep(Duration::from_millis(20));
        // Armed again after each sample (and after a wait that saw none):
        // the spinner is caught, with its stack, whenever it is the one on
        // that CPU. Other threads share the CPU (the other tests of this
        // binary run meanwhile, a kernel thread, an interrupt's thread), so
        // not every sample is the spinner's.
        let mut got = vec![];
        let mut spinner_samples = 0;
        for _ in 0..200 {
            ev.arm().unwrap();
            let s = ev.wait(Duration::from_millis(50)).map(|s| (s.tid, s.stack.is_empty()));
            if s == Some((pid as u32, false)) {
                spinner_samples += 1;
            }
            got.push(s);
            if spinner_samples == 5 {
                break;
            }
        }
        spinner.kill().unwrap();
        spinner.wait().unwrap();
        assert_eq!(spinner_samples, 5, "{got:?}");
    }

    #[test]
    fn ring_reads_wrap_around_the_end() {
        let data: Vec<u8> = (0..16).collect();
        assert_eq!(ring_bytes(&data, 14, 4), vec![14, 15, 0, 1]);
        assert_eq!(ring_bytes(&data, 16 + 3, 2), vec![3, 4]);
    }
}
