//! Scan: the server's thread states from /proc every 100 ms, between the
//! polls and at no SQL cost, to catch pile-ups as they begin and short
//! stalls that a once-a-second poll misses.
//!
//! Only the client connections' threads are looked at (their OS thread
//! ids come with each poll's processlist summary, and threads started
//! since the poll read the thread list count until the next one names
//! them: [`Clients`]), so the server's own threads waiting for work
//! (InnoDB's, its thread pools) never count. A
//! connection thread that waits for a lock (a row, metadata, global or
//! table lock, or a mutex) sleeps in a futex wait; an idle connection
//! sleeps in `poll()`; a thread waiting for the disk is in state D; one that
//! sleeps between retries (in `nanosleep`) waits for something too. A
//! thread that has just left for the server's thread cache (until the next
//! poll drops it from the list) also sleeps in a futex wait, on the cache's
//! condition variable: those are told by the futex word's address
//! (`/proc/PID/task/TID/syscall`, named by the caller) and left out. So the number of threads in a futex wait or in D, above its usual
//! level, is the number held up: [`Census`] counts them, and [`Detector`]
//! turns the counts into pile-ups with a beginning and an end to the scan.
//!
//! Cost: a thread that has not run since the last scan (its `schedstat`
//! unchanged) is in the same wait as then, so it costs one read; others
//! cost up to four (`schedstat`, `stat`, `wchan`, `syscall`).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The threads that serve clients, as the last poll listed them: its
/// connections' threads, and every thread started since the poll read the
/// process's thread list (a connection that came after the list, until the
/// next poll says what it is: a pile-up of new connections is seen at once).
#[derive(Debug, Clone, Default)]
pub struct Clients {
    pub conns: std::collections::HashSet<i32>,
    /// Every thread of the process just before the connections were listed.
    pub known: std::collections::HashSet<i32>,
}

impl Clients {
    pub fn includes(&self, tid: i32) -> bool {
        self.conns.contains(&tid) || (!self.known.is_empty() && !self.known.contains(&tid))
    }
}

/// One look at every thread of the server.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Census {
    pub unix: f64,
    pub threads: u32,
    /// State R.
    pub running: u32,
    /// Asleep in a futex wait (locks and condition variables) or between
    /// retries (nanosleep).
    pub futex: u32,
    /// State D: waiting for the disk (or another uninterruptible wait).
    pub disk: u32,
    /// In a futex wait on the thread cache: idle, not held up (not in `futex`).
    pub parked: u32,
    /// CPU time of the server's main thread, which accepts connections,
    /// since it started (ns): it moves with the connection rate.
    pub acceptor_ns: Option<u64>,
}

impl Census {
    /// Threads held up: in a futex wait or in D.
    pub fn blocked(&self) -> u32 {
        self.futex + self.disk
    }

    /// Client threads not idle: running or held up.
    pub fn active(&self) -> u32 {
        self.running + self.blocked()
    }
}

/// What one thread was doing at the last scan.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Seen {
    Running,
    Disk,
    Futex,
    Parked,
    Other,
}

/// One thread's open files and what it was doing.
struct Thread {
    schedstat: File,
    stat: File,
    wchan: File,
    syscall: Option<File>,
    /// `schedstat`'s timeslice count at the last scan, and the class then.
    last: Option<(u64, Seen)>,
}

/// Reads thread states of one process. Keeps each thread's files open
/// and re-reads them from offset 0 (procfs regenerates them).
pub struct ThreadScan {
    pid: i32,
    threads: HashMap<i32, Thread>,
    /// Whether a futex word is where idle threads park (the thread cache).
    parked_at: Box<dyn FnMut(u64) -> bool>,
    parked_cache: HashMap<u64, bool>,
    /// The main thread's `schedstat`.
    acceptor: Option<File>,
    buf: Vec<u8>,
}

