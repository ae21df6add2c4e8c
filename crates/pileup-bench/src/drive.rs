//! The load generator: N threads, each with its own client, repeating one
//! operation for a time; what they did, what it cost this process, and
//! what it cost the server.
//!
//! Every thread connects first and waits for the others, so a point's
//! window holds only the operation. The window's first part is a warm-up
//! (not counted). The driver measures its own CPU over the counted window
//! (`getrusage`), so a client that saturates the machine is never taken
//! for a server limit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

/// One client of an experiment: its connection and what it repeats.
pub trait Client: Send {
    /// One operation (a statement, a transaction, a connect and
    /// disconnect). An error ends the run when the server is gone,
    /// otherwise it is counted and the operation repeated.
    fn op(&mut self) -> Result<(), OpError>;
}

/// Why an operation failed.
#[derive(Debug, Clone)]
pub enum OpError {
    /// The statement failed and the client can go on (a deadlock, a lock
    /// wait timeout): counted.
    Retry(String),
    /// The connection or the server is gone: the run stops.
    Gone(String),
}

/// What a window measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Measured {
    pub threads: u32,
    /// Operations completed in the counted window.
    pub ops: u64,
    /// Operations that failed and were repeated.
    pub errors: u64,
    pub seconds: f64,
    pub ops_per_s: f64,
    /// This process's CPU (user + system) over the counted window.
    pub driver_cpu_s: f64,
    /// The server process's CPU over the window, when it is on this host.
    pub server_cpu_s: Option<f64>,
    /// The time `server_cpu_s` was read over: the window and the reads
    /// themselves (which take a while under load: the server's processes
    /// are many and the CPUs busy).
    pub server_seconds: f64,
    /// How much the server counter of [`Probes`] moved over the window.
    pub counted: Option<u64>,
    /// A sample of operation latencies: median and 99th percentile, ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// How a window runs.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub warmup: Duration,
    pub measure: Duration,
}

/// Why a window could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("connecting client {thread} of {threads}: {why}")]
    Connect { thread: u32, threads: u32, why: String },
    /// The server went away mid-window; what was counted until then.
    #[error("the server went away after {:.1} s of the window: {why}", partial.seconds)]
    Gone { why: String, partial: Box<Measured> },
}

/// What the client threads and the window share.
#[derive(Default)]
struct Shared {
    /// Set once every client is connected.
    started: AtomicBool,
    /// Set while the counted window runs.
    counting: AtomicBool,
    stop: AtomicBool,
    ops: AtomicU64,
    errors: AtomicU64,
    /// Why the server went away, from the first client that saw it.
    gone: std::sync::Mutex<Option<String>>,
}

/// Latencies kept per thread (every 16th operation, at most this many).
const LATENCY_SAMPLES: usize = 4096;

/// What a window reads besides the clients' operations, and what can end it.
#[derive(Default, Clone, Copy)]
pub struct Probes<'a> {
    /// The server's process on this host, for its CPU.
    pub server_pid: Option<i32>,
    /// A server counter, read at the counted window's edges.
    pub counter: Option<&'a (dyn Fn() -> Option<u64> + Sync)>,
    /// Set by a signal: the window ends as if the server had gone.
    pub stop: Option<&'a AtomicBool>,
}

