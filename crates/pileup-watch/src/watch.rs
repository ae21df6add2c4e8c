//! The watch loop: poll → store → derive → trigger → capture.
//!
//! Polls start every `interval` (start to start) and never overlap: a poll
//! that overruns delays the next. Captures run on their own thread so polling
//! (and the history around the stall) goes on while evidence is gathered;
//! when a capture may start is [`crate::schedule`]'s to say. A capture
//! gathers ([`crate::capture`]), is judged ([`crate::verdict`]), written
//! ([`crate::capture_dir`]) and rendered ([`crate::report`]), in that order.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use pileup_conn::ConnSpec;

use crate::capture;
use crate::derive::{derive, DeriveOptions, Snapshot};
use crate::evidence::CaptureSettings;
use crate::poll::Poller;
use crate::schedule::{Limits, Scheduler};
use crate::store::{Retention, Store};
use crate::trigger::{Armed, Context, Step, Trigger};

#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub interval: Duration,
    pub data_dir: PathBuf,
    pub triggers: Vec<Trigger>,
    /// No new capture within this time of the previous one.
    pub cooldown: Duration,
    pub max_captures_per_hour: usize,
    /// Skip captures when the data dir's filesystem has less free space.
    pub min_free_bytes: u64,
    pub capture: CaptureSettings,
    pub derive: DeriveOptions,
    pub retention: Retention,
    /// Stop after this long (None: until `stop` is set).
    pub duration: Option<Duration>,
    /// Serve the latest metrics in Prometheus format on this address.
    pub listen: Option<String>,
    /// Time between thread scans ([`crate::scan`]); zero turns them off.
    pub scan_interval: Duration,
    /// Threads held up above their usual number that make a pile-up.
    pub pileup_threads: u32,
}

/// The pile-up threshold that goes with the default triggers: as many
/// threads as the running-threads trigger.
pub fn default_pileup_threads(cpus: usize) -> u32 {
    (4 * cpus).max(16) as u32
}

/// Short stalls within this window that make the next one worth a capture.
pub const SHORT_STALL_WINDOW_SECS: f64 = 600.0;
/// …and how many.
pub const SHORT_STALLS_TO_CAPTURE: usize = 3;

/// Triggers that need no tuning: a server that does not answer, a pile-up
/// of running threads (more than 4 per CPU, at least 16), throughput collapsing to
/// under a third of its 5-minute baseline, a replica falling far behind.
pub fn default_triggers(cpus: usize) -> Vec<Trigger> {
    let running = (4 * cpus).max(16);
    [
        "poll_failed".to_string(),
        format!("threads_running > {running} for 1s"),
        "questions_rate < 0.3 * baseline_5m for 2s".to_string(),
        "replica_lag > 300 for 10s".to_string(),
    ]
    .iter()
    .map(|t| Trigger::parse(t).expect("default triggers parse"))
    .collect()
}

/// What the loop reports, in order.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Listening {
        addr: String,
    },
    Poll {
        unix: f64,
        ok: bool,
        cost_ms: f64,
        error: Option<String>,
        derived: BTreeMap<String, f64>,
    },
    Fired {
        unix: f64,
        trigger: String,
        onset_unix: f64,
    },
    /// The thread scan saw threads held up (the start of a pile-up).
    PileUp {
        unix: f64,
        began_unix: f64,
        blocked: u32,
        baseline: u32,
    },
    /// A pile-up ended: when it began and ended, to the scan interval.
    Stall {
        began_unix: f64,
        ended_unix: f64,
        ms: f64,
        peak_blocked: u32,
        baseline: u32,
    },
    Skipped {
        unix: f64,
        trigger: String,
        why: String,
    },
    Captured {
        unix: f64,
        trigger: String,
        dir: String,
        verdict: String,
        onset_to_first_stack_ms: Option<f64>,
    },
    CaptureFailed {
        unix: f64,
        trigger: String,
        error: String,
    },
}

/// Metric history kept in a capture's report: this long before the trigger…
pub const BEFORE_SECS: f64 = 120.0;
/// …and this long after it (the report is rebuilt once it has passed).
pub const AFTER_SECS: f64 = 30.0;

/// Recent derived values, for baselines.
struct History {
    rows: VecDeque<(f64, BTreeMap<String, f64>)>,
    keep_secs: f64,
}