impl ThreadScan {
    /// `parked_at` tells a futex word that idle threads wait on; without
    /// one (`|_| false`), every futex wait counts.
    pub fn new(pid: i32, parked_at: Box<dyn FnMut(u64) -> bool>) -> ThreadScan {
        let acceptor = File::open(format!("/proc/{pid}/task/{pid}/schedstat")).ok();
        ThreadScan {
            pid,
            threads: HashMap::new(),
            parked_at,
            parked_cache: HashMap::new(),
            acceptor,
            buf: vec![0; 1024],
        }
    }

    /// One census of the threads `only` includes (the client connections; all
    /// threads when `None`); an error when the process is gone.
    pub fn census(&mut self, unix: f64, only: Option<&Clients>) -> std::io::Result<Census> {
        let dir = format!("/proc/{}/task", self.pid);
        let mut c = Census { unix, ..Default::default() };
        c.acceptor_ns = self.acceptor.as_ref().and_then(|f| {
            let n = f.read_at(&mut self.buf, 0).ok()?;
            std::str::from_utf8(&self.buf[..n]).ok()?.split_whitespace().next()?.parse().ok()
        });
        let mut seen = Vec::new();
        for e in std::fs::read_dir(&dir)? {
            let Some(tid) = e?.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            seen.push(tid);
            if only.is_some_and(|o| !o.includes(tid)) {
                continue; // a server thread: its waits are not a client's
            }
            let t = match self.threads.entry(tid) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let open = |f: &str| File::open(format!("{dir}/{tid}/{f}"));
                    match (open("schedstat"), open("stat"), open("wchan")) {
                        (Ok(schedstat), Ok(stat), Ok(wchan)) => {
                            let syscall = open("syscall").ok();
                            e.insert(Thread { schedstat, stat, wchan, syscall, last: None })
                        }
                        _ => continue, // the thread ended meanwhile
                    }
                }
            };
            let Some(class) = classify(t, &mut self.buf, &mut self.parked_at, &mut self.parked_cache) else {
                continue;
            };
            c.threads += 1;
            match class {
                Seen::Running => c.running += 1,
                Seen::Disk => c.disk += 1,
                Seen::Futex => c.futex += 1,
                Seen::Parked => c.parked += 1,
                Seen::Other => {}
            }
        }
        if seen.is_empty() {
            return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "the server process is gone"));
        }
        if self.threads.len() > seen.len() {
            self.threads.retain(|t, _| seen.contains(t));
        }
        Ok(c)
    }
}

/// What a thread is doing now; `None` if it ended.
fn classify(
    t: &mut Thread,
    buf: &mut [u8],
    parked_at: &mut Box<dyn FnMut(u64) -> bool>,
    cache: &mut HashMap<u64, bool>,
) -> Option<Seen> {
    let n = t.schedstat.read_at(buf, 0).ok()?;
    let slices = std::str::from_utf8(&buf[..n]).ok()?.split_whitespace().nth(2)?.parse::<u64>().ok()?;
    // Not scheduled since the last scan: still in the same wait.
    if let Some((last, class)) = t.last {
        if last == slices && class != Seen::Running {
            return Some(class);
        }
    }
    let n = t.stat.read_at(buf, 0).ok()?;
    let class = match stat_state(&buf[..n])? {
        b'R' => Seen::Running,
        b'D' => Seen::Disk,
        b'S' => {
            let n = t.wchan.read_at(buf, 0).ok()?;
            if sleeping(&buf[..n]) {
                // A client's thread sleeping between retries waits for
                // something (InnoDB polls a file another thread extends, or
                // a free page, this way); an idle one sleeps in poll().
                Seen::Futex
            } else if !buf[..n].starts_with(b"futex") {
                Seen::Other
            } else {
                let word = t.syscall.as_ref().and_then(|f| f.read_at(buf, 0).ok()).and_then(|n| futex_word(&buf[..n]));
                match word {
                    Some(w) if *cache.entry(w).or_insert_with(|| parked_at(w)) => Seen::Parked,
                    _ => Seen::Futex,
                }
            }
        }
        // Stopped by a tracer (a capture taking its stack, for a few
        // milliseconds): still in the wait it was in.
        b't' | b'T' => return Some(t.last.map_or(Seen::Other, |l| l.1)),
        _ => Seen::Other,
    };
    t.last = Some((slices, class));
    Some(class)
}

