//! A runnable thread that waits for a CPU, read where it stands without
//! waiting for it to run and without stopping it.
//!
//! Such a thread's user registers are where the kernel saved them when it
//! last entered the kernel (the interrupt that preempted it, or the system
//! call it is finishing), and its user stack cannot change until it runs
//! again. The kernel shows neither in `/proc` for a runnable thread, so an
//! eBPF task iterator (`bpf/task_regs.bpf.c`), attached for that one
//! thread, reads the saved registers, with whether the thread is on a CPU
//! now and its context switch count; the stack is then copied with
//! `process_vm_readv`, and a second look tells whether it ran meanwhile
//! (the read is then thrown away). `/proc` cannot tell this: the CPU time
//! in `schedstat` of a thread that runs on is brought up to date only at
//! the scheduler's tick, so two reads a few microseconds apart agree. This replaces a perf event attached to the thread, which
//! would sample it once it had run but, while it exists, makes the kernel
//! run its perf hooks at every context switch of the machine.
//!
//! Needs root, or CAP_BPF and CAP_PERFMON, a kernel with BTF whose task
//! iterator filters by thread, and the host's thread ids (not a
//! container's): checked when the program is loaded, on a thread of
//! pileup's own.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use crate::regs::Regs;

/// The compiled iterator (built by build.rs).
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/task_regs.bpf.o"));

/// Bytes one thread gives (`struct out` in the program): its tid, on-CPU
/// flag, context switch count, eight registers and its CPU, each a u64.
const OUT_BYTES: usize = 12 * 8;

/// One look at a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// On a CPU now: its saved registers are stale.
    pub on_cpu: bool,
    /// Voluntary and involuntary context switches so far: unchanged
    /// between two looks while off its CPU means it did not run between.
    pub switches: u64,
    pub regs: Regs,
    /// The CPU it runs on, or last ran on.
    pub cpu: usize,
}

/// The loaded iterator program.
pub struct TaskRegs {
    obj: libbpf_rs::Object,
}

impl TaskRegs {
    /// Load the program. The error is one line, for a note or a missed
    /// thread's reason.
    pub fn load() -> Result<TaskRegs, String> {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err("the kernel has no BTF (/sys/kernel/btf/vmlinux)".into());
        }
        // libbpf's own messages (a verifier log runs to pages) are not the
        // user's: a failure is reported in one line.
        libbpf_rs::set_print(None);
        let open = libbpf_rs::ObjectBuilder::default()
            .open_memory(OBJECT)
            .map_err(|e| format!("opening the eBPF task iterator: {e}"))?;
        let obj = open.load().map_err(|e| format!("loading the eBPF task iterator: {e}"))?;
        let tr = TaskRegs { obj };
        tr.check()?;
        Ok(tr)
    }

    /// Whether the iterator gives exactly the one thread asked for, looked
    /// at by the id pileup knows it by: a thread of pileup's own that is
    /// not its process's first. Kernels before 6.1 have no filter by
    /// thread (every task on the host would be walked), some later ones
    /// filter by process only, and in a PID namespace (a container) the
    /// kernel's thread ids are not pileup's.
    fn check(&self) -> Result<(), String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tx.send(unsafe { libc::gettid() });
            let _ = done_rx.recv();
        });
        let tid = rx.recv().map_err(|_| "checking the eBPF task iterator: no thread to look at".to_string())?;
        let got = self.records(tid);
        drop(done_tx);
        let _ = t.join();
        match got {
            Ok(buf) if buf.len() == OUT_BYTES && parse(&buf, tid).is_some() => Ok(()),
            Ok(buf) => Err(format!(
                "the kernel's task iterator gave {} for one thread (it filters by thread from Linux 6.1, and pileup must see the host's thread ids, not a container's)",
                match buf.len() / OUT_BYTES {
                    1 => "1 record".to_string(),
                    n => format!("{n} records"),
                }
            )),
            Err(e) => Err(format!("the kernel's task iterator by thread is not available ({e})")),
        }
    }

    /// Thread `tid` (of any process) now, with the registers the kernel
    /// last saved for it, or `None` when it has none to give (it exited).
    pub fn look(&self, tid: i32) -> std::io::Result<Option<Look>> {
        Ok(parse(&self.records(tid)?, tid))
    }

    /// What the iterator writes for thread `tid`.
    fn records(&self, tid: i32) -> std::io::Result<Vec<u8>> {
        let prog = self.obj.progs().next().expect("the object holds one program");
        let mut info = libbpf_sys::bpf_iter_link_info::default();
        info.task.tid = tid as u32;
        // SAFETY: bpf_link_create_opts is plain data; zero is its default.
        let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _;
        opts.iter_info = &mut info;
        opts.iter_info_len = std::mem::size_of::<libbpf_sys::bpf_iter_link_info>() as u32;
        // SAFETY: a valid program fd, and opts pointing at live data.
        let link =
            unsafe { libbpf_sys::bpf_link_create(prog.as_fd().as_raw_fd(), 0, libbpf_sys::BPF_TRACE_ITER, &opts) };
        if link < 0 {
            // libbpf returns -errno.
            let err = std::io::Error::from_raw_os_error(-link);
            return match err.raw_os_error() {
                Some(libc::ESRCH) | Some(libc::ENOENT) => Ok(vec![]),
                _ => Err(err),
            };
        }
        // SAFETY: the fd was just created and is ours alone.
        let link = unsafe { OwnedFd::from_raw_fd(link) };
        // SAFETY: a valid iterator link fd.
        let iter = unsafe { libbpf_sys::bpf_iter_create(link.as_raw_fd()) };
        if iter < 0 {
            return Err(std::io::Error::from_raw_os_error(-iter));
        }
        // SAFETY: as above.
        let mut iter = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(iter) });
        let mut buf = Vec::with_capacity(OUT_BYTES);
        iter.read_to_end(&mut buf)?;
        Ok(buf)
    }
}

