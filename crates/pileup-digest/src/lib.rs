//! Which statements cost a server, how well they read, and which plans are
//! wrong.
//!
//! Data flows in one direction:
//!
//! * [`input`]: slow-log files (plain, gzip, zstd, standard input) read in
//!   blocks cut at entry boundaries; [`input::slowlog`] turns a block's
//!   entries into events;
//! * [`aggregate`]: each event's statement is reduced to its fingerprint
//!   ([`pileup_sql::fingerprint`]) and added to its [`class::Class`];
//!   blocks are parsed on several threads, each with its own aggregate,
//!   merged at the end;
//! * [`rank`]: classes ordered by total time or by a read-efficiency
//!   signal;
//! * [`report`]: text and JSON;
//! * [`advise`]: the top classes' samples run on a server with
//!   `ANALYZE FORMAT=JSON`, and their variants timed.
//!
//! The library prints nothing: progress goes to a [`Sink`], problems in
//! the input come back in the [`Digest`].

pub mod advise;
pub mod aggregate;
pub mod attr;
pub mod class;
mod error;
pub mod fleet;
pub mod input;
pub mod output;
pub mod rank;
pub mod report;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

pub use aggregate::Problem;
pub use error::Error;
pub use input::Input;
pub use rank::Rank;

use aggregate::Aggregate;
use attr::N_ATTRS;
use class::Class;
use input::slowlog::{self, BlockCtx};

/// How to digest.
#[derive(Clone, Debug)]
pub struct Options {
    /// Threads parsing blocks (1: all on the calling thread).
    pub jobs: usize,
    /// Classes kept apart; statements of further fingerprints go to one
    /// "other" class.
    pub max_classes: usize,
    /// Bytes per block handed to a thread.
    pub block_size: usize,
    /// Keep each minute's classes too ([`Digest::minutes`]): what a
    /// fleet's stored digests hold.
    pub by_minute: bool,
    /// Hand each window of minutes to the sink ([`Sink::window`]) instead
    /// of keeping it in [`Digest::minutes`] (implies `by_minute`). A
    /// followed file is then parsed on one thread, and each window handed
    /// over once it is complete ([`fleet::window::Closer`]); other inputs'
    /// windows are handed over at the end.
    pub windows: Option<WindowOptions>,
}

/// How a digest's minutes are handed over in windows.
#[derive(Clone, Copy, Debug)]
pub struct WindowOptions {
    /// Minutes per window (a divisor of 60; see
    /// [`fleet::layout::window_minutes`]).
    pub minutes: u32,
    /// Seconds after its end that a followed log's window is closed.
    pub grace_s: i64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            max_classes: 10_000,
            block_size: 1 << 20,
            by_minute: false,
            windows: None,
        }
    }
}

/// Where a digest reports while it runs.
pub trait Sink {
    /// Bytes read so far (compressed bytes for compressed inputs), of
    /// `total` when every input's size is known.
    fn progress(&mut self, _done: u64, _total: Option<u64>) {}
    /// A window of minutes is complete ([`Options::windows`]); the digest
    /// keeps nothing of it.
    fn window(&mut self, _w: fleet::window::Window) {}
    /// Something a user following the run should hear now (a server gone
    /// away and waited for), one line.
    fn note(&mut self, _line: &str) {}
}

/// A sink that ignores everything.
pub struct Quiet;
impl Sink for Quiet {}

/// The result: every class, and what could not be read.
#[derive(Debug)]
pub struct Digest {
    pub inputs: Vec<String>,
    /// Statements read.
    pub events: u64,
    /// Bytes read from the inputs (compressed bytes for compressed ones).
    pub bytes: u64,
    pub classes: Vec<Class>,
    /// Statements past `max_classes`, together.
    pub other: Option<Class>,
    pub max_classes: usize,
    /// Problems in the input, in input order (the first
    /// [`aggregate::PROBLEMS_KEPT`] word for word).
    pub problems: Vec<Problem>,
    pub problem_count: u64,
    /// Which attributes some statement logged.
    pub seen: [bool; N_ATTRS],
    /// What an input did not show (performance_schema's digests missing
    /// prepared statements), one line each.
    pub notes: Vec<String>,
    /// Each minute's classes, when asked for ([`Options::by_minute`]).
    pub minutes: Option<aggregate::Minutes>,
}

