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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use pileup_conn::ConnSpec;

use crate::capture;
use crate::decide::{Action, Decider, PollSeen};
pub use crate::decide::{Event, SHORT_STALLS_TO_CAPTURE, SHORT_STALL_WINDOW_SECS};
use crate::derive::{derive, DeriveOptions, Snapshot};
use crate::evidence::CaptureSettings;
use crate::poll::Poller;
use crate::schedule::Limits;
use crate::store::{Retention, Store};
use crate::trigger::{Context, Trigger};

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
    /// Serve the latest metrics in Prometheus format (and the profiles,
    /// when asked for) as this says.
    pub listen: Option<crate::expo::ListenOptions>,
    /// Time between thread scans ([`crate::scan`]); zero turns them off.
    pub scan_interval: Duration,
    /// Threads held up above their usual number that make a pile-up.
    pub pileup_threads: u32,
    /// Ship each finished capture to an object store.
    pub ship: Option<pileup_store::ship::ShipOptions>,
    /// Profiles served on `listen` beside the server's stacks
    /// (`/debug/pprof/profile`), when watch has the server's pid.
    pub profiles: Vec<crate::profiles::Endpoint>,
}

/// The pile-up threshold that goes with the default triggers: as many
/// threads as the running-threads trigger.
pub fn default_pileup_threads(cpus: usize) -> u32 {
    (4 * cpus).max(16) as u32
}

/// Triggers that need no tuning: a server that does not answer, a pile-up
/// of running threads (more than 4 per CPU, at least 16), throughput collapsing to
/// under a third of its 5-minute baseline, a replica falling far behind,
/// the server's resident memory near its limit (the cgroup's, else the
/// host's) or growing by 2% of it a second; and the stall classes'
/// signatures, each far above the highest it usually reached in the last
/// five minutes (its 99th percentile, so bursts it makes every minute are
/// usual) plus spreads and a floor: table opens, connections, row-lock and
/// metadata/global lock waits, tasks stalled on I/O, and the checkpoint
/// age near the redo log's capacity.
pub fn default_triggers(cpus: usize) -> Vec<Trigger> {
    let running = (4 * cpus).max(16);
    [
        "poll_failed".to_string(),
        format!("threads_running > {running} for 1s"),
        "questions_rate < 0.3 * baseline_5m for 2s".to_string(),
        "replica_lag > 300 for 10s".to_string(),
        "memory_limit_pct > 90 for 5s".to_string(),
        "mysqld_rss_growth_rate > 0.02 * memory_limit_bytes for 5s".to_string(),
        "table-open storm: opened_tables_rate > 2 * peak_5m + 8 * spread_5m + 200 for 1s".to_string(),
        "connection storm: connections_rate > 2 * peak_5m + 8 * spread_5m + 200 for 1s".to_string(),
        "row-lock waits: innodb_row_lock_current_waits > 2 * peak_5m + 6 * spread_5m + 4 for 1s".to_string(),
        "lock waits: pl_waiting_lock > 2 * peak_5m + 6 * spread_5m + 3 for 1s".to_string(),
        "slow disk: io_pressure_pct > 0.5 * peak_5m + 50 for 1s".to_string(),
        "flushing storm: checkpoint_age_pct > 0.1 * peak_5m + 88 for 1s".to_string(),
    ]
    .iter()
    .map(|t| Trigger::parse(t).expect("default triggers parse"))
    .collect()
}

/// Metric history kept in a capture's report: this long before the trigger…
pub const BEFORE_SECS: f64 = 120.0;
/// …and this long after it (the report is rebuilt once it has passed).
pub const AFTER_SECS: f64 = 30.0;

