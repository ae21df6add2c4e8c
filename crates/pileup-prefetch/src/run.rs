//! The prefetch loop: ties the stages together.
//!
//! One thread (this loop) follows the relay log and plans; `readers`
//! threads (and, with `--warm pages`, the page warmer) do the reads. The
//! loop asks where the applier is every `poll`, stays within the window
//! ahead of it, works only while the replica lags, and jumps to the
//! applier when it has passed the reader: a lookup for a row the applier
//! already changed is wasted work.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{PrefetchError, Result};
use mysql::prelude::Queryable;
use pileup_replica::applier::{Applier, ApplierProbe};
use pileup_replica::backlog::BacklogProbe;
use pileup_replica::schema::Table;

use crate::config::{Options, Say, Shared, Warm};
use crate::gate::State;
use crate::metrics::Counters;
use crate::page_warmer::PageSender;
use crate::plan::{starts_transaction, Planner};
use crate::progress::Progress;
use crate::readers::{Batcher, ReaderOptions};
use crate::relay::{Read, Relay};
use crate::window::{relay_pos, Limits, Window};

/// Run until `stop` is set (or the duration passes). What the user should
/// know along the way goes to `say`.
pub fn run(
    spec: &pileup_conn::ConnSpec,
    o: &Options,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    say: Say,
) -> Result<()> {
    let reads = Arc::new(crate::reads::ReadTally::new(o.warm == Warm::Sql));
    let sh = Shared { counters, progress: Arc::new(Progress::default()), stop, say, reads };
    let (mut l, handles) = start_loop(spec, o, &sh)?;

    let t0 = Instant::now();
    let running = || !sh.stop.load(Relaxed) && o.duration.is_none_or(|d| t0.elapsed() < d);
    let mut last_poll = t0 - o.poll;
    let mut failed = None;
    while running() {
        if last_poll.elapsed() >= o.poll {
            last_poll = Instant::now();
            if !l.poll() {
                l.reconnect(spec, &running);
                last_poll = Instant::now() - o.poll;
                continue;
            }
        }
        let lagging = l.state.is_warming();
        if let Some(d) = l.deferral.as_mut() {
            // Held only while the applier works through a backlog: caught
            // up means nothing behind, whatever --min-lag says.
            let behind = l.behind.is_none_or(|s| s >= 1);
            d.tick(l.state == State::Warming && behind, &sh.counters, &sh.say);
        }
        if !lagging || l.window.is_full() {
            if !lagging {
                sh.counters.idle_polls.fetch_add(1, Relaxed);
            }
            l.batcher.flush(l.seq);
            std::thread::sleep(Duration::from_millis(if lagging { 5 } else { 20 }));
            // A full window moves as soon as the applier does: look again
            // soon (but no more than 50 times a second).
            if lagging && last_poll.elapsed() >= Duration::from_millis(20) {
                last_poll = Instant::now() - o.poll;
            }
            continue;
        }
        match l.read_one() {
            Err(e) => {
                failed = Some(e);
                break;
            }
            Ok(Got::Event) => {}
            Ok(Got::Nothing) => {
                l.batcher.flush(l.seq);
                std::thread::sleep(Duration::from_millis(5));
            }
            // Nothing to read until the next poll positions the reader.
            Ok(Got::NoReader) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    if let Some(d) = l.deferral.as_mut() {
        d.finish(&sh.counters);
    }
    sh.stop.store(true, Relaxed);
    drop(l);
    for h in handles {
        let _ = h.join();
    }
    failed.map_or(Ok(()), Err)
}

/// Connect, size the window, start the readers (and the page warmer with
/// `--warm pages`) and the purge deferral, and read where the applier
/// stands: the loop ready to run, and the threads to join after it.
fn start_loop(
    spec: &pileup_conn::ConnSpec,
    o: &Options,
    sh: &Shared,
) -> Result<(Loop, Vec<std::thread::JoinHandle<()>>)> {
    let mut ctl = spec.connect()?;
    let mut meta = spec.connect()?;
    let (window_keys, in_flight_trx) = sizes(&mut meta, o)?;
    sh.counters.window_keys.store(window_keys, Relaxed);
    sh.counters.in_flight_trx.store(in_flight_trx, Relaxed);

    let warmer = match o.warm {
        Warm::Sql => None,
        Warm::Pages => Some(crate::page_warmer::start(spec, sh)?),
    };
    let ro = ReaderOptions { readers: o.readers, batch: o.batch, query_timeout: o.query_timeout };
    let (tx, mut handles) = crate::readers::start(spec, &ro, sh, warmer.as_ref().map(|w| &w.0))?;
    let pages = warmer.map(|(ptx, h)| {
        handles.push(h);
        PageSender::new(ptx)
    });
    let batcher = Batcher::new(tx, sh, window_keys, o.batch, o.primary_only, pages);
    let deferral = o.defer_purge.map(|cap| crate::purge::Deferral::new(spec, cap)).transpose()?;
    let mut probe = ApplierProbe::default();
    let ap = probe.read(&mut ctl)?;
    let relay_dir = pileup_replica::applier::relay_dir(&mut meta).ok();
    let limits = Limits { events: o.window_events, keys: window_keys, secs: o.window_secs };
    let l = Loop {
        sh: sh.clone(),
        ctl,
        meta,
        probe,
        ap,
        relay_dir,
        backlog: BacklogProbe::default(),
        state: State::Idle(crate::gate::Idle::NothingAhead),
        behind: None,
        min_lag: o.min_lag,
        window: Window::new(limits),
        relay: Relay::default(),
        planner: Planner::default(),
        tables: HashMap::new(),
        batcher,
        deferral,
        in_flight_trx,
        seq: 0,
        reads_measured: None,
    };
    Ok((l, handles))
}

/// The window's size in keys (given, or what the buffer pool holds), and
/// how many transactions beyond the replica's position parallel workers
/// may be running: with parallel replication the workers run transactions
/// past the position the replica reports (the last one committed in
/// order), and reads for those would come too late, so planning starts two
/// per worker past it.
fn sizes(meta: &mut mysql::Conn, o: &Options) -> Result<(u64, u64)> {
    let window_keys = match o.window_keys {
        Some(k) => k,
        None => {
            let (pool, page, old_pct): (u64, u64, u64) = meta
                .query_first("SELECT @@innodb_buffer_pool_size, @@innodb_page_size, @@innodb_old_blocks_pct")?
                .unwrap_or((128 << 20, 16384, 37));
            crate::window::default_keys(pool, page, old_pct)
        }
    };
    let in_flight_trx: u64 =
        meta.query_first::<u64, _>("SELECT @@slave_parallel_threads").ok().flatten().map(|t| t * 2).unwrap_or(0);
    Ok((window_keys, in_flight_trx))
}

/// What reading one event gave.
enum Got {
    Event,
    Nothing,
    NoReader,
}

/// The loop's state.
struct Loop {
    sh: Shared,
    /// Asks where the applier is.
    ctl: mysql::Conn,
    /// Reads table definitions.
    meta: mysql::Conn,
    probe: ApplierProbe,
    /// Where the applier was at the last poll.
    ap: Applier,
    /// Where the relay logs and their index are (None: unknown).
    relay_dir: Option<(std::path::PathBuf, std::path::PathBuf)>,
    backlog: BacklogProbe,
    /// What to do, as of the last poll, and how far behind the applier is.
    state: State,
    behind: Option<u64>,
    min_lag: u64,
    window: Window,
    relay: Relay,
    planner: Planner,
    tables: HashMap<(String, String), Option<Arc<Table>>>,
    batcher: Batcher,
    deferral: Option<crate::purge::Deferral>,
    in_flight_trx: u64,
    /// Events read so far (numbers the events in the window: the newest is `seq`).
    seq: u64,
    /// When the applier's and the readers' page reads were last measured.
    reads_measured: Option<Instant>,
}

impl Loop {
    /// Ask where the applier is, forget what it passed, jump to it if it
    /// passed the reader. False when the replica is gone.
    fn poll(&mut self) -> bool {
        let asked = Instant::now();
        let answer = self.probe.read(&mut self.ctl);
        if asked.elapsed() > Duration::from_millis(20) {
            tracing::debug!(ms = asked.elapsed().as_millis() as u64, "replica status was slow to answer");
        }
        self.ap = match answer {
            Ok(a) => a,
            Err(e) => {
                (self.sh.say)(format!("lost the replica ({}); reconnecting every second", pileup_conn::error_text(&e)));
                return false;
            }
        };
        let c = &self.sh.counters;
        c.lag_secs.store(self.ap.lag.unwrap_or(0), Relaxed);
        if self.reads_measured.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            self.reads_measured = Some(Instant::now());
            self.sh.reads.measure(&mut self.ctl, self.ap.sql_running, c);
        }
        let backlog = match &self.relay_dir {
            Some((dir, index)) => self.backlog.measure(index, dir, &self.ap.relay_file, self.ap.relay_pos),
            None => Default::default(),
        };
        self.state = crate::gate::decide(self.ap.sql_running, self.ap.lag, &backlog, self.min_lag);
        self.behind = crate::gate::behind_secs(self.ap.lag, &backlog);
        c.backlog_bytes.store(backlog.bytes.unwrap_or(0), Relaxed);
        c.backlog_seconds.store(self.behind.unwrap_or(0), Relaxed);
        c.state.store(self.state.code(), Relaxed);
        let apos = relay_pos(&self.ap.relay_file, self.ap.relay_pos);
        if self.window.advance(apos) {
            // The DDL it waited at is applied: read the definitions again.
            self.tables.clear();
        }
        c.keys_ahead.store(self.window.keys(), Relaxed);
        c.distance_events.store(self.window.len() as u64, Relaxed);
        tracing::trace!(ahead = self.window.len(), keys_ahead = self.window.keys(), apos = self.ap.relay_pos, reader = ?self.relay.position(), lag = ?self.ap.lag, running = self.ap.sql_running, "poll");
        let applier_seq = self.window.applier_seq(self.seq);
        self.sh.progress.applier_at(applier_seq);
        if !self.window.is_empty() {
            let done = self.sh.progress.done_through();
            c.warmed_ahead_events.store(done.saturating_sub(applier_seq), Relaxed);
            if done < applier_seq {
                c.late_polls.fetch_add(1, Relaxed);
            }
        }
        if self.relay.must_jump(self.window.is_empty(), apos) {
            if let Some(p) = self.relay.path().filter(|_| !self.relay.lost()) {
                c.jumps.fetch_add(1, Relaxed);
                tracing::debug!(reader = %p.display(), applier = %self.ap.relay_file.display(), applier_pos = self.ap.relay_pos, "the applier passed the reader: jumping to it");
            }
            self.relay.jump_to(&self.ap.relay_file, self.ap.relay_pos);
            self.window.clear();
            // Everything queued so far is behind the applier now.
            self.sh.progress.applier_at(self.seq + 1);
        }
        true
    }

    /// The replica went away (restart, failover): wait for it, then start
    /// again from wherever its applier is.
    fn reconnect(&mut self, spec: &pileup_conn::ConnSpec, running: &dyn Fn() -> bool) {
        while running() {
            std::thread::sleep(Duration::from_secs(1));
            if let (Ok(c1), Ok(c2)) = (spec.connect(), spec.connect()) {
                (self.ctl, self.meta) = (c1, c2);
                self.probe.forget();
                self.relay_dir = pileup_replica::applier::relay_dir(&mut self.meta).ok();
                self.sh.counters.reconnects.fetch_add(1, Relaxed);
                (self.sh.say)("reconnected".into());
                break;
            }
        }
        self.tables.clear();
        self.relay.forget();
        self.window.reset();
    }

    /// Read and plan one event.
    fn read_one(&mut self) -> Result<Got> {
        let (ev, fmt, end) = match self.relay.next(&self.sh) {
            Read::Event(ev, fmt, end) => (ev, fmt, end),
            Read::Again => return Ok(Got::Event),
            Read::Wait => return Ok(Got::Nothing),
            Read::NoReader => return Ok(Got::NoReader),
            Read::Failed(e) => return Err(PrefetchError::Relay(e)),
        };
        let c = &self.sh.counters;
        self.seq += 1;
        self.window.push(end, ev.header.timestamp, starts_transaction(ev.header.type_code));
        c.events_read.fetch_add(1, Relaxed);
        let issued_before = c.keys_issued.load(Relaxed);
        let in_flight = self.window.in_flight(self.in_flight_trx);
        let (tables, meta, batcher, seq) = (&mut self.tables, &mut self.meta, &mut self.batcher, self.seq);
        let mut table = |schema: &str, name: &str| {
            tables
                .entry((schema.to_string(), name.to_string()))
                .or_insert_with(|| Table::load(meta, schema, name).ok().map(Arc::new))
                .clone()
        };
        let planned = self.planner.plan(&ev, fmt, in_flight, &mut table, c, &mut |lookup| batcher.issue(lookup, seq));
        if planned.ddl {
            self.window.ddl_read();
        }
        self.window.add_keys(c.keys_issued.load(Relaxed) - issued_before);
        Ok(Got::Event)
    }
}
