//! What a perf event attached to a thread costs that thread's context
//! switches, while it is open and after it is closed: passive mode samples
//! a running thread with such an event (the engine's `PerfEvent`),
//! and `perf record -t`/`-p` attaches the same kind.
//!
//! Two threads pass a byte back and forth through pipes on one CPU, so
//! every round trip is two context switches, each in or out of thread B.
//! Windows alternate, round after round, each in a fresh process: no
//! event; pileup's event open on B, not armed; an event open on a third
//! thread that sleeps on another CPU throughout, and the same event opened,
//! armed and closed 10 times a second (passive mode sampling one thread
//! when it cannot have CPU events and the eBPF iterator): anything the
//! kernel switches on for every task while a thread has an event shows in
//! these two; pileup's passive capture as it runs as root, reading a busy
//! thread on another CPU 10 times a second (CPU events and the iterator);
//! the
//! event opened on B and closed 2 s before measuring; the same on a third
//! thread that takes no part (the control for anything host-wide the kernel
//! keeps on after an event closes); and `perf record -t B` run for a second
//! and exited 2 s before measuring. Reported: round trips a second (median
//! over rounds), the ratio to no event, and the time added per switch of B.
//!
//! Usage: see [`USAGE`] (what `--help` prints).

/// What `--help` prints; the flags it names are the ones accepted.
const USAGE: &str = "Usage: perf-context-bench [--window 2] [--rounds 5] [--cpu 1] [--out FILE] [--one MODE] [--hold SECONDS [--cycle]] [--capture TID | --wake TID] (--capture: read thread TID of the parent process with pileup's passive capture 10 times a second from CPU --cpu, until killed; --wake: the same after one capture, only waking; --one: a single window of MODE in this process, as the bench runs each; --hold: only hold pileup's event open on a sleeping thread of this process for SECONDS, or with --cycle open, arm and close it 10 times a second, as bench/perf-hold does beside a server)";

/// After an event is closed, before measuring.
const SETTLE: Duration = Duration::from_secs(2);

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pileup_bench_drivers::{arg, median};
use pileup_engine::parts::PerfEvent as Event;

const MODES: [&str; 9] = [
    "none",
    "open",
    "open-other",
    "cycling-other",
    "passive-other",
    "waking-other",
    "closed",
    "closed-other",
    "perf-record",
];

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let window = Duration::from_secs(arg(&args, "--window").map(|s| s.parse()).transpose()?.unwrap_or(2));
    let rounds: usize = arg(&args, "--rounds").map(|s| s.parse()).transpose()?.unwrap_or(5);
    let cpu: usize = arg(&args, "--cpu").map(|s| s.parse()).transpose()?.unwrap_or(1);
    let out = arg(&args, "--out");
    if let Some(secs) = arg(&args, "--hold") {
        let held = Other::start(args.iter().any(|a| a == "--cycle"), cpu)?;
        std::thread::sleep(Duration::from_secs_f64(secs.parse().context("--hold SECONDS")?));
        drop(held);
        return Ok(());
    }
    // Passive capture of another process's thread, 10 times a second,
    // until killed: what the passive-other window runs beside the pair.
    if let Some(target) = arg(&args, "--capture") {
        return capture_loop(target.parse().context("--capture TID")?, cpu, true);
    }
    if let Some(target) = arg(&args, "--wake") {
        return capture_loop(target.parse().context("--wake TID")?, cpu, false);
    }
    // One window, in this process: what the parent runs for each.
    if let Some(mode) = arg(&args, "--one") {
        pin(cpu)?;
        println!("{}", window_of(&mode, window, cpu)?);
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let mut rates: Vec<Vec<f64>> = vec![vec![]; MODES.len()];
    for r in 0..rounds {
        for (i, mode) in MODES.iter().enumerate() {
            let o = Command::new(&exe)
                .args(["--one", mode, "--window", &window.as_secs().to_string(), "--cpu", &cpu.to_string()])
                .stderr(Stdio::inherit())
                .output()?;
            if !o.status.success() {
                bail!("the {mode} window failed");
            }
            let rate: f64 = String::from_utf8_lossy(&o.stdout).trim().parse().context("a window's rate")?;
            eprintln!("   round {r} {mode:<12} {rate:10.0} round trips/s");
            rates[i].push(rate);
        }
    }
    let base = median(&rates[0].clone());
    let mut md = format!(
        "\nTwo threads passing a byte through pipes on CPU {cpu} (two context switches per round trip, one in or out of thread B); windows of {} s, {rounds} rounds interleaved, each window in a fresh process; medians\n\n",
        window.as_secs()
    );
    md.push_str("| thread B | round trips/s | ÷ no event | added per switch of B (µs) |\n|---|---|---|---|\n");
    for (i, mode) in MODES.iter().enumerate() {
        let m = median(&rates[i].clone());
        md.push_str(&format!(
            "| {} | {m:.0} | {:.3} | {:+.2} |\n",
            describe(mode),
            m / base,
            (1e6 / m - 1e6 / base) / 2.0
        ));
    }
    print!("{md}");
    if let Some(o) = out {
        pileup_bench_drivers::write(o, &md)?;
    }
    Ok(())
}