impl History {
    fn push(&mut self, unix: f64, d: BTreeMap<String, f64>) {
        self.rows.push_back((unix, d));
        while self.rows.front().is_some_and(|(t, _)| unix - t > self.keep_secs) {
            self.rows.pop_front();
        }
    }
    /// Median of `metric` over the last `window` seconds, excluding the
    /// newest poll; needs at least 10 values.
    fn median(&self, metric: &str, window: f64, now: f64) -> Option<f64> {
        let n = self.rows.len();
        let mut v: Vec<f64> = self
            .rows
            .iter()
            .take(n.saturating_sub(1))
            .filter(|(t, _)| now - t <= window)
            .filter_map(|(_, d)| d.get(metric).copied())
            .collect();
        if v.len() < 10 {
            return None;
        }
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        Some(v[v.len() / 2])
    }
}

struct Ctx<'a> {
    now: f64,
    derived: &'a BTreeMap<String, f64>,
    hist: &'a History,
    failed: bool,
}

impl Context for Ctx<'_> {
    fn value(&self, m: &str) -> Option<f64> {
        self.derived.get(m).copied()
    }
    fn baseline(&self, m: &str, w: f64) -> Option<f64> {
        self.hist.median(m, w, self.now)
    }
    fn poll_failed(&self) -> bool {
        self.failed
    }
}

/// What the watch loop tells a running early capture.
enum Decision {
    /// Keep it, under `trigger` fired at `fired`, for a condition that
    /// began at `onset`, with the metric history as it is now (through the
    /// confirmation). Evidence gathered wholly before `onset` is of what
    /// came before: the capture then gathers again before it is written.
    Keep { trigger: String, fired: f64, onset: f64, history: Vec<crate::store::Row> },
    /// Another condition began after it had gathered: gather again for
    /// that one, still waiting to be kept or dropped.
    Retake { trigger: String, unix: f64, onset: f64, history: Vec<crate::store::Row> },
    /// Its condition cleared.
    Drop,
}

/// The loop's handle on a running early capture.
struct Early {
    decide: mpsc::Sender<Decision>,
    /// Set when it is dropped: its sampling ends after the current sample.
    cancel: Arc<AtomicBool>,
    /// Its evidence is gathered (it waits to be kept, dropped or retaken).
    gathered: Arc<AtomicBool>,
}

/// The capture thread's side of an [`Early`].
struct EarlyRx {
    decide: mpsc::Receiver<Decision>,
    cancel: Arc<AtomicBool>,
    gathered: Arc<AtomicBool>,
}

impl Early {
    fn start() -> (Early, EarlyRx) {
        let (tx, rx) = mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let gathered = Arc::new(AtomicBool::new(false));
        (
            Early { decide: tx, cancel: cancel.clone(), gathered: gathered.clone() },
            EarlyRx { decide: rx, cancel, gathered },
        )
    }
    fn gathered(&self) -> bool {
        self.gathered.load(Ordering::SeqCst)
    }
    fn keep(self, trigger: String, fired: f64, onset: f64, history: Vec<crate::store::Row>) {
        let _ = self.decide.send(Decision::Keep { trigger, fired, onset, history });
    }
    fn retake(&self, trigger: String, unix: f64, onset: f64, history: Vec<crate::store::Row>) {
        self.gathered.store(false, Ordering::SeqCst);
        let _ = self.decide.send(Decision::Retake { trigger, unix, onset, history });
    }
    fn drop_it(self) {
        self.cancel.store(true, Ordering::SeqCst);
        let _ = self.decide.send(Decision::Drop);
    }
}

/// What every capture is started with: the server, the settings, where
/// captures go, where they report, and the flag the scan reads.
struct Spawner<'a> {
    spec: &'a ConnSpec,
    pid: Option<i32>,
    o: &'a WatchOptions,
    root: &'a std::path::Path,
    done: &'a mpsc::Sender<Option<Event>>,
    capturing: &'a Arc<AtomicBool>,
}

