//! The watch loop: poll → store → derive → trigger → capture.
//!
//! Polls start every `interval` (start to start) and never overlap: a poll
//! that overruns delays the next. Captures run on their own thread so polling
//! (and the history around the stall) goes on while evidence is gathered;
//! one capture at a time, a cooldown between captures, a cap per hour, and
//! none when the data directory's disk is nearly full.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;
use pileup_conn::ConnSpec;

use crate::capture::{self, CaptureSettings};
use crate::derive::{derive, DeriveOptions, Snapshot};
use crate::poll::Poller;
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
}

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
    Listening { addr: String },
    Poll { unix: f64, ok: bool, cost_ms: f64, error: Option<String>, derived: BTreeMap<String, f64> },
    Fired { unix: f64, trigger: String, onset_unix: f64 },
    Skipped { unix: f64, trigger: String, why: String },
    Captured { unix: f64, trigger: String, dir: String, verdict: String, onset_to_first_stack_ms: Option<f64> },
    CaptureFailed { unix: f64, trigger: String, error: String },
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
        let mut v: Vec<f64> = self.rows.iter().take(n.saturating_sub(1)).filter(|(t, _)| now - t <= window).filter_map(|(_, d)| d.get(metric).copied()).collect();
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

fn free_bytes(p: &std::path::Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(p).ok()?;
    Some(s.blocks_available() as u64 * s.fragment_size() as u64)
}

/// Run until `stop` is set or `duration` passes.
pub fn run(spec: ConnSpec, pid: Option<i32>, o: &WatchOptions, stop: &AtomicBool, on: &mut dyn FnMut(&Event)) -> Result<()> {
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
    let mut last_capture: Option<Instant> = None;
    let mut recent_captures: VecDeque<Instant> = VecDeque::new();
    let (done_tx, done_rx) = mpsc::channel::<Event>();
    let mut capturing = false;
    let t0 = Instant::now();
    let mut tick = 0u32;
    let mut last_maintain = Instant::now();
    // Captures whose report is rebuilt once the metrics after the stall are in.
    let mut refresh_due: Vec<(f64, PathBuf)> = vec![];
    while !stop.load(Ordering::Relaxed) && o.duration.is_none_or(|d| t0.elapsed() < d) {
        let p = poller.poll();
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
        on(&Event::Poll { unix: p.unix, ok: p.ok, cost_ms: p.cost_ms, error: p.error.clone(), derived: derived.clone() });
        // Finished captures.
        while let Ok(ev) = done_rx.try_recv() {
            capturing = false;
            if let Event::Captured { unix, trigger, dir, verdict, .. } = &ev {
                store.add_capture(*unix, std::path::Path::new(dir), trigger, verdict)?;
                refresh_due.push((unix + AFTER_SECS, PathBuf::from(dir)));
                if let Some(e) = &expo {
                    e.lock().unwrap().captures_total += 1;
                }
            }
            on(&ev);
        }
        refresh_due.retain(|(due, dir)| {
            if p.unix < *due {
                return true;
            }
            if let Err(e) = crate::report::refresh(dir, &store, BEFORE_SECS, AFTER_SECS) {
                tracing::warn!("rebuilding {}: {e:#}", dir.display());
            }
            false
        });
        let ctx = Ctx { now: p.unix, derived: &derived, hist: &hist, failed: !p.ok };
        for (i, t) in o.triggers.iter().enumerate() {
            if armed[i].step(t, p.unix, &ctx) != Step::Fire {
                continue;
            }
            let onset = armed[i].since().unwrap_or(p.unix);
            on(&Event::Fired { unix: p.unix, trigger: t.text.clone(), onset_unix: onset });
            let now = Instant::now();
            while recent_captures.front().is_some_and(|t| now.duration_since(*t) > Duration::from_secs(3600)) {
                recent_captures.pop_front();
            }
            let why = if capturing {
                Some("a capture is already running".to_string())
            } else if last_capture.is_some_and(|l| now.duration_since(l) < o.cooldown) {
                Some(format!("cooldown ({}s)", o.cooldown.as_secs()))
            } else if recent_captures.len() >= o.max_captures_per_hour {
                Some(format!("{} captures in the last hour (--max-captures-per-hour)", o.max_captures_per_hour))
            } else if free_bytes(&o.data_dir).is_some_and(|f| f < o.min_free_bytes) {
                Some(format!("less than {} MiB free in {}", o.min_free_bytes >> 20, o.data_dir.display()))
            } else {
                None
            };
            if let Some(why) = why {
                on(&Event::Skipped { unix: p.unix, trigger: t.text.clone(), why });
                continue;
            }
            capturing = true;
            last_capture = Some(now);
            recent_captures.push_back(now);
            let history = store.range(p.unix - BEFORE_SECS, p.unix).unwrap_or_default();
            let (spec, settings, root, trig, tx) = (spec.clone(), o.capture.clone(), captures_root.clone(), t.text.clone(), done_tx.clone());
            let unix = p.unix;
            std::thread::spawn(move || {
                let ev = capture::gather(&trig, unix, Some(&spec), pid, &settings, history);
                let first_stack = ev.profile.as_ref().and_then(|p| p.samples.first()).map(|s| s.at_unix_ms as f64 / 1000.0);
                let msg = match capture::write(&root, &ev) {
                    Ok((dir, verdict)) => Event::Captured {
                        unix,
                        trigger: trig,
                        dir: dir.display().to_string(),
                        verdict,
                        onset_to_first_stack_ms: first_stack.map(|f| (f - onset) * 1000.0),
                    },
                    Err(e) => Event::CaptureFailed { unix, trigger: trig, error: format!("{e:#}") },
                };
                let _ = tx.send(msg);
            });
        }
        hist.push(p.unix, derived);
        if last_maintain.elapsed() > Duration::from_secs(60) {
            store.maintain(p.unix, &o.retention)?;
            last_maintain = Instant::now();
        }
        tick += 1;
        let next = o.interval * tick;
        if let Some(wait) = next.checked_sub(t0.elapsed()) {
            std::thread::sleep(wait);
        } else {
            // Overran: re-anchor so polls do not bunch up to catch up.
            tick = (t0.elapsed().as_secs_f64() / o.interval.as_secs_f64()).ceil() as u32;
        }
    }
    // Let a running capture finish so its report is not lost.
    if capturing {
        if let Ok(ev) = done_rx.recv_timeout(Duration::from_secs(60)) {
            if let Event::Captured { unix, trigger, dir, verdict, .. } = &ev {
                store.add_capture(*unix, std::path::Path::new(dir), trigger, verdict)?;
                refresh_due.push((0.0, PathBuf::from(dir)));
            }
            on(&ev);
        }
    }
    // Reports still waiting for their "after" get what there is.
    for (_, dir) in refresh_due {
        let _ = crate::report::refresh(&dir, &store, BEFORE_SECS, AFTER_SECS);
    }
    Ok(())
}