fn describe(mode: &str) -> &'static str {
    match mode {
        "none" => "no perf event, ever",
        "open" => "pileup's per-thread event (passive mode's fallback) open on it, not armed",
        "open-other" => "none; pileup's event open on another thread throughout",
        "cycling-other" => "none; pileup's event opened, armed and closed on another thread 10 times a second",
        "waking-other" => {
            "none; the same, but after one capture the other process only wakes 10 times a second (the control for its wake-ups)"
        }
        "passive-other" => {
            "none; pileup's passive capture (CPU events and the eBPF iterator, as root) of a busy thread on the other CPU 10 times a second, from another process on this CPU (its CPU time taken out of the window)"
        }
        "closed" => "pileup's event opened on it, closed 2 s before",
        "closed-other" => "none; pileup's event opened on another thread, closed 2 s before",
        _ => "`perf record -t` on it for 1 s, exited 2 s before",
    }
}

/// Keep this process (and the threads it starts) on one CPU.
fn pin(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: set is a valid cpu_set_t of the size given.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        bail!("pinning to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

fn pipe() -> Result<(std::fs::File, std::fs::File)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned here.
    Ok(unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) })
}

/// One window on a fresh pair of threads: round trips a second.
fn window_of(mode: &str, window: Duration, cpu: usize) -> Result<f64> {
    let (mut to_b_r, mut to_b_w) = pipe()?;
    let (mut to_a_r, mut to_a_w) = pipe()?;
    let (tid_tx, tid_rx) = mpsc::channel();
    let b = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let _ = tid_tx.send(unsafe { libc::gettid() });
        let mut c = [0u8; 1];
        while to_b_r.read_exact(&mut c).is_ok() {
            if to_a_w.write_all(&c).is_err() {
                break;
            }
        }
    });
    let tid = tid_rx.recv().context("thread B")?;
    let held = match mode {
        "open" => Some(Other::Event(Event::open(tid, 16384).context("perf_event_open (root or CAP_PERFMON)")?)),
        "open-other" | "cycling-other" => Some(Other::start(mode == "cycling-other", cpu)?),
        "passive-other" => Some(Other::passive(cpu, true)?),
        "waking-other" => Some(Other::passive(cpu, false)?),
        "closed" => {
            drop(Event::open(tid, 16384).context("perf_event_open (root or CAP_PERFMON)")?);
            std::thread::sleep(SETTLE);
            None
        }
        "closed-other" => {
            drop(Other::start(false, cpu)?);
            std::thread::sleep(SETTLE);
            None
        }
        "perf-record" => {
            let data = std::env::temp_dir().join(format!("perf-context-{}.data", std::process::id()));
            let ok = pileup_bench_drivers::perf_record(&["-t", &tid.to_string()], "1", &data)?;
            if !ok {
                bail!("perf record -t {tid} failed");
            }
            std::thread::sleep(SETTLE);
            None
        }
        _ => None,
    };
    let mut c = [b'x'; 1];
    let mut n = 0u64;
    let used0 = held.as_ref().map_or(0, Other::capture_cpu_ns);
    let t0 = Instant::now();
    while t0.elapsed() < window {
        for _ in 0..1000 {
            to_b_w.write_all(&c)?;
            to_a_r.read_exact(&mut c)?;
        }
        n += 1000;
    }
    let used = held.as_ref().map_or(0, Other::capture_cpu_ns).saturating_sub(used0);
    let rate = n as f64 / (t0.elapsed().as_secs_f64() - used as f64 / 1e9);
    drop(to_b_w);
    let _ = b.join();
    Ok(rate)
}