impl Spawner<'_> {
    /// Start a capture for `trigger` now (the limits allowed it), with the
    /// history before it from `store`, counted against the limits.
    fn start(
        &self,
        sched: &mut Scheduler<Early>,
        store: &crate::store::Store,
        trigger: String,
        unix: f64,
        onset: f64,
        now: f64,
    ) {
        sched.started(now);
        let history = store.range(unix - BEFORE_SECS, unix).unwrap_or_default();
        self.spawn(trigger, unix, onset, history, None);
    }

    /// Gather and write one capture on its own thread; report on `done`.
    /// An early capture (`early` given) gathers at once but is only
    /// written once the trigger confirms it, under the trigger and time
    /// that did; it gathers again when told to, or when the condition that
    /// confirmed it began after its evidence was taken.
    fn spawn(&self, trigger: String, unix: f64, onset: f64, history: Vec<crate::store::Row>, early: Option<EarlyRx>) {
        let Spawner { spec, pid, o, root, done, capturing } = *self;
        let (spec, settings, root, done) = (spec.clone(), o.capture.clone(), root.to_path_buf(), done.clone());
        let capturing = capturing.clone();
        std::thread::spawn(move || {
            let (mut trigger, mut unix, mut onset, mut history, mut early) = (trigger, unix, onset, history, early);
            let ev = loop {
                let cancel = early.as_ref().map(|e| e.cancel.clone());
                capturing.store(true, Ordering::Relaxed);
                let began = Instant::now();
                let mut ev = capture::gather(&trigger, unix, Some(&spec), pid, &settings, history, cancel.as_deref());
                capturing.store(false, Ordering::Relaxed);
                tracing::debug!("capture for {trigger} gathered in {:.0} ms", began.elapsed().as_secs_f64() * 1e3);
                ev.onset_unix = Some(onset);
                let gathered_unix = crate::poll::now_unix();
                let Some(e) = &early else { break ev };
                e.gathered.store(true, Ordering::SeqCst);
                match e.decide.recv() {
                    Ok(Decision::Keep { trigger: t, fired, onset: o, history: h }) if o > gathered_unix => {
                        // Confirmed by a condition that began after these
                        // stacks and tables were taken: take its own.
                        tracing::debug!(
                            "early capture for {trigger} kept for {t}, which began after it: gathered again"
                        );
                        (trigger, unix, onset, history, early) = (t, fired, o, h, None);
                    }
                    Ok(Decision::Keep { trigger: t, fired, history: h, .. }) => {
                        ev.history = h;
                        ev.trigger = t;
                        ev.unix = fired;
                        break ev;
                    }
                    Ok(Decision::Retake { trigger: t, unix: u, onset: o, history: h }) => {
                        tracing::debug!("early capture for {trigger} taken again for {t}, which began after it");
                        (trigger, unix, onset, history) = (t, u, o, h);
                    }
                    Ok(Decision::Drop) | Err(_) => {
                        tracing::debug!("early capture for {trigger} dropped: the condition cleared");
                        let _ = done.send(None);
                        return;
                    }
                }
            };
            let (trigger, unix) = (ev.trigger.clone(), ev.unix);
            let first_stack = ev.profile.as_ref().and_then(|p| p.samples.first()).map(|s| s.at_unix_ms as f64 / 1000.0);
            let verdict = crate::verdict::verdict(&ev);
            let written = crate::report::render_text(&ev, &verdict)
                .and_then(|txt| crate::capture_dir::write(&root, &ev, &verdict, &txt))
                .and_then(|dir| crate::report::rebuild(&dir).map(|()| dir));
            let msg = match written {
                Ok(dir) => Event::Captured {
                    unix,
                    trigger,
                    dir: dir.display().to_string(),
                    verdict,
                    onset_to_first_stack_ms: first_stack.map(|f| (f - onset) * 1000.0),
                },
                Err(e) => Event::CaptureFailed { unix, trigger, error: format!("{e:#}") },
            };
            let _ = done.send(Some(msg));
        });
    }
}

/// A trigger other than `but` whose condition holds and has not yet fired
/// (in its hold), the first if several.
fn in_hold(armed: &[Armed], triggers: &[Trigger], but: usize) -> Option<usize> {
    (0..triggers.len()).find(|&j| j != but && triggers[j].hold > 0.0 && armed[j].in_hold())
}

/// The client connections' OS thread ids, from the latest poll that listed
/// them, shared with the scan.
type ConnTids = Arc<std::sync::Mutex<Option<Arc<crate::scan::Clients>>>>;