/// A `wchan` of a thread in nanosleep() or clock_nanosleep().
fn sleeping(wchan: &[u8]) -> bool {
    wchan.starts_with(b"hrtimer_nanosleep") || wchan.starts_with(b"do_nanosleep")
}

/// The futex word of a thread blocked in `futex()` (or restarting it),
/// from its `/proc/*/syscall` line: "NR arg0 arg1 … sp pc".
fn futex_word(line: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(line).ok()?;
    let mut f = s.split_whitespace();
    let nr: u64 = f.next()?.parse().ok()?;
    // x86_64: futex 202, restart_syscall 219; aarch64: futex 98, restart_syscall 128.
    let futex = if cfg!(target_arch = "aarch64") { nr == 98 || nr == 128 } else { nr == 202 || nr == 219 };
    if !futex {
        return None;
    }
    u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()
}

/// The state letter of a `/proc/*/stat` line: the first field after the
/// command name, which is in parentheses and may itself hold spaces or ')'.
fn stat_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

/// A stall that began and ended between two polls or across several: a
/// pile-up the scan saw, or a trigger's condition (a stall class's
/// signature) that held for less than its hold.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stall {
    /// The first scan (or poll) that saw it, and the first that no longer did.
    pub began_unix: f64,
    pub ended_unix: f64,
    /// Most threads held up at once, and the usual number (a pile-up's).
    pub peak_blocked: u32,
    pub baseline: u32,
    /// What it was, when a trigger saw it: the trigger's name (its stall
    /// class) or text. `None`: a pile-up the thread scan saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
}

impl Stall {
    pub fn ms(&self) -> f64 {
        (self.ended_unix - self.began_unix) * 1000.0
    }

    /// What it was, in a few words.
    pub fn describe(&self) -> String {
        match &self.what {
            Some(w) => w.clone(),
            None => format!("pile-up, {} threads held up at peak (usually {})", self.peak_blocked, self.baseline),
        }
    }
}

/// What a scan tells the watch loop.
#[derive(Debug, Clone, PartialEq)]
pub enum Pulse {
    /// Threads held up reached the threshold on two scans running.
    Began {
        began_unix: f64,
        blocked: u32,
        baseline: u32,
    },
    /// The pile-up has lasted `LASTING_SECS`: a stall, whatever the polls say.
    Lasting {
        began_unix: f64,
        blocked: u32,
        baseline: u32,
    },
    Ended(Stall),
    /// Client threads stirred (far more of them running or held up than
    /// usual, short of a pile-up) or the main thread's accepting took far
    /// more CPU than usual: something may be starting, worth a poll now.
    Stir {
        unix: f64,
        /// What stirred, in a few words.
        why: &'static str,
    },
}

/// Least time between two [`Pulse::Stir`]s.
pub const STIR_GAP_SECS: f64 = 0.5;

/// A pile-up that lasts this long is a stall in its own right.
pub const LASTING_SECS: f64 = 2.0;

/// A pile-up still there after this long has become the usual level (a
/// new pool of threads that wait, say): it is ended there and the usual
/// level learnt again, so the scan does not stay blind.
pub const RELEARN_SECS: f64 = 600.0;

/// Turns censuses into pile-ups: threads held up at least `threshold`
/// above their median of the last minute (outside pile-ups) on two scans
/// running, until two scans running are under it (one scan under is a
/// waiter between two waits, not the end). Needs 10 scans of history
/// before it judges.
#[derive(Debug)]
pub struct Detector {
    threshold: u32,
    hist: VecDeque<(f64, u32)>,
    first_over: Option<f64>,
    open: Option<Open>,
    stir: Stirring,
}

/// The usual level of client threads at work and of the main thread's
/// CPU, for [`Pulse::Stir`].
#[derive(Debug, Default)]
struct Stirring {
    active: VecDeque<(f64, f64)>,
    acceptor: VecDeque<(f64, f64)>,
    /// The last census's time and main-thread CPU.
    last: Option<(f64, u64)>,
    last_stir: Option<f64>,
    /// The last census was far above the usual too (a stir needs two
    /// running: one is a blip).
    was_far: bool,
}