/// What a window holds while it measures: an event on thread B, or a
/// thread taking no part whose event is held open or opened, armed and
/// closed again and again (as passive mode samples one thread).
enum Other {
    Event(#[allow(dead_code)] Event),
    Thread(std::sync::Arc<std::sync::atomic::AtomicBool>, Option<std::thread::JoinHandle<()>>),
    /// Passive capture in another process on the pair's CPU, and the busy
    /// thread it reads (stopped as for `Thread`).
    Capture(std::process::Child, std::sync::Arc<std::sync::atomic::AtomicBool>, Option<std::thread::JoinHandle<()>>),
}

impl Other {
    /// The other thread and the one that opens its events run on a CPU
    /// other than `cpu`, where the pair runs.
    fn start(cycle: bool, cpu: usize) -> Result<Other> {
        let elsewhere = (cpu + 1) % std::thread::available_parallelism().map_or(1, |n| n.get());
        let (tx, rx) = mpsc::channel();
        let run = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let keep = run.clone();
        // A thread that sleeps throughout: the event's cost is all the
        // kernel keeps switched on for it, none of it in this thread.
        let (park_tx, park_rx) = mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            let _ = pin(elsewhere);
            // SAFETY: gettid has no preconditions.
            let _ = tx.send(unsafe { libc::gettid() });
            let _ = park_rx.recv();
        });
        let t = rx.recv().context("the other thread")?;
        let first = Event::open(t, 16384).context("perf_event_open (root or CAP_PERFMON)")?;
        let h = std::thread::spawn(move || {
            let _ = pin(elsewhere);
            let mut held = Some(first);
            while keep.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if cycle {
                    drop(held.take());
                    if let Ok(mut e) = Event::open(t, 16384) {
                        let _ = e.arm();
                        drop(e);
                    }
                }
            }
            drop(held);
            drop(park_tx);
            let _ = sleeper.join();
        });
        Ok(Other::Thread(run, Some(h)))
    }
}

impl Other {
    /// A thread on a CPU other than `cpu` that computes for about 0.5 ms
    /// and sleeps 0.1 ms, over and over (mostly running when looked at),
    /// read 10 times a second by pileup's passive capture in another
    /// process on `cpu`, so that the busy thread is on its CPU when looked
    /// at. The capture loads its eBPF program and opens its events before
    /// the window; its CPU time during the window is taken out of it.
    fn passive(cpu: usize, capture: bool) -> Result<Other> {
        let elsewhere = (cpu + 1) % std::thread::available_parallelism().map_or(1, |n| n.get());
        let run = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (tx, rx) = mpsc::channel();
        let keep = run.clone();
        let busy = std::thread::spawn(move || {
            let _ = pin(elsewhere);
            // SAFETY: gettid has no preconditions.
            let _ = tx.send(unsafe { libc::gettid() });
            while keep.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(500) {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        let t = rx.recv().context("the busy thread")?;
        let mut child = Command::new(std::env::current_exe()?)
            .args([if capture { "--capture" } else { "--wake" }, &t.to_string(), "--cpu", &cpu.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        // Its first line says the first capture is done.
        let mut ready = [0u8; 6];
        child
            .stdout
            .as_mut()
            .context("the capture's output")?
            .read_exact(&mut ready)
            .context("the capture did not start")?;
        Ok(Other::Capture(child, run, Some(busy)))
    }

    /// CPU time the capture process has used so far (ns).
    fn capture_cpu_ns(&self) -> u64 {
        match self {
            // Its only busy thread is its first.
            Other::Capture(child, ..) => pileup_engine::parts::schedstat(child.id() as i32, child.id() as i32)
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0),
            _ => 0,
        }
    }
}

/// Read thread `tid` of the parent process with pileup's passive capture
/// 10 times a second, from CPU `cpu`, until killed; "ready\n" once the
/// first capture is done. Without `capture`, only wake 10 times a second
/// after that first capture (the control for the capture's wake-ups).
fn capture_loop(tid: i32, cpu: usize, capture: bool) -> Result<()> {
    use pileup_engine::parts::Passive;
    use pileup_engine::{CaptureOptions, Mode};
    pin(cpu)?;
    // SAFETY: getppid has no preconditions.
    let pid = unsafe { libc::getppid() };
    let maps = pileup_engine::parts::read_maps(pid).context("the parent's maps")?;
    let opts = CaptureOptions { mode: Mode::Passive, ..Default::default() };
    let mut passive = Passive::default();
    // The row is named for CPU events and the iterator: a fallback to an
    // event attached to the thread would measure something else.
    let mut runnable = false;
    for _ in 0..50 {
        let st = passive.capture(pid, &[tid], &maps, &opts).stats;
        if st.threads_sampled_by_thread_event > 0 {
            bail!(
                "the capture fell back to perf events attached to the thread ({})",
                passive.fallback_reason().unwrap_or_default()
            );
        }
        runnable |= st.threads_sampled_on_cpu + st.threads_read_queued > 0;
        if runnable {
            break;
        }
    }
    if !runnable {
        bail!("the capture never found the busy thread runnable in 50 looks");
    }
    println!("ready");
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if capture {
            let _ = passive.capture(pid, &[tid], &maps, &opts);
        }
    }
}

impl Drop for Other {
    fn drop(&mut self) {
        if let Other::Capture(child, ..) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Other::Thread(run, h) | Other::Capture(_, run, h) = self {
            run.store(false, std::sync::atomic::Ordering::Relaxed);
            if let Some(h) = h.take() {
                let _ = h.join();
            }
        }
    }
}