/// The thread scan on its own thread, every `interval` start to start;
/// pulses arrive on the returned channel. It ends when the process is gone
/// or the receiver is dropped.
fn spawn_scan(
    pid: i32,
    interval: Duration,
    threshold: u32,
    any_process: bool,
    conns: ConnTids,
    capturing: Arc<AtomicBool>,
) -> mpsc::Receiver<crate::scan::Pulse> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // The thread cache's futex word, by the server's exported symbols
        // (MariaDB's `thread_cache`, older servers' `COND_thread_cache`).
        let parked_at: Box<dyn FnMut(u64) -> bool> = match pileup_engine::Resolver::new(pid, any_process, false, &[]) {
            Ok(r) => Box::new(
                move |w| matches!(r.data_name(w), pileup_engine::DataName::Symbol { symbol, .. } if symbol.contains("thread_cache")),
            ),
            Err(e) => {
                tracing::debug!(
                    "thread scan: no symbols for {pid} ({e}); threads in the thread cache count as held up"
                );
                Box::new(|_| false)
            }
        };
        let mut scan = crate::scan::ThreadScan::new(pid, parked_at);
        let mut detect = crate::scan::Detector::new(threshold);
        let t0 = Instant::now();
        let mut tick = 0u32;
        loop {
            // Nothing to judge until a poll has listed the connections.
            let only = conns.lock().unwrap().clone();
            let Some(only) = only else {
                tick += 1;
                std::thread::sleep(interval);
                continue;
            };
            let before = capturing.load(Ordering::Relaxed);
            let c = match scan.census(crate::poll::now_unix(), Some(&only)) {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!("thread scan of {pid} stopped: {e}");
                    return;
                }
            };
            let disturbed = before || capturing.load(Ordering::Relaxed);
            tracing::trace!("thread scan: {c:?} of {} connection thread(s), disturbed {disturbed}", only.conns.len());
            if let Some(p) = detect.step(&c, disturbed) {
                if tx.send(p).is_err() {
                    return;
                }
            }
            tick += 1;
            match (interval * tick).checked_sub(t0.elapsed()) {
                Some(w) => std::thread::sleep(w),
                None => tick = (t0.elapsed().as_secs_f64() / interval.as_secs_f64()).ceil() as u32,
            }
        }
    });
    rx
}

fn free_bytes(p: &std::path::Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(p).ok()?;
    Some(s.blocks_available() as u64 * s.fragment_size() as u64)
}

/// Captures that finished: recorded, their reports' rebuild scheduled for
/// when the metrics after the stall are in, and told.
fn finished_captures(
    done_rx: &mpsc::Receiver<Option<Event>>,
    sched: &mut Scheduler<Early>,
    store: &mut Store,
    expo: Option<&crate::expo::Shared>,
    on: &mut dyn FnMut(&Event),
) -> Result<()> {
    while let Ok(ev) = done_rx.try_recv() {
        sched.finished();
        let Some(ev) = ev else { continue }; // an early capture, dropped
        if let Event::Captured { unix, trigger, dir, verdict, .. } = &ev {
            store.add_capture(*unix, std::path::Path::new(dir), trigger, verdict)?;
            sched.rebuild_at(unix + AFTER_SECS, PathBuf::from(dir));
            if let Some(e) = expo {
                e.lock().unwrap().captures_total += 1;
            }
        }
        on(&ev);
    }
    Ok(())
}