impl Digest {
    /// Statement time of every class, "other" included.
    pub fn total_time(&self) -> f64 {
        self.classes.iter().chain(self.other.as_ref()).map(|c| c.sum(attr::A::QueryTime)).sum()
    }
}

struct Job {
    input: usize,
    seq: u64,
    db: Vec<u8>,
    block: input::Block,
}

/// A followed file's reader, at its end, says so after this long quiet.
const QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// Hand the windows `closer` finds complete in `agg`'s minutes to `sink`.
fn close_windows(closer: &mut fleet::window::Closer, agg: &mut Aggregate, caught_up: bool, sink: &mut dyn Sink) {
    let Some(m) = agg.minutes.as_mut() else { return };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    for w in closer.take(m, caught_up, now) {
        sink.window(w);
    }
}

/// Read the inputs that come over SQL (the slow-log table,
/// performance_schema's digests) into `agg`; performance_schema's minutes
/// as windows close, when `closer` hands them over.
fn read_sql_inputs(
    inputs: &[Input],
    agg: &mut Aggregate,
    lines: &Mutex<HashMap<(usize, u64), u64>>,
    notes: &mut Vec<String>,
    mut closer: Option<&mut fleet::window::Closer>,
    sink: &mut dyn Sink,
) -> Result<(), Error> {
    let connect = |spec: &pileup_conn::ConnSpec| spec.connect().map_err(|e| Error::Server(format!("{e:#}")));
    for (i, input) in inputs.iter().enumerate() {
        match input {
            Input::Table(spec) => {
                let mut conn = connect(spec)?;
                let (rows, note) = input::table::read(&mut conn, i, agg).map_err(Error::Server)?;
                notes.extend(note);
                lines.lock().unwrap_or_else(|e| e.into_inner()).insert((i, 0), rows);
                continue;
            }
            Input::Digests(spec, duration, stop) => {
                let mut conn = connect(spec)?;
                let (deltas, note) = input::ps::window(&mut conn, *duration, stop).map_err(Error::Server)?;
                for d in deltas {
                    agg.add_digest(&d, i, None);
                }
                notes.extend(note);
            }
            Input::DigestMinutes(spec, stop) => {
                let mut conn = connect(spec)?;
                let mut reader = input::ps::Reader::open(&mut conn).map_err(Error::Server)?;
                if let Some(c) = closer.as_deref_mut() {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    c.joined(now.as_secs() as i64);
                }
                while !stop.load(Ordering::Relaxed) {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    let minute = now.as_secs() as i64 / 60 * 60;
                    let left = std::time::Duration::from_secs((minute + 60) as u64).saturating_sub(now);
                    let (deltas, note) = match reader.next(&mut conn, left, stop) {
                        Ok(r) => r,
                        Err(e) => {
                            // The server went away, and its counters with it:
                            // read again from a new first read once it answers.
                            // The minutes between have no digest; the report
                            // says which.
                            sink.note(&format!("{e}; reading again once it answers"));
                            let Some((c, r)) = reconnect(spec, stop) else { break };
                            let back = std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .map_or(minute, |d| d.as_secs() as i64);
                            let gap = format!(
                                "the server was away from {} to {} UTC: those minutes have no digest",
                                hhmm(minute),
                                hhmm(back)
                            );
                            sink.note(&gap);
                            notes.push(gap);
                            (conn, reader) = (c, r);
                            continue;
                        }
                    };
                    for d in deltas {
                        agg.add_digest(&d, i, Some(minute));
                    }
                    if let Some(n) = note.filter(|n| !notes.contains(n)) {
                        notes.push(n);
                    }
                    if let Some(c) = closer.as_deref_mut() {
                        close_windows(c, agg, true, sink);
                    }
                }
                notes.push(
                    "performance_schema keeps sums: each minute's classes have counts, totals and means, \
                     no minimum, maximum or percentiles"
                        .into(),
                );
            }
            _ => continue,
        }
        lines.lock().unwrap_or_else(|e| e.into_inner()).insert((i, 0), 0);
    }
    Ok(())
}