/// Is `v` far above the usual `hist` (its median plus `floor` and four
/// spreads)? Every value then goes into the history, which keeps the last
/// minute: a level that lasts becomes the usual within half a minute, so a
/// lasting rise stirs for that long, not for ever.
fn far_above(hist: &mut VecDeque<(f64, f64)>, t: f64, v: f64, floor: f64) -> bool {
    let mut vals: Vec<f64> = hist.iter().map(|h| h.1).collect();
    let far = crate::trigger::Usual::of(&mut vals).is_some_and(|u| v >= u.baseline + floor.max(4.0 * u.spread));
    hist.push_back((t, v));
    while hist.front().is_some_and(|h| t - h.0 > 60.0) {
        hist.pop_front();
    }
    far
}

impl Stirring {
    /// Client threads at work at least this many above usual stir.
    const ACTIVE_FLOOR: f64 = 4.0;
    /// The main thread busy this share of a core above usual stirs.
    const ACCEPTOR_FLOOR: f64 = 0.02;

    fn step(&mut self, c: &Census) -> Option<Pulse> {
        let active = far_above(&mut self.active, c.unix, f64::from(c.active()), Self::ACTIVE_FLOOR);
        let acceptor = match (self.last, c.acceptor_ns) {
            (Some((t0, n0)), Some(n1)) if c.unix > t0 && n1 >= n0 => {
                let share = (n1 - n0) as f64 / 1e9 / (c.unix - t0);
                far_above(&mut self.acceptor, c.unix, share, Self::ACCEPTOR_FLOOR)
            }
            _ => false,
        };
        self.last = c.acceptor_ns.map(|n| (c.unix, n));
        let why = match (active, acceptor) {
            (true, _) => "client threads at work",
            (false, true) => "connections accepted",
            (false, false) => {
                self.was_far = false;
                return None;
            }
        };
        if !std::mem::replace(&mut self.was_far, true) {
            return None;
        }
        if self.last_stir.is_some_and(|t| c.unix - t < STIR_GAP_SECS) {
            return None;
        }
        self.last_stir = Some(c.unix);
        Some(Pulse::Stir { unix: c.unix, why })
    }
}

#[derive(Debug)]
struct Open {
    began: f64,
    peak: u32,
    baseline: u32,
    lasting_announced: bool,
    /// The scan that first found it under the threshold, if the last did.
    first_under: Option<f64>,
}

impl Detector {
    pub fn new(threshold: u32) -> Detector {
        Detector {
            threshold: threshold.max(1),
            hist: VecDeque::new(),
            first_over: None,
            open: None,
            stir: Stirring::default(),
        }
    }

    fn baseline(&self) -> Option<u32> {
        if self.hist.len() < 10 {
            return None;
        }
        let mut v: Vec<u32> = self.hist.iter().map(|h| h.1).collect();
        v.sort_unstable();
        Some(v[v.len() / 2])
    }

    /// One census. `disturbed`: a capture was taking stacks meanwhile, so
    /// threads it stopped may show as running: such a census may find a
    /// pile-up under way but never ends one.
    pub fn step(&mut self, c: &Census, disturbed: bool) -> Option<Pulse> {
        // A capture's own stopping and starting of threads is no stir.
        let stir = if disturbed { None } else { self.stir.step(c) };
        self.pile_up(c, disturbed).or(stir)
    }