/// Run until `stop` is set or `duration` passes.
pub fn run(
    spec: ConnSpec,
    pid: Option<i32>,
    o: &WatchOptions,
    stop: &AtomicBool,
    on: &mut dyn FnMut(&Event),
) -> Result<()> {
    let mut store = Store::open(&o.data_dir)?;
    store.claim()?;
    let mut bound = false;
    let expo: Option<crate::expo::Shared> = match &o.listen {
        Some(addr) => {
            let shared = crate::expo::Shared::default();
            let local = crate::expo::serve(addr, shared.clone())?;
            on(&Event::Listening { addr: local.to_string() });
            Some(shared)
        }
        None => None,
    };
    let captures_root = o.data_dir.join("captures");
    let poll_timeout = o.interval.clamp(Duration::from_millis(500), Duration::from_secs(5));
    let mut poller = Poller::new(spec.clone(), pid, poll_timeout);
    let mut prev: Option<Snapshot> = None;
    let mut hist = History { rows: VecDeque::new(), keep_secs: 3600.0 };
    let mut armed: Vec<Armed> = vec![Armed::default(); o.triggers.len()];
    let (done_tx, done_rx) = mpsc::channel::<Option<Event>>();
    let mut sched: Scheduler<Early> = Scheduler::new(Limits {
        cooldown: o.cooldown,
        max_per_hour: o.max_captures_per_hour,
        min_free_bytes: o.min_free_bytes,
        data_dir: o.data_dir.display().to_string(),
    });
    let free = || free_bytes(&o.data_dir);
    let t0 = Instant::now();
    let now = || t0.elapsed().as_secs_f64();
    let mut tick = 0u32;
    let mut last_maintain = Instant::now();
    let conn_tids: ConnTids = Default::default();
    // A capture is taking stacks: the threads it stops show as running
    // while they enter and leave the stop, which the scan must not read as
    // the pile-up ending.
    let capturing = Arc::new(AtomicBool::new(false));
    let spawner = Spawner { spec: &spec, pid, o, root: &captures_root, done: &done_tx, capturing: &capturing };
    let mut scan = pid.filter(|_| !o.scan_interval.is_zero()).map(|p| {
        spawn_scan(p, o.scan_interval, o.pileup_threads, o.capture.any_process, conn_tids.clone(), capturing.clone())
    });
    // The scan's own capture, when it runs unconfirmed, is known by this
    // index (one past the triggers').
    let scan_idx = o.triggers.len();
    let mut short_stalls: VecDeque<f64> = VecDeque::new();
    let mut open_pileup: Option<f64> = None;
    // A pile-up no capture has begun for yet (began, blocked, usual): its
    // early capture is tried again each scan interval while another
    // capture finishes or the gap between early captures runs out.
    let mut uncaptured: Option<(f64, u32, u32)> = None;
    while !stop.load(Ordering::Relaxed) && o.duration.is_none_or(|d| t0.elapsed() < d) {
        let p = poller.poll();
        if let Some(t) = &p.conn_tids {
            let known = p.known_tids.iter().flatten().copied().collect();
            *conn_tids.lock().unwrap() =
                Some(Arc::new(crate::scan::Clients { conns: t.iter().copied().collect(), known }));
        }
        let cur = Snapshot { at: p.unix, values: p.values.clone() };
        let derived = match (&prev, p.ok) {
            (Some(a), _) => derive(a, &cur, &o.derive),
            (None, _) => derive(&cur, &cur, &o.derive),
        };
        if p.ok {
            prev = Some(cur);
            if !bound {
                if let Some(id) = poller.identity() {
                    store.bind_server(id)?;
                    bound = true;
                }
            }
        }
        store.insert(&p, &derived)?;
        if let Some(e) = &expo {
            let mut e = e.lock().unwrap();
            e.derived = derived.clone();
            e.polls_total += 1;
            e.polls_failed_total += u64::from(!p.ok);
            e.last_poll_unix = p.unix;
        }
        on(&Event::Poll {
            unix: p.unix,
            ok: p.ok,
            cost_ms: p.cost_ms,
            error: p.error.clone(),
            derived: derived.clone(),
        });
        finished_captures(&done_rx, &mut sched, &mut store, expo.as_ref(), on)?;
        for dir in sched.rebuilds_due(Some(p.unix)) {
            if let Err(e) = crate::report::refresh(&dir, &store, BEFORE_SECS, AFTER_SECS) {
                tracing::warn!("rebuilding {}: {e:#}", dir.display());
            }
        }
        let ctx = Ctx { now: p.unix, derived: &derived, hist: &hist, failed: !p.ok };
        for (i, t) in o.triggers.iter().enumerate() {
            let step = armed[i].step(t, p.unix, &ctx);
            let onset = armed[i].since().unwrap_or(p.unix);
            // The scan times a pile-up's start to its interval.
            let onset = open_pileup.map_or(onset, |b| b.min(onset));
            // An early capture for this trigger is running: confirm or drop it.
            if sched.early_trigger() == Some(i) {
                match step {
                    Step::Fire => {
                        on(&Event::Fired { unix: p.unix, trigger: t.text.clone(), onset_unix: onset });
                        if let Some(decide) = sched.confirm_early(now()) {
                            decide.keep(
                                t.text.clone(),
                                p.unix,
                                onset,
                                store.range(p.unix - BEFORE_SECS, p.unix).unwrap_or_default(),
                            );
                        }
                    }
                    Step::Idle => {
                        // Its condition cleared. A pile-up the scan still
                        // sees, or another trigger in its hold, keeps it as
                        // its own; otherwise it is dropped.
                        let other = open_pileup.map(|_| scan_idx).or_else(|| in_hold(&armed, &o.triggers, i));
                        if let Some(decide) = sched.release_early(other) {
                            decide.drop_it();
                        }
                    }
                    _ => {}
                }
                continue;
            }
            if step == Step::Pending && t.hold > 0.0 && pid.is_some() {
                let history = || store.range(p.unix - BEFORE_SECS, p.unix).unwrap_or_default();
                if sched.early_trigger().is_none() {
                    // The condition just started to hold: begin capturing
                    // now, so the first stacks show the stall's start rather
                    // than the end of its hold; dropped unless the hold
                    // confirms it.
                    if sched.may_start_early(now(), free()) {
                        let (early, rx) = Early::start();
                        sched.started_early(i, now(), early);
                        spawner.spawn(t.text.clone(), p.unix, onset, history(), Some(rx));
                    }
                } else if armed[i].since() == Some(p.unix) {
                    // It began at this poll. Another condition's early
                    // capture that has already gathered predates it: that
                    // capture gathers again.
                    if let Some(e) = sched.retake_early(now(), Early::gathered) {
                        e.retake(t.text.clone(), p.unix, onset, history());
                    }
                }
                continue;
            }
            if step != Step::Fire {
                continue;
            }
            on(&Event::Fired { unix: p.unix, trigger: t.text.clone(), onset_unix: onset });
            if let Some(decide) = sched.confirm_early(now()) {
                // Another trigger's early capture is running: it is this stall's evidence.
                decide.keep(
                    t.text.clone(),
                    p.unix,
                    onset,
                    store.range(p.unix - BEFORE_SECS, p.unix).unwrap_or_default(),
                );
                continue;
            }
            if let Some(why) = sched.refused(now(), free()) {
                on(&Event::Skipped { unix: p.unix, trigger: t.text.clone(), why });
                continue;
            }
            spawner.start(&mut sched, &store, t.text.clone(), p.unix, onset, now());
        }
        hist.push(p.unix, derived);
        if last_maintain.elapsed() > Duration::from_secs(60) {
            store.maintain(p.unix, &o.retention)?;
            last_maintain = Instant::now();
        }
        tick += 1;
        let next = o.interval * tick;
        if next < t0.elapsed() {
            // Overran: re-anchor so polls do not bunch up to catch up.
            tick = (t0.elapsed().as_secs_f64() / o.interval.as_secs_f64()).ceil() as u32;
        }
        // Until the next poll: the thread scan's pulses.
        while let Some(wait) = (o.interval * tick).checked_sub(t0.elapsed()) {
            let Some(rx) = &scan else {
                std::thread::sleep(wait);
                break;
            };
            // Captures that finish between polls (a dropped early one) are
            // told at once.
            finished_captures(&done_rx, &mut sched, &mut store, expo.as_ref(), on)?;
            if let Some((began_unix, blocked, baseline)) = uncaptured {
                // Capture at once; kept if a trigger fires, the pile-up
                // lasts, or short stalls repeat.
                if sched.early_trigger().is_none() && sched.may_start_early(now(), free()) {
                    uncaptured = None;
                    let unix = crate::poll::now_unix();
                    let (early, rx) = Early::start();
                    sched.started_early(scan_idx, now(), early);
                    let history = store.range(unix - BEFORE_SECS, unix).unwrap_or_default();
                    let text = format!("pile-up: {blocked} threads held up (usually {baseline})");
                    spawner.spawn(text, unix, began_unix, history, Some(rx));
                    continue;
                }
            }
            let wait = match uncaptured {
                Some(_) => wait.min(o.scan_interval),
                None => wait,
            };
            let pulse = match rx.recv_timeout(wait) {
                Ok(p) => p,
                Err(mpsc::RecvTimeoutError::Timeout) if uncaptured.is_some() => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    scan = None;
                    continue;
                }
            };
            use crate::scan::Pulse;
            let unix = crate::poll::now_unix();
            match pulse {
                Pulse::Began { began_unix, blocked, baseline } => {
                    open_pileup = Some(began_unix);
                    on(&Event::PileUp { unix, began_unix, blocked, baseline });
                    // A trigger's early capture running is this stall's
                    // (gathered before it began, it gathers again if kept
                    // for it).
                    if sched.early_trigger().is_none() {
                        uncaptured = Some((began_unix, blocked, baseline));
                    }
                }
                Pulse::Lasting { began_unix, blocked, baseline } => {
                    let text = format!(
                        "pile-up: {blocked} threads held up for {}s (usually {baseline})",
                        crate::scan::LASTING_SECS
                    );
                    uncaptured = None;
                    if let Some(decide) = sched.confirm_early(now()) {
                        on(&Event::Fired { unix, trigger: text.clone(), onset_unix: began_unix });
                        decide.keep(text, unix, began_unix, store.range(unix - BEFORE_SECS, unix).unwrap_or_default());
                    } else if sched.refused(now(), free()).is_none() {
                        on(&Event::Fired { unix, trigger: text.clone(), onset_unix: began_unix });
                        spawner.start(&mut sched, &store, text, unix, began_unix, now());
                    }
                    // Otherwise a capture of this stall runs or just ran.
                }
                Pulse::Ended(st) => {
                    open_pileup = None;
                    uncaptured = None;
                    store.add_stall(&st)?;
                    on(&Event::Stall {
                        began_unix: st.began_unix,
                        ended_unix: st.ended_unix,
                        ms: st.ms(),
                        peak_blocked: st.peak_blocked,
                        baseline: st.baseline,
                    });
                    if st.ms() < crate::scan::LASTING_SECS * 1000.0 {
                        short_stalls.push_back(st.ended_unix);
                    }
                    while short_stalls.front().is_some_and(|t| st.ended_unix - t > SHORT_STALL_WINDOW_SECS) {
                        short_stalls.pop_front();
                    }
                    // An early capture of this stall (the scan's, or a
                    // trigger's still in its hold) is kept when short
                    // stalls repeat; the scan's own is dropped otherwise.
                    // With none (none could start while it lasted), a
                    // repetition is captured now, just after it, where the
                    // limits allow.
                    let repeated = (short_stalls.len() >= SHORT_STALLS_TO_CAPTURE).then(|| {
                        format!(
                            "short stalls: {} in {} min, this one {:.0} ms",
                            short_stalls.len(),
                            SHORT_STALL_WINDOW_SECS / 60.0,
                            st.ms()
                        )
                    });
                    match (sched.early_trigger(), repeated) {
                        (Some(_), Some(text)) => {
                            on(&Event::Fired { unix, trigger: text.clone(), onset_unix: st.began_unix });
                            if let Some(decide) = sched.confirm_early(now()) {
                                let history = store.range(unix - BEFORE_SECS, unix).unwrap_or_default();
                                decide.keep(text, unix, st.began_unix, history);
                            }
                        }
                        (Some(early), None) if early == scan_idx => {
                            // A trigger in its hold keeps it as its own.
                            if let Some(decide) = sched.release_early(in_hold(&armed, &o.triggers, scan_idx)) {
                                decide.drop_it();
                            }
                        }
                        (None, Some(text)) => match sched.refused(now(), free()) {
                            None => {
                                on(&Event::Fired { unix, trigger: text.clone(), onset_unix: st.began_unix });
                                spawner.start(&mut sched, &store, text, unix, st.began_unix, now());
                            }
                            Some(why) => tracing::debug!("{text}: not captured ({why})"),
                        },
                        _ => {}
                    }
                }
            }
        }
    }
    // Let a running capture finish so its report is not lost.
    if let Some(e) = sched.drop_early() {
        e.drop_it(); // an unconfirmed early capture is dropped
    }
    if sched.running() {
        if let Ok(Some(ev)) = done_rx.recv_timeout(Duration::from_secs(60)) {
            if let Event::Captured { unix, trigger, dir, verdict, .. } = &ev {
                store.add_capture(*unix, std::path::Path::new(dir), trigger, verdict)?;
                sched.rebuild_at(0.0, PathBuf::from(dir));
            }
            on(&ev);
        }
    }
    // Reports still waiting for their "after" get what there is.
    for dir in sched.rebuilds_due(None) {
        let _ = crate::report::refresh(&dir, &store, BEFORE_SECS, AFTER_SECS);
    }
    Ok(())
}