/// Run `threads` clients made by `make` for one window.
pub fn drive<F>(threads: u32, window: Window, probes: Probes, make: F) -> Result<Measured, DriveError>
where
    F: Fn(u32) -> Result<Box<dyn Client>, String> + Sync,
{
    let mut clients = Vec::with_capacity(threads as usize);
    for t in 0..threads {
        clients.push(make(t).map_err(|why| DriveError::Connect { thread: t + 1, threads, why })?);
    }
    let sh = Arc::new(Shared::default());
    let mut handles = vec![];
    for mut c in clients {
        let t = sh.clone();
        let h = std::thread::Builder::new()
            .name("pileup-bench-client".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let mut lat: Vec<f32> = Vec::new();
                let mut n = 0u64;
                while !t.started.load(Ordering::Relaxed) && !t.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                while !t.stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    let r = c.op();
                    let on = t.counting.load(Ordering::Relaxed);
                    match r {
                        Ok(()) if on => {
                            t.ops.fetch_add(1, Ordering::Relaxed);
                            // The first operation and every 16th after it.
                            if n.is_multiple_of(16) && lat.len() < LATENCY_SAMPLES {
                                lat.push(at.elapsed().as_secs_f32() * 1e3);
                            }
                            n += 1;
                        }
                        Ok(()) => {}
                        Err(OpError::Retry(_)) => {
                            if on {
                                t.errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(OpError::Gone(why)) => {
                            t.gone.lock().unwrap().get_or_insert(why);
                            t.stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
                // The connection closes on this thread, outside the window.
                drop(c);
                lat
            })
            .map_err(|e| {
                // The threads already started see the stop and end.
                sh.stop.store(true, Ordering::Relaxed);
                DriveError::Connect {
                    thread: handles.len() as u32 + 1,
                    threads,
                    why: format!("starting its thread: {e}"),
                }
            })?;
        handles.push(h);
    }
    sh.started.store(true, Ordering::Relaxed);
    sleep_unless(&sh, probes.stop, window.warmup);
    let cpu0 = own_cpu_s();
    let read0 = Instant::now();
    let srv0 = probes.server_pid.and_then(process_cpu_s);
    let count0 = probes.counter.and_then(|c| c());
    let t0 = Instant::now();
    sh.counting.store(true, Ordering::Relaxed);
    sleep_unless(&sh, probes.stop, window.measure);
    sh.counting.store(false, Ordering::Relaxed);
    let seconds = t0.elapsed().as_secs_f64();
    let done = sh.ops.load(Ordering::Relaxed);
    let count1 = probes.counter.and_then(|c| c());
    let cpu1 = own_cpu_s();
    let srv1 = probes.server_pid.and_then(process_cpu_s);
    let server_seconds = read0.elapsed().as_secs_f64();
    sh.stop.store(true, Ordering::Relaxed);
    let mut lat: Vec<f32> = handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect();
    lat.sort_by(f32::total_cmp);
    let pct = |p: f64| lat.get(((lat.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f32::NAN) as f64;
    let m = Measured {
        threads,
        ops: done,
        errors: sh.errors.load(Ordering::Relaxed),
        seconds,
        ops_per_s: done as f64 / seconds.max(1e-9),
        driver_cpu_s: cpu1 - cpu0,
        server_cpu_s: srv0.zip(srv1).map(|(a, b)| b - a),
        server_seconds,
        counted: count0.zip(count1).map(|(a, b)| b.saturating_sub(a)),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
    };
    let gone = sh.gone.lock().unwrap().take();
    match gone {
        Some(why) => Err(DriveError::Gone { why, partial: Box::new(m) }),
        None => Ok(m),
    }
}

/// Sleep `d`, or less when the clients stop or a signal says so (then
/// the clients are stopped and the window reads as ended by it).
fn sleep_unless(sh: &Shared, signal: Option<&AtomicBool>, d: Duration) {
    let end = Instant::now() + d;
    while !sh.stop.load(Ordering::Relaxed) {
        if signal.is_some_and(|s| s.load(Ordering::Relaxed)) {
            sh.gone.lock().unwrap().get_or_insert_with(|| "stopped by a signal".into());
            sh.stop.store(true, Ordering::Relaxed);
            return;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// This process's CPU time (user + system), seconds.
pub fn own_cpu_s() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// A server's CPU time (user + system), seconds, from /proc: the process,
/// the children it has reaped, and its live children (PostgreSQL runs a
/// process per connection; the CPU of one that exits moves to its parent's
/// reaped-children count, so nothing is counted twice or lost).
pub fn process_cpu_s(pid: i32) -> Option<f64> {
    let mut total = stat_ticks(pid)?.1;
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
            if child == pid {
                continue;
            }
            if let Some((ppid, ticks)) = stat_ticks(child) {
                if ppid == pid {
                    total += ticks;
                }
            }
        }
    }
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(total / hz)
}

/// A process's parent and its CPU ticks with its reaped children's.
fn stat_ticks(pid: i32) -> Option<(i32, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): ppid is the
    // 4th field; utime, stime, cutime, cstime the 14th to 17th.
    let f: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    let ticks: f64 = (11..15).map(|i| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)).sum();
    Some((f.get(1)?.parse().ok()?, ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sleeper(Duration, u32, u32);
    impl Client for Sleeper {
        fn op(&mut self) -> Result<(), OpError> {
            std::thread::sleep(self.0);
            self.1 += 1;
            if self.2 > 0 && self.1 == self.2 {
                return Err(OpError::Gone("server closed the connection".into()));
            }
            Ok(())
        }
    }

    #[test]
    fn a_window_counts_only_after_the_warmup() {
        let w = Window { warmup: Duration::from_millis(200), measure: Duration::from_millis(500) };
        let m = drive(4, w, Probes::default(), |_| Ok(Box::new(Sleeper(Duration::from_millis(5), 0, 0)))).unwrap();
        assert_eq!(m.threads, 4);
        // 4 threads × ~100 ops/s × 0.5 s; far fewer than with the warm-up counted.
        assert!(m.ops > 100 && m.ops <= 420, "{m:?}");
        assert!((m.seconds - 0.5).abs() < 0.2, "{m:?}");
        assert!(m.p50_ms >= 5.0, "{m:?}");
    }

    #[test]
    fn the_counter_is_read_once_at_each_edge_of_the_counted_window() {
        let reads = AtomicU64::new(0);
        // Each read finds the counter 7 higher: two reads, 7 counted.
        let counter = || Some(reads.fetch_add(1, Ordering::Relaxed) * 7 + 100);
        let w = Window { warmup: Duration::from_millis(50), measure: Duration::from_millis(100) };
        let probes = Probes { counter: Some(&counter), ..Default::default() };
        let m = drive(1, w, probes, |_| Ok(Box::new(Sleeper(Duration::from_millis(1), 0, 0)))).unwrap();
        assert_eq!(m.counted, Some(7));
        assert_eq!(reads.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_signal_ends_the_window_as_stopped() {
        let stop = AtomicBool::new(false);
        let w = Window { warmup: Duration::ZERO, measure: Duration::from_secs(30) };
        let t = Instant::now();
        let e = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                stop.store(true, Ordering::Relaxed);
            });
            let probes = Probes { stop: Some(&stop), ..Default::default() };
            drive(2, w, probes, |_| Ok(Box::new(Sleeper(Duration::from_millis(2), 0, 0)))).unwrap_err()
        });
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(matches!(e, DriveError::Gone { ref why, .. } if why == "stopped by a signal"), "{e}");
    }

    #[test]
    fn a_server_that_goes_away_ends_the_window_with_what_was_counted() {
        let w = Window { warmup: Duration::ZERO, measure: Duration::from_secs(30) };
        let t = Instant::now();
        let e = drive(2, w, Probes::default(), |_| Ok(Box::new(Sleeper(Duration::from_millis(2), 0, 50)))).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5), "the window ended early");
        match e {
            DriveError::Gone { why, partial } => {
                assert_eq!(why, "server closed the connection");
                assert!(partial.ops >= 49, "{partial:?}");
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn a_client_that_cannot_connect_is_named() {
        let w = Window { warmup: Duration::ZERO, measure: Duration::from_millis(10) };
        let e = drive(3, w, Probes::default(), |t| {
            if t == 2 {
                Err("refused".into())
            } else {
                Ok(Box::new(Sleeper(Duration::ZERO, 0, 0)))
            }
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "connecting client 3 of 3: refused");
    }

    #[test]
    fn cpu_of_this_process_is_read_both_ways() {
        let a = own_cpu_s();
        let b = process_cpu_s(std::process::id() as i32).unwrap();
        assert!(a >= 0.0 && b >= 0.0);
        assert!(process_cpu_s(-1).is_none());
    }
}