/// The most recent seconds of history, left out of baselines, spreads and
/// peaks.
pub const RECENT_SECS: f64 = 5.0;

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
    /// What is usual for `metric` over the last `window` seconds, the last
    /// [`RECENT_SECS`] left out: a stall's own first seconds are not its
    /// usual (its first polls would raise the peak it is judged against).
    fn usual(&self, metric: &str, window: f64, now: f64) -> Option<crate::trigger::Usual> {
        let mut v: Vec<f64> = self
            .rows
            .iter()
            .filter(|(t, _)| now - t <= window && now - t > RECENT_SECS)
            .filter_map(|(_, d)| d.get(metric).copied())
            .collect();
        crate::trigger::Usual::of(&mut v)
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
    fn usual(&self, m: &str, w: f64) -> Option<crate::trigger::Usual> {
        self.hist.usual(m, w, self.now)
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
    /// When its evidence was gathered (it waits to be kept, dropped or
    /// retaken): Unix seconds as f64 bits, 0 while it gathers.
    gathered: Arc<AtomicU64>,
}

/// The capture thread's side of an [`Early`].
struct EarlyRx {
    decide: mpsc::Receiver<Decision>,
    cancel: Arc<AtomicBool>,
    gathered: Arc<AtomicU64>,
}

impl Early {
    fn start() -> (Early, EarlyRx) {
        let (tx, rx) = mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let gathered = Arc::new(AtomicU64::new(0));
        (
            Early { decide: tx, cancel: cancel.clone(), gathered: gathered.clone() },
            EarlyRx { decide: rx, cancel, gathered },
        )
    }
    fn gathered(&self) -> Option<f64> {
        Some(f64::from_bits(self.gathered.load(Ordering::SeqCst))).filter(|t| *t > 0.0)
    }
    fn keep(self, trigger: String, fired: f64, onset: f64, history: Vec<crate::store::Row>) {
        let _ = self.decide.send(Decision::Keep { trigger, fired, onset, history });
    }
    fn retake(&self, trigger: String, unix: f64, onset: f64, history: Vec<crate::store::Row>) {
        self.gathered.store(0, Ordering::SeqCst);
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
    /// The server's process (0: none), which a restart changes.
    pid: crate::expo::ServerPid,
    o: &'a WatchOptions,
    root: &'a std::path::Path,
    done: &'a mpsc::Sender<Option<Event>>,
    capturing: &'a Arc<AtomicBool>,
    /// The poll connection's id, left out of the holders a capture infers.
    poll_conn: Arc<std::sync::atomic::AtomicU64>,
    /// The server's modules, loaded at start and kept between captures, so
    /// a capture's first stack is not delayed by reading them.
    modules: capture::KeptModules,
}

impl Spawner<'_> {
    /// Gather and write one capture on its own thread; report on `done`.
    /// An early capture (`early` given) gathers at once but is only
    /// written once the trigger confirms it, under the trigger and time
    /// that did; it gathers again when told to, or when the condition that
    /// confirmed it began after its evidence was taken.
    fn spawn(&self, trigger: String, unix: f64, onset: f64, history: Vec<crate::store::Row>, early: Option<EarlyRx>) {
        let Spawner { spec, o, root, done, capturing, .. } = *self;
        let pid = Some(self.pid.load(Ordering::Relaxed)).filter(|p| *p > 0);
        let (spec, mut settings, root, done) = (spec.clone(), o.capture.clone(), root.to_path_buf(), done.clone());
        settings.own_connection = self.poll_conn.load(Ordering::Relaxed);
        let capturing = capturing.clone();
        let modules = self.modules.clone();
        std::thread::spawn(move || {
            let (mut trigger, mut unix, mut onset, mut history, mut early) = (trigger, unix, onset, history, early);
            let ev = loop {
                let cancel = early.as_ref().map(|e| e.cancel.clone());
                capturing.store(true, Ordering::Relaxed);
                let began = Instant::now();
                let mut ev =
                    capture::gather(&trigger, unix, Some(&spec), pid, &settings, history, cancel.as_deref(), &modules);
                capturing.store(false, Ordering::Relaxed);
                tracing::debug!("capture for {trigger} gathered in {:.0} ms", began.elapsed().as_secs_f64() * 1e3);
                ev.onset_unix = Some(onset);
                // When its last stack was taken (SQL and a memory trace
                // come after it).
                let gathered_unix = ev
                    .profile
                    .as_ref()
                    .and_then(|p| p.samples.last())
                    .map_or_else(crate::poll::now_unix, |s| s.at_unix_ms as f64 / 1000.0);
                let Some(e) = &early else { break ev };
                e.gathered.store(gathered_unix.to_bits(), Ordering::SeqCst);
                match e.decide.recv() {
                    Ok(Decision::Keep { trigger: t, fired, onset: o, history: h })
                        if o > gathered_unix + crate::decide::EARLY_FRESH_SECS =>
                    {
                        // Confirmed by a condition that began well after
                        // these stacks and tables were taken (more than
                        // EARLY_FRESH_SECS): take its own.
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

/// One watch run: the server, the store, the decisions and what carries
/// them out.
struct Watcher<'a> {
    o: &'a WatchOptions,
    store: Store,
    expo: Option<crate::expo::Shared>,
    poller: Poller,
    prev: Option<Snapshot>,
    hist: History,
    bound: bool,
    decider: Decider,
    /// The running early capture's handle.
    early: Option<Early>,
    spawner: Spawner<'a>,
    done_rx: mpsc::Receiver<Option<Event>>,
    conn_tids: ConnTids,
    scan: Option<mpsc::Receiver<crate::scan::Pulse>>,
    pace: crate::pace::Pace,
    t0: Instant,
    last_maintain: Instant,
    on: &'a mut dyn FnMut(&Event),
    shipper: Option<pileup_store::Shipper>,
    ship_rx: mpsc::Receiver<pileup_store::ShipEvent>,
    /// The last upload failure told, so a store that stays down is told
    /// once, not at every retry.
    ship_failure: Option<String>,
    /// Set while a capture takes stacks (the scan reads it).
    capturing: Arc<AtomicBool>,
    /// The history store's write failure told, and the writes failed since.
    store_failure: Option<(String, u64)>,
}

impl Watcher<'_> {
    /// Monotonic seconds since the start, the decisions' clock.
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn free(&self) -> Option<u64> {
        pileup_files::free_bytes(&self.o.data_dir)
    }

    /// A write to the history store: one that fails (a full or read-only
    /// disk) is told once and watching goes on; the first that works again
    /// is told too.
    fn stored(&mut self, r: Result<()>) {
        match (r, self.store_failure.take()) {
            (Ok(()), Some((_, n))) => (self.on)(&Event::StoreRecovered { unix: crate::poll::now_unix(), failed: n }),
            (Ok(()), None) => {}
            (Err(e), None) => {
                let error = e.to_string();
                (self.on)(&Event::StoreFailed { unix: crate::poll::now_unix(), error: error.clone() });
                self.store_failure = Some((error, 1));
            }
            (Err(_), Some((why, n))) => self.store_failure = Some((why, n + 1)),
        }
    }

    fn history(&self, unix: f64) -> Vec<crate::store::Row> {
        self.store.range(unix - BEFORE_SECS, unix).unwrap_or_default()
    }

    /// Carry out the decisions.
    fn apply(&mut self, actions: Vec<Action>) -> Result<()> {
        for a in actions {
            match a {
                Action::Tell(e) => (self.on)(&e),
                Action::RecordStall(st) => {
                    let r = self.store.add_stall(&st);
                    self.stored(r);
                }
                Action::Capture { trigger, unix, onset } => {
                    self.spawner.spawn(trigger, unix, onset, self.history(unix), None);
                }
                Action::CaptureEarly { trigger, unix, onset } => {
                    tracing::debug!("early capture for {trigger}, seen since {onset:.2}");
                    let (early, rx) = Early::start();
                    self.early = Some(early);
                    self.spawner.spawn(trigger, unix, onset, self.history(unix), Some(rx));
                }
                Action::Keep { trigger, fired, onset } => {
                    if let Some(e) = self.early.take() {
                        e.keep(trigger, fired, onset, self.history(fired));
                    }
                }
                Action::Retake { trigger, unix, onset } => {
                    if let Some(e) = &self.early {
                        e.retake(trigger, unix, onset, self.history(unix));
                    }
                }
                Action::Drop => {
                    if let Some(e) = self.early.take() {
                        e.drop_it();
                    }
                }
            }
        }
        Ok(())
    }

    /// Captures that finished: recorded, their reports' rebuild scheduled
    /// for when the metrics after the stall are in, and told.
    fn finished_captures(&mut self) -> Result<()> {
        while let Ok(ev) = self.done_rx.try_recv() {
            self.decider.finished();
            let Some(ev) = ev else { continue }; // an early capture, dropped
            if let Event::Captured { unix, trigger, dir, verdict, .. } = &ev {
                let r = self.store.add_capture(*unix, std::path::Path::new(dir), trigger, verdict);
                self.stored(r);
                self.decider.schedule().rebuild_at(unix + AFTER_SECS, PathBuf::from(dir));
                let class = crate::verdict::class_of(verdict);
                let first_line = verdict.lines().next().unwrap_or("").to_string();
                if let Some(e) = &self.expo {
                    e.lock().unwrap().captured(crate::expo::LastCapture {
                        unix: *unix,
                        class: class.to_string(),
                        verdict: first_line.clone(),
                        url: dir.clone(),
                    });
                }
                if let Some(s) = &self.shipper {
                    s.enqueue(PathBuf::from(dir), *unix, class.to_string(), first_line);
                }
            }
            (self.on)(&ev);
        }
        Ok(())
    }

    /// What the shipper did since the last look: counted, the last
    /// capture's place updated once it is in the store, and told (a
    /// failure once until an upload succeeds or the failure changes).
    fn ship_events(&mut self) {
        while let Ok(ev) = self.ship_rx.try_recv() {
            if let Some(e) = &self.expo {
                let mut e = e.lock().unwrap();
                e.ship_queued = self.shipper.as_ref().map(|s| s.queued() as u64);
                match &ev {
                    pileup_store::ShipEvent::Shipped { capture_dir, url, .. } => {
                        e.ship_uploaded_total += 1;
                        e.moved(capture_dir, url);
                    }
                    pileup_store::ShipEvent::Failed { .. } | pileup_store::ShipEvent::NotQueued { .. } => {
                        e.ship_failed_total += 1
                    }
                    // Captures replace nothing.
                    pileup_store::ShipEvent::Queued { .. } | pileup_store::ShipEvent::NotReplaced { .. } => {}
                }
            }
            match &ev {
                pileup_store::ShipEvent::Failed { error, .. } => {
                    if self.ship_failure.as_deref() == Some(error.as_str()) {
                        continue;
                    }
                    self.ship_failure = Some(error.clone());
                }
                pileup_store::ShipEvent::Shipped { .. } => self.ship_failure = None,
                _ => {}
            }
            (self.on)(&Event::Ship(ev));
        }
    }

    /// One poll: read the server, keep its values, judge the triggers.
    /// The server restarted as process `new`: captures, profiles, the scan
    /// and the modules kept follow it.
    fn follow(&mut self, old: i32, new: i32, unix: f64) {
        self.spawner.pid.store(new, Ordering::Relaxed);
        self.spawner.modules = capture::KeptModules::warmed(Some(new));
        if self.scan.is_some() {
            let o = self.o;
            self.scan = Some(spawn_scan(
                new,
                o.scan_interval,
                o.pileup_threads,
                o.capture.any_process,
                self.conn_tids.clone(),
                self.capturing.clone(),
            ));
        }
        (self.on)(&Event::ServerRestarted { unix, old_pid: old, new_pid: new });
    }

    fn poll(&mut self) -> Result<()> {
        self.ship_events();
        let p = self.poller.poll();
        if let Some((old, new)) = self.poller.take_moved() {
            self.follow(old, new, p.unix);
        }
        if let Some(t) = &p.conn_tids {
            let known = p.known_tids.iter().flatten().copied().collect();
            *self.conn_tids.lock().unwrap() =
                Some(Arc::new(crate::scan::Clients { conns: t.iter().copied().collect(), known }));
        }
        let cur = Snapshot { at: p.unix, values: p.values.clone() };
        let derived = derive(self.prev.as_ref().unwrap_or(&cur), &cur, &self.o.derive);
        if derived.get("opened_tables_rate").is_some_and(|r| *r >= 1000.0) {
            let raw = |s: Option<&Snapshot>, k: &str| s.and_then(|s| s.get(k)).unwrap_or(f64::NAN);
            tracing::debug!(
                "tables opened: {} -> {} over {:.3} s (cache misses {} -> {}), status read in {:.0} ms",
                raw(self.prev.as_ref(), "opened_tables"),
                raw(Some(&cur), "opened_tables"),
                cur.at - self.prev.as_ref().map_or(cur.at, |p| p.at),
                raw(self.prev.as_ref(), "table_open_cache_misses"),
                raw(Some(&cur), "table_open_cache_misses"),
                raw(Some(&cur), "cost_status_ms"),
            );
        }
        if p.ok {
            self.prev = Some(cur);
            if !self.bound {
                if let Some(id) = self.poller.identity() {
                    self.store.bind_server(id)?;
                    self.bound = true;
                }
            }
        }
        let r = self.store.insert(&p, &derived);
        self.stored(r);
        if let Some(e) = &self.expo {
            let mut e = e.lock().unwrap();
            e.derived = derived.clone();
            e.polls_total += 1;
            e.polls_failed_total += u64::from(!p.ok);
            e.last_poll_unix = p.unix;
        }
        (self.on)(&Event::Poll {
            unix: p.unix,
            ok: p.ok,
            cost_ms: p.cost_ms,
            error: p.error,
            derived: derived.clone(),
        });
        self.finished_captures()?;
        for dir in self.decider.schedule().rebuilds_due(Some(p.unix)) {
            if let Err(e) = crate::report::refresh(&dir, &self.store, BEFORE_SECS, AFTER_SECS) {
                tracing::warn!("rebuilding {}: {e:#}", dir.display());
            }
        }
        let ctx = Ctx { now: p.unix, derived: &derived, hist: &self.hist, failed: !p.ok };
        let seen = PollSeen {
            unix: p.unix,
            ctx: &ctx,
            free: self.free(),
            early_gathered: self.early.as_ref().and_then(Early::gathered),
        };
        let now = self.now();
        let actions = self.decider.poll(&seen, now);
        self.apply(actions)?;
        self.hist.push(p.unix, derived);
        if self.last_maintain.elapsed() > Duration::from_secs(60) {
            let r = self.store.maintain(p.unix, &self.o.retention);
            self.stored(r);
            self.last_maintain = Instant::now();
        }
        Ok(())
    }

    /// Until the next poll is due (`due`, seconds on [`Watcher::now`]'s
    /// clock): the thread scan's pulses, a pile-up's early capture tried
    /// again at each scan interval while it waits for one, and the next
    /// poll brought forward when the threads stir ([`crate::pace`]).
    fn between_polls(&mut self, due: &mut f64) -> Result<()> {
        while self.now() < *due {
            let wait = Duration::from_secs_f64((*due - self.now()).max(0.0));
            if self.scan.is_none() {
                std::thread::sleep(wait);
                return Ok(());
            }
            // Captures that finish between polls (a dropped early one) are
            // told at once.
            self.finished_captures()?;
            let (now, free) = (self.now(), self.free());
            let started = self.decider.between_polls(crate::poll::now_unix(), now, free);
            if !started.is_empty() {
                self.apply(started)?;
                continue;
            }
            let waiting = self.decider.waiting_to_capture();
            let wait = if waiting { wait.min(self.o.scan_interval) } else { wait };
            let Some(rx) = &self.scan else { continue };
            let pulse = match rx.recv_timeout(wait) {
                Ok(p) => p,
                Err(mpsc::RecvTimeoutError::Timeout) if waiting => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(()),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.scan = None;
                    continue;
                }
            };
            let now = self.now();
            // Any pulse is movement: the triggers should see it soon.
            *due = self.pace.stirred(now, *due);
            if let crate::scan::Pulse::Stir { why, .. } = &pulse {
                tracing::debug!("thread scan: {why} stirred; next poll in {:.0} ms", (*due - now).max(0.0) * 1e3);
            }
            let free = self.free();
            let actions = self.decider.pulse(pulse, crate::poll::now_unix(), now, free);
            self.apply(actions)?;
        }
        Ok(())
    }

    /// watch is stopping: a running capture finishes so its report is not
    /// lost, an unconfirmed early one is dropped, and reports still waiting
    /// for their "after" get what there is.
    fn finish(mut self) -> Result<()> {
        let actions = self.decider.stop();
        self.apply(actions)?;
        if self.decider.schedule().running() {
            if let Ok(Some(ev)) = self.done_rx.recv_timeout(Duration::from_secs(60)) {
                if let Event::Captured { unix, trigger, dir, verdict, .. } = &ev {
                    let r = self.store.add_capture(*unix, std::path::Path::new(dir), trigger, verdict);
                    self.stored(r);
                    self.decider.schedule().rebuild_at(0.0, PathBuf::from(dir));
                }
                (self.on)(&ev);
            }
        }
        for dir in self.decider.schedule().rebuilds_due(None) {
            let _ = crate::report::refresh(&dir, &self.store, BEFORE_SECS, AFTER_SECS);
        }
        Ok(())
    }
}

/// With `--listen`, the exposition served (and the profiles, with the
/// server's process), said where.
fn listen(
    o: &WatchOptions,
    pid: Option<crate::expo::ServerPid>,
    on: &mut dyn FnMut(&Event),
) -> Result<Option<crate::expo::Shared>> {
    let Some(addr) = &o.listen else { return Ok(None) };
    let shared = crate::expo::Shared::default();
    shared.lock().unwrap().stalls = crate::verdict::CLASSES.iter().map(|c| (c.to_string(), 0)).collect();
    let mut profiles = vec![crate::profiles::cpu(o.capture.any_process)];
    profiles.extend(o.profiles.iter().cloned());
    let at = crate::expo::serve(addr, shared.clone(), pid, profiles)?;
    on(&Event::Listening {
        addr: at.addr.to_string(),
        scheme: if at.tls { "https" } else { "http" }.into(),
        profiles_refused: at.profiles_refused,
    });
    Ok(Some(shared))
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
    let server_pid: crate::expo::ServerPid = Arc::new(std::sync::atomic::AtomicI32::new(pid.unwrap_or(0)));
    on(&Event::Started {
        server: spec.describe(),
        pid,
        interval_ms: o.interval.as_millis() as u64,
        data_dir: o.data_dir.display().to_string(),
        triggers: o.triggers.iter().map(|t| t.text.clone()).collect(),
    });
    let expo = listen(o, pid.map(|_| server_pid.clone()), on)?;
    let captures_root = o.data_dir.join("captures");
    let poll_timeout = o.interval.clamp(Duration::from_millis(500), Duration::from_secs(5));
    let (done_tx, done_rx) = mpsc::channel::<Option<Event>>();
    let limits = Limits {
        cooldown: o.cooldown,
        max_per_hour: o.max_captures_per_hour,
        min_free_bytes: o.min_free_bytes,
        data_dir: o.data_dir.display().to_string(),
    };
    let conn_tids: ConnTids = Default::default();
    // A capture is taking stacks: the threads it stops show as running
    // while they enter and leave the stop, which the scan must not read as
    // the pile-up ending.
    let capturing = Arc::new(AtomicBool::new(false));
    let scan = pid.filter(|_| !o.scan_interval.is_zero()).map(|p| {
        spawn_scan(p, o.scan_interval, o.pileup_threads, o.capture.any_process, conn_tids.clone(), capturing.clone())
    });
    let capturing_flag = capturing.clone();
    let poller = Poller::new(spec.clone(), pid, poll_timeout);
    let poll_conn = poller.connection_id();
    // The shipper reaches the store only when it uploads: a store that is
    // down does not hold the start up.
    let (ship_tx, ship_rx) = mpsc::channel();
    let shipper = match &o.ship {
        Some(s) => Some(pileup_store::Shipper::start(s.clone(), move |ev| {
            let _ = ship_tx.send(ev);
        })?),
        None => None,
    };
    if let (Some(e), Some(s)) = (&expo, &shipper) {
        e.lock().unwrap().ship_queued = Some(s.queued() as u64);
    }
    let mut w = Watcher {
        o,
        store,
        expo,
        poller,
        prev: None,
        hist: History { rows: VecDeque::new(), keep_secs: 3600.0 },
        bound: false,
        decider: Decider::new(o.triggers.clone(), limits, pid.is_some()),
        early: None,
        spawner: Spawner {
            spec: &spec,
            pid: server_pid.clone(),
            o,
            root: &captures_root,
            done: &done_tx,
            capturing: &capturing,
            poll_conn,
            modules: capture::KeptModules::warmed(pid),
        },
        done_rx,
        conn_tids,
        scan,
        pace: crate::pace::Pace::new(o.interval),
        t0: Instant::now(),
        last_maintain: Instant::now(),
        on,
        shipper,
        ship_rx,
        ship_failure: None,
        capturing: capturing_flag,
        store_failure: None,
    };
    while !stop.load(Ordering::Relaxed) && o.duration.is_none_or(|d| w.t0.elapsed() < d) {
        let started = w.now();
        w.pace.started(started);
        w.poll()?;
        // Start to start; a poll that overran its interval is followed at
        // once by the next, never by a burst catching up.
        let mut due = w.pace.next(w.now(), w.decider.pending());
        w.between_polls(&mut due)?;
    }
    w.finish()
}