/// The look at `tid` in the iterator's output.
pub fn parse(buf: &[u8], tid: i32) -> Option<Look> {
    buf.chunks_exact(OUT_BYTES).find_map(|c| {
        let v = |i: usize| u64::from_ne_bytes(c[i * 8..i * 8 + 8].try_into().unwrap());
        (v(0) == tid as u64).then(|| Look {
            on_cpu: v(1) != 0,
            switches: v(2),
            regs: Regs {
                ip: v(3),
                sp: v(4),
                bp: v(5),
                // Read as a sample of a running thread is: where its user
                // code stands, not a system call it blocks in (a preempted
                // thread's saved orig_ax holds an interrupt or fault code).
                ax: v(6) as i64,
                orig_ax: -1,
                di: v(8),
                si: v(9),
                dx: v(10),
            },
            cpu: v(11) as usize,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threads_registers_are_read_in_the_programs_order() {
        let mut b = vec![];
        for v in [9u64, 1, 77, 1, 2, 3, 4, 202, 6, 7, 8, 5] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let l = parse(&b, 9).unwrap();
        assert!(l.on_cpu);
        assert_eq!(l.switches, 77);
        assert_eq!(l.cpu, 5);
        let r = l.regs;
        assert_eq!((r.ip, r.sp, r.bp, r.ax, r.orig_ax, r.di, r.si, r.dx), (1, 2, 3, 4, -1, 6, 7, 8));
        assert_eq!(parse(&b, 10), None);
        assert_eq!(parse(&b[..OUT_BYTES - 1], 9), None);
    }

    /// A thread of this process that sleeps: its saved registers put its
    /// stack pointer inside its own stack, and two looks agree; a process
    /// that spins is on a CPU. Needs root (CAP_BPF and
    /// CAP_PERFMON), as pileup does.
    #[test]
    fn a_sleeping_thread_is_read_in_place_and_a_spinning_one_is_on_its_cpu() {
        let _cpu0 = crate::capture::CPU0_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let tr = match TaskRegs::load() {
            Ok(tr) => tr,
            // SAFETY: geteuid has no preconditions.
            Err(e) if unsafe { libc::geteuid() } != 0 => {
                panic!("this test needs root (or CAP_BPF and CAP_PERFMON): {e}")
            }
            Err(e) => panic!("{e}"),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            let here = 0u64;
            let sp = &here as *const u64 as u64;
            std::thread::sleep(std::time::Duration::from_millis(300));
            sp
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let first = tr.look(tid).unwrap().expect("a sleeping thread has saved registers");
        let again = tr.look(tid).unwrap().unwrap();
        let local = sleeper.join().unwrap();
        assert!(!first.on_cpu && first == again, "asleep throughout: {first:?} {again:?}");
        let regs = first.regs;
        assert!(regs.sp < local && local - regs.sp < 64 * 1024, "sp {:#x}, a local at {local:#x}", regs.sp);
        assert!(regs.ip != 0);

        // A process that spins, seen from another CPU: on its CPU at
        // least at some looks (the machine may be busy with other tests).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(
            cpus >= 2,
            "this test needs two CPUs (it spins on one and looks from another); this machine has {cpus}"
        );
        // Kept on CPU 0: the CPU given with each look is that one.
        let mut spinner =
            std::process::Command::new("taskset").args(["-c", "0", "sh", "-c", "while :; do :; done"]).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Looked at from a thread kept off CPU 0: a look taken on CPU 0
        // itself would always find the spinner off its CPU. Looks are
        // spread over up to two seconds, so that a busy moment on the
        // machine does not hide the spinner from all of them.
        let pid = spinner.id() as i32;
        let looks: Vec<Look> = std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET
                // writes inside it; pid 0 is the calling thread.
                let pinned = unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    for c in 1..cpus {
                        libc::CPU_SET(c, &mut set);
                    }
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
                };
                assert_eq!(pinned, 0, "could not keep the looking thread off CPU 0");
                let mut looks = vec![];
                let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
                while std::time::Instant::now() < until && (looks.len() < 200 || !looks.iter().any(|l: &Look| l.on_cpu))
                {
                    looks.extend(tr.look(pid).unwrap());
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                looks
            })
            .join()
            .unwrap()
        });
        spinner.kill().unwrap();
        spinner.wait().unwrap();
        assert!(looks.iter().any(|l| l.on_cpu), "a spinning thread was never seen on a CPU");
        assert!(looks.iter().all(|l| l.cpu == 0), "CPUs given: {:?}", looks.iter().map(|l| l.cpu).collect::<Vec<_>>());
    }
}