    fn pile_up(&mut self, c: &Census, disturbed: bool) -> Option<Pulse> {
        let blocked = c.blocked();
        if let Some(o) = &mut self.open {
            let relearn = c.unix - o.began >= RELEARN_SECS;
            if blocked >= o.baseline + self.threshold && !relearn {
                o.first_under = None;
                o.peak = o.peak.max(blocked);
                if !o.lasting_announced && c.unix - o.began >= LASTING_SECS {
                    o.lasting_announced = true;
                    return Some(Pulse::Lasting { began_unix: o.began, blocked, baseline: o.baseline });
                }
                return None;
            }
            if !relearn && (o.first_under.is_none() || disturbed) {
                o.first_under.get_or_insert(c.unix);
                return None;
            }
            let ended_unix = o.first_under.unwrap_or(c.unix);
            let s = Stall { began_unix: o.began, ended_unix, peak_blocked: o.peak, baseline: o.baseline, what: None };
            if relearn {
                self.hist.clear();
            }
            self.open = None;
            self.first_over = None;
            return Some(Pulse::Ended(s));
        }
        let baseline = self.baseline();
        if let Some(b) = baseline.filter(|b| blocked >= b + self.threshold) {
            match self.first_over {
                None => self.first_over = Some(c.unix),
                Some(first) => {
                    self.open = Some(Open {
                        began: first,
                        peak: blocked,
                        baseline: b,
                        lasting_announced: false,
                        first_under: None,
                    });
                    return Some(Pulse::Began { began_unix: first, blocked, baseline: b });
                }
            }
            return None;
        }
        self.first_over = None;
        self.hist.push_back((c.unix, blocked));
        while self.hist.front().is_some_and(|h| c.unix - h.0 > 60.0) {
            self.hist.pop_front();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn census(t: f64, futex: u32) -> Census {
        Census { unix: t, threads: 60, running: 1, futex, ..Default::default() }
    }

    #[test]
    fn state_letter_survives_odd_command_names() {
        assert_eq!(stat_state(b"4007 (mariadbd) S 1 4006"), Some(b'S'));
        assert_eq!(stat_state(b"4007 (a) b) (c) D 1 4006"), Some(b'D'));
        assert_eq!(stat_state(b"garbage"), None);
        assert_eq!(
            futex_word(b"202 0x55e22fa69248 0x189 0x0 0x7fce 0x0 0xffffffff 0x7fce9 0x7fce"),
            Some(0x55e22fa69248)
        );
        assert_eq!(futex_word(b"7 0x55e2704b89b8 0x1 0x7530 0x0 0x0 0x0 0x7fce 0x7fce"), None, "poll");
        assert_eq!(futex_word(b"running"), None);
    }

    #[test]
    fn a_short_pile_up_is_timed_to_the_scan_and_a_blip_is_not_one() {
        let mut d = Detector::new(16);
        let mut t = 0.0;
        let mut pulses = vec![];
        let feed = |d: &mut Detector, futex: u32, t: &mut f64, pulses: &mut Vec<Pulse>| {
            if let Some(p) = d.step(&census(*t, futex), false).filter(|p| !matches!(p, Pulse::Stir { .. })) {
                pulses.push(p);
            }
            *t += 0.1;
        };
        // No judgement before 10 scans of history, however high.
        for _ in 0..9 {
            feed(&mut d, 40, &mut t, &mut pulses);
        }
        assert!(pulses.is_empty());
        let mut d = Detector::new(16);
        for i in 0..30 {
            feed(&mut d, 20 + i % 3, &mut t, &mut pulses);
        }
        // A single scan over the threshold is a blip.
        feed(&mut d, 60, &mut t, &mut pulses);
        feed(&mut d, 21, &mut t, &mut pulses);
        assert!(pulses.is_empty(), "{pulses:?}");
        // Four scans over: began at the first, ended at the first under.
        let began = t;
        for f in [45, 50, 48, 40] {
            feed(&mut d, f, &mut t, &mut pulses);
        }
        // One scan under between waits does not end it.
        feed(&mut d, 30, &mut t, &mut pulses);
        feed(&mut d, 44, &mut t, &mut pulses);
        let ended = t;
        feed(&mut d, 22, &mut t, &mut pulses);
        assert_eq!(pulses.len(), 1, "{pulses:?}");
        feed(&mut d, 21, &mut t, &mut pulses);
        assert_eq!(pulses.len(), 2, "{pulses:?}");
        assert!(matches!(pulses[0], Pulse::Began { began_unix, blocked: 50, baseline: 21 } if began_unix == began));
        let Pulse::Ended(s) = &pulses[1] else { panic!("{pulses:?}") };
        assert_eq!((s.began_unix, s.ended_unix, s.peak_blocked, s.baseline), (began, ended, 50, 21));
        assert!((s.ms() - 600.0).abs() < 1e-6);
        // One that lasts is announced once, after LASTING_SECS.
        pulses.clear();
        for _ in 0..40 {
            feed(&mut d, 60, &mut t, &mut pulses);
        }
        assert_eq!(pulses.iter().filter(|p| matches!(p, Pulse::Lasting { .. })).count(), 1, "{pulses:?}");
        assert!(matches!(pulses[0], Pulse::Began { .. }));
        // Still there after RELEARN_SECS: ended, and the level learnt again.
        pulses.clear();
        for _ in 0..(RELEARN_SECS * 10.0) as usize {
            feed(&mut d, 60, &mut t, &mut pulses);
        }
        assert!(matches!(pulses.last(), Some(Pulse::Ended(s)) if s.ms() >= RELEARN_SECS * 1000.0), "{pulses:?}");
        for _ in 0..30 {
            feed(&mut d, 60, &mut t, &mut pulses);
        }
        assert!(matches!(pulses.last(), Some(Pulse::Ended(_))), "60 is the usual level now: {:?}", pulses.last());
    }

    #[test]
    fn a_capture_taking_stacks_never_ends_a_pile_up() {
        let mut d = Detector::new(8);
        let t = std::cell::Cell::new(0.0);
        let step = |d: &mut Detector, futex: u32, disturbed: bool| {
            t.set(t.get() + 0.1);
            d.step(&census(t.get(), futex), disturbed).filter(|p| !matches!(p, Pulse::Stir { .. }))
        };
        for _ in 0..20 {
            assert_eq!(step(&mut d, 0, false), None);
        }
        assert_eq!(step(&mut d, 16, false), None);
        assert!(matches!(step(&mut d, 16, false), Some(Pulse::Began { .. })));
        // The threads the capture stops show as running meanwhile.
        for _ in 0..5 {
            assert_eq!(step(&mut d, 0, true), None);
        }
        // Still held up once it is done: the same pile-up.
        assert_eq!(step(&mut d, 16, false), None);
        // It ended while a capture ran: timed to the first scan under.
        let first_under = t.get() + 0.1;
        assert_eq!(step(&mut d, 0, true), None);
        assert_eq!(step(&mut d, 0, true), None);
        let Some(Pulse::Ended(s)) = step(&mut d, 0, false) else { panic!("not ended") };
        assert!((s.ended_unix - first_under).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn threads_at_work_or_a_busy_acceptor_stir_short_of_a_pile_up() {
        let mut d = Detector::new(16);
        let mut t = 0.0;
        let mut ns = 0u64;
        // Usual: 2 to 4 threads at work, the main thread 0.1% busy.
        let mut step = |d: &mut Detector, running: u32, acceptor_share: f64| {
            t += 0.1;
            ns += (acceptor_share * 0.1 * 1e9) as u64;
            let c = Census { unix: t, threads: 60, running, acceptor_ns: Some(ns), ..Default::default() };
            d.step(&c, false)
        };
        for i in 0..30 {
            assert_eq!(step(&mut d, 2 + i % 3, 0.001), None);
        }
        // Three more at work than usual is ordinary; ten on one scan is a
        // blip; on two running, a stir.
        assert_eq!(step(&mut d, 6, 0.001), None);
        assert_eq!(step(&mut d, 14, 0.001), None);
        assert_eq!(step(&mut d, 3, 0.001), None);
        assert_eq!(step(&mut d, 14, 0.001), None);
        assert!(matches!(step(&mut d, 14, 0.001), Some(Pulse::Stir { why: "client threads at work", .. })));
        // At most one per STIR_GAP_SECS.
        assert_eq!(step(&mut d, 14, 0.001), None);
        for _ in 0..5 {
            step(&mut d, 3, 0.001);
        }
        // The acceptor busy a quarter of a core: a connection storm starting.
        assert_eq!(step(&mut d, 3, 0.25), None);
        assert!(matches!(step(&mut d, 3, 0.25), Some(Pulse::Stir { why: "connections accepted", .. })));
        // A capture taking stacks stirs nothing.
        for _ in 0..5 {
            step(&mut d, 3, 0.001);
        }
        let c = Census { unix: 9.0, running: 30, ..Default::default() };
        assert_eq!(d.step(&c, true), None);
        // A level that lasts becomes the usual: it stops stirring within
        // half a minute of the window.
        let mut stirs = 0;
        for _ in 0..600 {
            if matches!(step(&mut d, 14, 0.001), Some(Pulse::Stir { .. })) {
                stirs += 1;
            }
        }
        assert!((1..=70).contains(&stirs), "{stirs} stirs in a minute at a new level");
        assert_eq!(step(&mut d, 14, 0.001), None);
    }

    #[test]
    fn census_of_this_process() {
        // A thread parked on a condition variable is told by its futex word.
        let pair = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let p2 = pair.clone();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel::<i32>();
        let parked = std::thread::spawn(move || {
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            tid_tx.send(me.file_name().unwrap().to_str().unwrap().parse().unwrap()).unwrap();
            let mut done = p2.0.lock().unwrap();
            while !*done {
                done = p2.1.wait(done).unwrap();
            }
        });
        // Waited for in its futex wait. Only that thread is looked at where
        // the count must be exact: other tests of this binary start and end
        // threads of their own meanwhile (one asleep counts as a futex wait).
        let parked_tid = tid_rx.recv().unwrap();
        let wchan = format!("/proc/self/task/{parked_tid}/wchan");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(&wchan).unwrap_or_default().starts_with("futex") {
            assert!(std::time::Instant::now() < deadline, "the thread never waited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut s = ThreadScan::new(std::process::id() as i32, Box::new(|_| false));
        let c = s.census(1.0, None).unwrap();
        assert!(c.threads >= 2 && c.running >= 1 && c.futex >= 1, "{c:?}");
        let just = Clients { conns: [parked_tid].into(), known: Default::default() };
        let mut s = ThreadScan::new(std::process::id() as i32, Box::new(|_| true));
        let c = s.census(1.0, Some(&just)).unwrap();
        assert!(c.parked == 1 && c.futex == 0, "{c:?}");
        // An unchanged thread keeps its class.
        assert_eq!(s.census(2.0, Some(&just)).unwrap().parked, 1);
        assert_eq!(s.census(2.5, Some(&just)).unwrap().parked, 1);
        *pair.0.lock().unwrap() = true;
        pair.1.notify_all();
        parked.join().unwrap();
        // Only the threads asked for.
        let me = std::process::id() as i32;
        let all: std::collections::HashSet<i32> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        // Other tests of this binary start threads of their own meanwhile,
        // which count too (they are not in the list): the count is exact
        // when no other thread came or went around the census.
        let appeared = |known: &std::collections::HashSet<i32>| -> std::collections::BTreeSet<i32> {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|t| !known.contains(t))
                .collect()
        };
        let only = Clients { conns: [me].into(), known: all.clone() };
        let census = |s: &mut ThreadScan, at: f64, expect: usize| {
            let before = appeared(&all);
            let n = s.census(at, Some(&only)).unwrap().threads as usize;
            let after = appeared(&all);
            if before == after && before.len() + 1 == expect {
                assert_eq!(n, expect);
            } else {
                assert!(n >= expect, "{n}");
            }
        };
        census(&mut s, 3.0, 1);
        // A thread started after the list counts until the next one.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let late = std::thread::spawn(move || rx.recv());
        std::thread::sleep(std::time::Duration::from_millis(50));
        census(&mut s, 4.0, 2);
        tx.send(()).unwrap();
        late.join().unwrap().unwrap();
        assert!(ThreadScan::new(i32::MAX, Box::new(|_| false)).census(1.0, None).is_err());
    }
}