/// A connection to the server `spec` names and a first read of its
/// digests, tried every 2 s until they come or `stop` is set (then none).
fn reconnect(spec: &pileup_conn::ConnSpec, stop: &AtomicBool) -> Option<(mysql::Conn, input::ps::Reader)> {
    loop {
        if let Ok(mut c) = spec.connect() {
            if let Ok(r) = input::ps::Reader::open(&mut c) {
                return Some((c, r));
            }
        }
        for _ in 0..20 {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// `HH:MM` of a Unix time, UTC.
fn hhmm(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0).map_or_else(String::new, |d| d.format("%H:%M").to_string())
}

/// Problems and samples carry their line within their block: number them
/// from each input's start (`lines`: each block's line count), and name
/// their files. Returns the inputs' names and which attributes were seen.
fn number_lines(
    inputs: &[Input],
    lines: HashMap<(usize, u64), u64>,
    agg: &mut Aggregate,
) -> (Vec<String>, [bool; N_ATTRS]) {
    // Lines were counted per block: number them from each input's start.
    let mut before: HashMap<(usize, u64), u64> = HashMap::new();
    for (i, _) in inputs.iter().enumerate() {
        let mut acc = 0;
        for seq in 0.. {
            let Some(n) = lines.get(&(i, seq)) else { break };
            before.insert((i, seq), acc);
            acc += n;
        }
    }
    let names: Vec<String> = inputs.iter().map(Input::name).collect();
    for p in agg.problems.iter_mut().chain(&mut agg.unfinished) {
        p.line += before.get(&(p.input, p.block)).copied().unwrap_or(0);
        p.file = names[p.input].clone();
    }
    agg.problems.sort_by_key(|p| (p.input, p.line));
    agg.problems.truncate(aggregate::PROBLEMS_KEPT);
    agg.unfinished.sort_by_key(|p| p.input);
    let mut seen = [false; N_ATTRS];
    for c in agg.classes.iter_mut().chain(agg.other.as_mut()) {
        let (input, at) = c.sample.at;
        let (block, line) = (at >> 40, at & ((1 << 40) - 1));
        c.sample.at = (input, line + before.get(&(input, block)).copied().unwrap_or(0));
        for (i, _) in c.stats() {
            seen[i] = true;
        }
    }
    (names, seen)
}

/// Read every input and build the classes.
pub fn digest(inputs: &[Input], o: &Options, sink: &mut dyn Sink) -> Result<Digest, Error> {
    let follows = inputs.iter().any(|i| matches!(i, Input::Follow(..)));
    // Windows closed as a followed log goes need its minutes in one place.
    let jobs = if o.windows.is_some() && follows { 1 } else { o.jobs.max(1) };
    let mut closer = o.windows.map(|w| fleet::window::Closer::new(w.minutes, w.grace_s));
    let idle = closer.as_ref().map(|_| QUIET);
    let sizes: Option<u64> = inputs.iter().map(Input::size).sum();
    let counter = Arc::new(AtomicU64::new(0));
    let lines: Mutex<HashMap<(usize, u64), u64>> = Mutex::default();
    let pool = input::Pool::default();
    let parse = |job: Job, agg: &mut Aggregate| {
        let ctx = BlockCtx { input: job.input, seq: job.seq, db: &job.db, at_end: job.block.last };
        let out = slowlog::parse_block(&job.block, &ctx, agg);
        lines.lock().unwrap_or_else(|e| e.into_inner()).insert((job.input, job.seq), out.lines);
        job.block.recycle(&pool);
    };
    let new_aggregate = || Aggregate::new(o.max_classes).keep_minutes(o.by_minute || o.windows.is_some());
    let mut agg = new_aggregate();
    // A table is read over SQL on this thread, before the files.
    let mut notes = vec![];
    read_sql_inputs(inputs, &mut agg, &lines, &mut notes, closer.as_mut(), sink)?;
    let read_all = |send: &mut dyn FnMut(Job, &mut dyn Sink), sink: &mut dyn Sink| -> Result<(), Error> {
        for (i, input) in inputs.iter().enumerate() {
            if matches!(input, Input::Table(_) | Input::Digests(..) | Input::DigestMinutes(..)) {
                continue;
            }
            let r = input::open(input, counter.clone(), idle)?;
            let mut blocks = input::Blocks::new(r, o.block_size, pool.clone());
            let mut db = Vec::new();
            let mut seq = 0;
            // MySQL names an entry's database only by `use` lines, on
            // change: those logs need the last `use` of each block carried
            // to the next. MariaDB and Percona Server write `Schema:` in
            // every entry.
            let mut track_use = None;
            while let Some(block) = blocks.next_block().map_err(|e| Error::Read(input.name(), e))? {
                let track = *track_use.get_or_insert_with(|| memchr::memmem::find(&block, b"Schema: ").is_none());
                let next_db = if track { slowlog::last_use(&block).map(<[u8]>::to_vec) } else { None };
                let job = Job { input: i, seq, db: db.clone(), block };
                if let Some(d) = next_db {
                    db = d;
                }
                send(job, sink);
                seq += 1;
                sink.progress(counter.load(Ordering::Relaxed), sizes);
            }
        }
        Ok(())
    };
    if jobs == 1 {
        read_all(
            &mut |job, sink| {
                let caught_up = job.block.caught_up;
                parse(job, &mut agg);
                // A finite input's windows are handed over at its end
                // (rotated files come in any order).
                if let Some(c) = closer.as_mut().filter(|_| follows) {
                    close_windows(c, &mut agg, caught_up, sink);
                }
            },
            sink,
        )?;
    } else {
        let (tx, rx) = mpsc::sync_channel::<Job>(jobs);
        let rx = Mutex::new(rx);
        let r = std::thread::scope(|s| {
            let workers: Vec<_> = (0..jobs)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = new_aggregate();
                        loop {
                            let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                            let Ok(job) = job else { break };
                            parse(job, &mut mine);
                        }
                        mine
                    })
                })
                .collect();
            let r = read_all(
                &mut |job, _| {
                    // The workers end only when the channel closes.
                    let _ = tx.send(job);
                },
                sink,
            );
            drop(tx);
            for w in workers {
                match w.join() {
                    Ok(a) => agg.merge(a),
                    Err(p) => std::panic::resume_unwind(p),
                }
            }
            r
        });
        r?;
    }
    let (names, seen) = number_lines(inputs, lines.into_inner().unwrap_or_else(|e| e.into_inner()), &mut agg);
    agg.cap();
    agg.fold_minutes();
    if let (Some(c), Some(m)) = (closer.as_mut(), agg.minutes.as_mut()) {
        for w in c.rest(m) {
            sink.window(w);
        }
    }
    Ok(finish(agg, names, seen, counter.load(Ordering::Relaxed), notes))
}

/// The digest of an aggregate every input went into.
fn finish(agg: Aggregate, inputs: Vec<String>, seen: [bool; N_ATTRS], bytes: u64, mut notes: Vec<String>) -> Digest {
    notes.extend(agg.unfinished.iter().map(|p| format!("{}:{}: {}", p.file, p.line, p.what)));
    let mut classes = agg.classes;
    rank::sort(&mut classes, Rank::Time);
    Digest {
        inputs,
        events: agg.events,
        bytes,
        classes,
        other: agg.other,
        max_classes: agg.max_classes,
        problems: agg.problems,
        problem_count: agg.problem_count,
        seen,
        notes,
        minutes: agg.minutes,
    }
}
