//! The sampler: loads a process's modules once, then takes samples (capture,
//! unwind, symbolize, annotate, count) and builds the [`Profile`].

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use regex::Regex;

use crate::annotate::{self, Annotator, Role, SqlThread};
use crate::capture::{self, CaptureOptions, Mode};
use crate::error::EngineError;
use crate::locks::{self, LockGroup};
use crate::profile::{ModuleReport, Profile, Sample, StopSummary, ThreadStack, Timing};
use crate::{aggregate, debuginfod, modules, proc, symbolize, unwind};

/// `n` samples, said right: "1 sample", "3 samples".
fn samples(n: usize) -> String {
    format!("{n} sample{}", if n == 1 { "" } else { "s" })
}

/// Which threads to sample.
#[derive(Debug, Clone, Default)]
pub struct ThreadFilter {
    /// Threads chosen by id.
    pub tids: Vec<i32>,
    /// Threads chosen by name (`name:REGEX` or `/REGEX/`).
    pub name: Option<Regex>,
    /// Threads chosen by role.
    pub roles: Vec<Role>,
    /// Connections by processlist id (`conn:ID`): the threads serving them.
    pub conns: Vec<u64>,
}

impl ThreadFilter {
    /// Whether the filter chooses every thread (it asks for nothing).
    pub fn is_all(&self) -> bool {
        self.tids.is_empty() && self.name.is_none() && self.roles.is_empty() && self.conns.is_empty()
    }

    /// This filter with the threads now serving its connections added as
    /// thread ids (from the processlist by thread id).
    pub fn with_connection_threads(&self, sql: &HashMap<i32, SqlThread>) -> ThreadFilter {
        let mut f = self.clone();
        if !self.conns.is_empty() {
            f.tids.extend(sql.iter().filter(|(_, s)| self.conns.contains(&s.id)).map(|(t, _)| *t));
        }
        f
    }

    /// Parse a thread selection: comma-separated tids, role names, or
    /// `name:REGEX` / `/REGEX/` for thread names. The error names the part
    /// that is wrong; the caller says which option it came from.
    pub fn parse(spec: &str) -> Result<ThreadFilter, String> {
        let mut f = ThreadFilter::default();
        for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if let Ok(t) = part.parse::<i32>() {
                f.tids.push(t);
            } else if let Some(c) = part.strip_prefix("conn:") {
                f.conns.push(c.parse().map_err(|_| format!("'{part}': expected conn:ID, a processlist id"))?);
            } else if let Some(r) = Role::parse(part) {
                f.roles.push(r);
            } else {
                let re =
                    part.strip_prefix("name:").or_else(|| part.strip_prefix('/').and_then(|p| p.strip_suffix('/')));
                let Some(re) = re else {
                    return Err(format!(
                        "'{part}': expected a thread id, a role (accept, sql-thread, io-thread, connections), conn:ID or name:REGEX"
                    ));
                };
                f.name = Some(Regex::new(re).map_err(|e| {
                    // The regex crate's message runs over several lines
                    // (the pattern, a caret, the error): its last one says what is wrong.
                    let why = e.to_string();
                    format!("name regex '{re}': {}", why.lines().last().unwrap_or("invalid").trim())
                })?);
            }
        }
        Ok(f)
    }

    /// Whether a thread with this id, role and name is chosen (the name is
    /// looked at only when the filter has a name pattern).
    pub fn matches(&self, tid: i32, role: Option<Role>, name: &str) -> bool {
        self.is_all()
            || self.tids.contains(&tid)
            || role.is_some_and(|r| self.roles.contains(&r))
            || self.name.as_ref().is_some_and(|re| re.is_match(name))
    }

    /// Whether thread `tid` of `pid` is chosen: its role from its SQL
    /// connection where there is one, its name read from /proc only when
    /// the filter has a name pattern (a sampler or tracer that follows a
    /// few threads of hundreds reads no file for the others).
    pub fn chooses(&self, pid: i32, tid: i32, sql: Option<&annotate::SqlThread>) -> bool {
        let role = annotate::role_of(pid, tid, sql);
        let name = match &self.name {
            Some(_) => proc::os_thread(pid, tid).map(|o| o.name).unwrap_or_default(),
            None => String::new(),
        };
        self.matches(tid, role, &name) || sql.is_some_and(|s| self.conns.contains(&s.id))
    }
}

/// Options for a run.
#[derive(Debug, Clone)]
pub struct SamplerOptions {
    /// How each sample is captured.
    pub capture: CaptureOptions,
    /// Which threads are sampled.
    pub filter: ThreadFilter,
    /// Accept a process that is not mariadbd/mysqld.
    pub any_process: bool,
    /// Read DWARF for inlined frames and source lines (slower).
    pub debug_info: bool,
    /// Re-read the processlist at most this often while sampling (a long
    /// 10 Hz run must not query the server ten times a second).
    pub sql_refresh: Duration,
    /// Read the processlist again just after each capture that read it
    /// before, and mark the threads whose row changed in between (one more
    /// query per such capture; off for samplers that read it at a high rate).
    pub sql_bracket: bool,
    /// Where separate debug files are looked for (build-id and
    /// `.gnu_debuglink`), in order.
    pub debug_dirs: Vec<std::path::PathBuf>,
    /// debuginfod servers (or their cache alone) to look up missing debug
    /// files in, on a thread of their own (`None`: not at all).
    pub debuginfod: Option<debuginfod::DebuginfodOptions>,
    /// Wait for those lookups before the first sample (a one-shot capture,
    /// whose one sample's lock waits are read by name); otherwise sampling
    /// starts at once and names are applied as the files arrive, and at the
    /// end.
    pub debuginfod_wait: bool,
    /// Samples kept whole (the last ones); every sample is counted in the
    /// profile's stacks, lock groups and stop statistics regardless.
    pub keep_samples: usize,
}

impl SamplerOptions {
    /// A profile taken while the server works, for as long as it is asked
    /// for: no thread stopped (passive), 64 KiB of each stack, no DWARF,
    /// debug files only from debuginfod's cache (nothing fetched), the last
    /// sample kept whole; the processlist re-read at most every
    /// `sql_refresh`, never bracketing a capture.
    pub fn passive_profile(any_process: bool, sql_refresh: Duration) -> SamplerOptions {
        SamplerOptions {
            capture: CaptureOptions { mode: Mode::Passive, stack_bytes: 64 * 1024, ..Default::default() },
            filter: ThreadFilter::default(),
            any_process,
            debug_info: false,
            sql_refresh,
            sql_bracket: false,
            keep_samples: 1,
            debug_dirs: default_debug_dirs(),
            debuginfod: Some(debuginfod::DebuginfodOptions::cache_only()),
            debuginfod_wait: true,
        }
    }
}

/// How far a run is, for a progress line.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Samples taken so far.
    pub taken: usize,
    /// Samples the run was asked for.
    pub of: usize,
    /// Distinct stacks counted so far (what the run's memory grows with).
    pub distinct_stacks: usize,
}

/// The debug directories searched unless told otherwise.
pub fn default_debug_dirs() -> Vec<std::path::PathBuf> {
    modules::DEBUG_DIRS.iter().map(std::path::PathBuf::from).collect()
}

/// Samples kept whole unless told otherwise.
pub const KEEP_SAMPLES: usize = 100;

/// A process's modules as a sampler loaded them (their unwind and symbol
/// tables, and the debug files found for them), kept by a caller that
/// samples the same process again (`watch`'s captures): the next sampler
/// starts at once instead of reading every module again, which on a busy
/// host takes a capture's first few hundred milliseconds. Used again only
/// while the process maps the same code (the same pid and executable
/// mappings); otherwise the modules are loaded afresh.
pub struct LoadedModules {
    pid: i32,
    exec: Vec<(u64, u64, u64, String)>,
    mods: modules::ModuleSet,
}

impl LoadedModules {
    /// Load `pid`'s modules now (before they are needed).
    pub fn load(pid: i32, debug_dirs: &[std::path::PathBuf]) -> Result<LoadedModules, EngineError> {
        let maps = proc::read_maps(pid)?;
        Ok(LoadedModules { pid, exec: exec_mappings(&maps), mods: modules::ModuleSet::load(pid, &maps, debug_dirs) })
    }

    /// The process the modules were loaded from.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

/// The executable mappings, which say whether loaded modules still fit.
fn exec_mappings(maps: &[proc::MapEntry]) -> Vec<(u64, u64, u64, String)> {
    maps.iter().filter(|m| m.is_exec()).map(|m| (m.start, m.end, m.offset, m.path.clone())).collect()
}

/// Samples one process: loads its modules once, takes samples
/// ([`Sampler::sample`], [`Sampler::run`]) and builds the [`Profile`]
/// ([`Sampler::finish`]).
pub struct Sampler {
    /// The process sampled.
    pub pid: i32,
    /// Its executable's name.
    pub exe: String,
    opts: SamplerOptions,
    maps: Vec<proc::MapEntry>,
    mods: modules::ModuleSet,
    /// The executable mappings `mods` was loaded for.
    exec: Vec<(u64, u64, u64, String)>,
    cache: framehop::x86_64::CacheX86_64,
    symbols: symbolize::SymbolCache,
    sql: Option<Box<dyn Annotator>>,
    sql_error: Option<String>,
    sql_cache: Option<(Instant, HashMap<i32, SqlThread>)>,
    /// CPU time of the server thread serving pileup's connection when the
    /// run started (nanoseconds).
    sql_cpu_start: Option<u64>,
    /// pileup's own CPU time when the sampler was made (microseconds): a
    /// long-running caller (`watch`) makes one per capture.
    cpu_start_us: u64,
    /// The machine's context switches and the time when the sampler began.
    switches_start: (Option<u64>, Instant),
    samples: VecDeque<Sample>,
    taken: usize,
    tally: aggregate::Tally,
    locks: Vec<LockGroup>,
    stops: StopSummary,
    /// Samples in which no thread matched the filter.
    unmatched: usize,
    windows: hdrhistogram::Histogram<u64>,
    timing: Timing,
    notes: Vec<String>,
    fetching: Option<Fetching>,
    /// The run was ended by a signal.
    interrupted: bool,
    /// Passive capture's state (why perf events cannot be opened, once known).
    passive: capture::passive::Passive,
    /// The note that lock waits were read before a module's debug file
    /// arrived (by exported names only) was given.
    noted_early_locks: bool,
}

/// Debug files being looked up on debuginfod's thread.
struct Fetching {
    rx: std::sync::mpsc::Receiver<debuginfod::Arrival>,
    pending: usize,
}

/// Sample start times `interval` apart from the run's start. A sample
/// that falls due while the previous one is still being taken is skipped,
/// never taken late in a burst.
struct Ticks {
    interval: Duration,
    /// The last tick a sample started at.
    tick: u64,
    /// Ticks passed over.
    skipped: u64,
}

impl Ticks {
    /// The next tick still ahead, `elapsed` after the start, and when
    /// (since the start) it is.
    fn due(&self, elapsed: Duration) -> (u64, Duration) {
        let due = (elapsed.as_nanos() / self.interval.as_nanos().max(1)) as u64 + 1;
        (due, self.interval.saturating_mul(due.min(u32::MAX as u64) as u32))
    }

    /// A sample starts at tick `due`; the ticks since the last are skipped.
    fn take(&mut self, due: u64) {
        self.skipped += due.saturating_sub(self.tick + 1);
        self.tick = due;
    }

    /// [`Ticks::due`], taken.
    #[cfg(test)]
    fn next(&mut self, elapsed: Duration) -> Duration {
        let (due, at) = self.due(elapsed);
        self.take(due);
        at
    }
}

/// The threads one sample takes, and what was read of them before it.
struct Selection {
    /// Every thread looked at (sorted), and whether they were named by id
    /// rather than listed.
    tids: Vec<i32>,
    by_tid: bool,
    chosen: Vec<i32>,
    os: HashMap<i32, proc::OsThread>,
    sql: HashMap<i32, SqlThread>,
    /// The processlist was read for this sample (not taken from the cache):
    /// it is read again after the capture to bracket it.
    sql_fresh: bool,
}

/// Which of `tids` the filter chooses, with the OS state read of each
/// (`os_of`) and how many io_uring workers were passed over (they have no
/// user-space stack). Without a name pattern the filter decides from tid
/// and role alone, so the OS state of threads not chosen is not read: one
/// thread at 100 Hz on a server of hundreds must not read hundreds of files
/// a sample.
fn choose(
    filter: &ThreadFilter,
    tids: &[i32],
    role_of: impl Fn(i32) -> Option<Role>,
    mut os_of: impl FnMut(i32) -> proc::OsThread,
) -> (Vec<i32>, HashMap<i32, proc::OsThread>, usize) {
    let by_name = filter.is_all() || filter.name.is_some();
    let mut chosen = Vec::with_capacity(tids.len());
    let mut os = HashMap::with_capacity(tids.len());
    let mut io_workers = 0;
    for &tid in tids {
        let role = role_of(tid);
        if !by_name && !filter.matches(tid, role, "") {
            continue;
        }
        let o = os_of(tid);
        if o.io_worker {
            io_workers += 1;
            continue;
        }
        if filter.matches(tid, role, &o.name) {
            chosen.push(tid);
        }
        os.insert(tid, o);
    }
    (chosen, os, io_workers)
}

impl Sampler {
    /// A sampler of `pid`, its modules loaded now; `sql`, when given, names the
    /// SQL side of its threads. Fails when the process is not there, or is not
    /// a server and `opts.any_process` is off.
    pub fn new(pid: i32, opts: SamplerOptions, sql: Option<Box<dyn Annotator>>) -> Result<Sampler, EngineError> {
        Sampler::with_modules(pid, opts, sql, None)
    }

    /// [`Sampler::new`], with the modules a sampler of the same process
    /// loaded before ([`Sampler::finish_keeping_modules`]) when they still
    /// fit.
    pub fn with_modules(
        pid: i32,
        opts: SamplerOptions,
        sql: Option<Box<dyn Annotator>>,
        kept: Option<LoadedModules>,
    ) -> Result<Sampler, EngineError> {
        let cpu_start_us = proc::own_cpu_us();
        let switches_start = (proc::context_switches(), Instant::now());
        let exe = proc::check_target(pid, opts.any_process)?;
        let t = Instant::now();
        let maps = proc::read_maps(pid)?;
        let exec = exec_mappings(&maps);
        let mods = match kept {
            Some(k) if k.pid == pid && k.exec == exec => k.mods,
            _ => modules::ModuleSet::load(pid, &maps, &opts.debug_dirs),
        };
        let mut notes = vec![];
        for (p, why) in &mods.unreadable {
            notes.push(format!(
                "module {p} could not be read ({why}); its frames are unnamed and unwinding through it may stop"
            ));
        }
        if !opts.filter.roles.is_empty() && opts.filter.roles.iter().any(|r| *r != Role::Accept) && sql.is_none() {
            notes.push("--focus with a role other than accept needs a SQL connection to know which thread is which; none is open".into());
        }
        let timing = Timing { load_modules_us: t.elapsed().as_micros() as u64, ..Default::default() };
        let sql_cpu_start = sql.as_ref().and_then(|s| s.server_cpu_ns(pid));
        let mut s = Sampler {
            pid,
            exe,
            maps,
            mods,
            exec,
            cache: Default::default(),
            symbols: symbolize::SymbolCache::new(opts.debug_info, &opts.debug_dirs),
            opts,
            sql,
            sql_error: None,
            sql_cache: None,
            sql_cpu_start,
            cpu_start_us,
            switches_start,
            samples: VecDeque::new(),
            taken: 0,
            tally: Default::default(),
            locks: vec![],
            stops: StopSummary::default(),
            unmatched: 0,
            // Stop windows from 1 µs to an hour, 3 significant digits.
            windows: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
            timing,
            notes,
            fetching: None,
            interrupted: false,
            passive: Default::default(),
            noted_early_locks: false,
        };
        s.start_fetching();
        Ok(s)
    }

    /// Look up missing debug files on a thread of its own; with
    /// `debuginfod_wait`, wait for them now.
    fn start_fetching(&mut self) {
        let Some(o) = self.opts.debuginfod.clone() else { return };
        let wanted = self.mods.wanting_debug_files();
        if wanted.is_empty() {
            return;
        }
        let pending = wanted.len();
        self.fetching = Some(Fetching { rx: debuginfod::spawn(o, wanted), pending });
        if self.opts.debuginfod_wait {
            self.apply_fetched(true);
        }
    }

    /// Use the debug files that have arrived (`wait`: all of them, each
    /// within the fetch timeout) and name again what was already sampled.
    fn apply_fetched(&mut self, wait: bool) {
        let (Some(f), Some(o)) = (self.fetching.as_mut(), self.opts.debuginfod.as_ref()) else { return };
        let mut changed = vec![];
        while f.pending > 0 {
            let got = if wait {
                f.rx.recv_timeout(o.timeout + Duration::from_secs(2)).map_err(|e| e.to_string())
            } else {
                match f.rx.try_recv() {
                    Ok(a) => Ok(a),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(e) => Err(e.to_string()),
                }
            };
            let Ok(a) = got else {
                f.pending = 0;
                break;
            };
            f.pending -= 1;
            let module = a.module;
            let applied = debuginfod::apply(&mut self.mods, o, a);
            if applied.used {
                changed.push(module);
            }
            self.notes.extend(applied.note);
            if applied.failed {
                f.pending = 0;
            }
        }
        if f.pending == 0 {
            self.fetching = None;
        }
        if !changed.is_empty() {
            self.rename(&changed);
        }
    }

    /// Name again every stored stack through the modules whose debug info
    /// just arrived.
    fn rename(&mut self, modules: &[usize]) {
        if self.taken > 0 && !self.noted_early_locks {
            self.noted_early_locks = true;
            let names: Vec<&str> = modules.iter().map(|&i| self.mods.modules[i].name.as_str()).collect();
            self.notes.push(format!(
                "the lock waits of the first {} read before the debug info of {} arrived (by exported names only); their stacks are named",
                if self.taken == 1 { "sample were".to_string() } else { format!("{} samples were", self.taken) },
                names.join(", ")
            ));
        }
        let ranges: Vec<std::ops::Range<u64>> = modules.iter().map(|&i| self.mods.modules[i].avma.clone()).collect();
        self.symbols.forget(|a| ranges.iter().any(|r| r.contains(&a)));
        let mut addrs: BTreeSet<u64> = self.tally.addrs().collect();
        addrs.extend(self.samples.iter().flat_map(|s| s.threads.iter()).flat_map(|t| t.addrs.iter().copied()));
        addrs.extend(self.locks.iter().flat_map(|l| l.waiting_in_addrs.iter().chain(&l.holder_addrs).copied()));
        self.symbols.add(&self.mods, addrs);
        let syms = &self.symbols;
        self.tally.refresh(|addrs| syms.stack(addrs));
        for t in self.samples.iter_mut().flat_map(|s| s.threads.iter_mut()) {
            t.frames = syms.stack(&t.addrs);
        }
        for l in &mut self.locks {
            l.waiting_in = syms.labels(&l.waiting_in_addrs);
            if l.holder_stack.is_some() {
                l.holder_stack = Some(syms.labels(&l.holder_addrs));
            }
        }
    }

    /// The server's version as the annotator reports it (`None` without one).
    pub fn server_version(&self) -> Option<&str> {
        self.sql.as_ref().map(|s| s.version())
    }

    /// The processlist by OS thread, and whether it was read now (not
    /// taken from the cache).
    fn sql_threads(&mut self) -> (HashMap<i32, SqlThread>, bool) {
        if let Some((at, m)) = &self.sql_cache {
            if at.elapsed() < self.opts.sql_refresh {
                return (m.clone(), false);
            }
        }
        let Some(s) = self.sql.as_mut() else { return (HashMap::new(), false) };
        match s.threads() {
            Ok(m) => {
                self.sql_cache = Some((Instant::now(), m.clone()));
                (m, true)
            }
            Err(e) => {
                // Stacks never depend on SQL: note it once and go on without.
                if self.sql_error.is_none() {
                    let msg = format!("SQL annotation failed ({e:#}); stacks are captured without it");
                    self.notes.push(msg.clone());
                    self.sql_error = Some(msg);
                }
                (HashMap::new(), false)
            }
        }
    }

    /// Take one sample: select threads, stop/copy/resume, unwind the copies,
    /// name their frames, read their lock waits, count them.
    pub fn sample(&mut self) -> Result<&Sample, EngineError> {
        let pid = self.pid;
        // Gone, or a zombie its parent has not reaped yet (its threads and
        // memory are gone, its /proc entry is not).
        if !proc::alive(pid) {
            return Err(EngineError::ProcessExited(pid));
        }
        let sel = self.select()?;
        let at_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        let raw = self.capture(&sel)?;
        if raw.threads.is_empty() && !sel.chosen.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(EngineError::ProcessExited(pid));
        }
        let idx = self.taken;
        self.taken += 1;
        let late: HashSet<i32> = raw.threads.iter().filter(|t| t.late).map(|t| t.tid).collect();
        let capture::RawSample { threads: copies, missed, stats } = raw;
        let mut sql = sel.sql;
        if sel.sql_fresh {
            // The rows read before the stop, checked against a read just
            // after it (the threads already run again).
            if let Some(Ok(after)) = self.sql.as_mut().map(|s| s.threads()) {
                annotate::bracket(&mut sql, &after);
            }
        }
        let mut threads = self.unwind(copies, sel.os, sql);
        self.name_frames(&mut threads);
        let t_ann = Instant::now();
        let tids: HashSet<i32> = sel.tids.iter().copied().chain(threads.iter().map(|t| t.tid)).collect();
        self.lock_waits(&mut threads, &late, &tids, idx);
        self.count(&threads);
        self.timing.annotate_us += t_ann.elapsed().as_micros() as u64;
        self.stops.add(idx, &stats, &missed, at_unix_ms);
        let _ = self.windows.record(stats.window_us.max(1));
        self.samples.push_back(Sample { index: idx, at_unix_ms, stats, threads, missed });
        while self.samples.len() > self.opts.keep_samples.max(1) {
            self.samples.pop_front();
        }
        Ok(self.samples.back().unwrap())
    }

    /// The threads this sample takes, and what is known of them before any
    /// stop: SQL and OS state are read before the stop, never during it.
    fn select(&mut self) -> Result<Selection, EngineError> {
        let pid = self.pid;
        // Threads named by id alone are looked up, not listed: one thread at
        // 10 Hz for hours must not read a directory of hundreds each time.
        let f = &self.opts.filter;
        let by_tid = !f.tids.is_empty() && f.roles.is_empty() && f.name.is_none();
        let tids = if by_tid {
            let mut v: Vec<i32> = f
                .tids
                .iter()
                .copied()
                .filter(|t| std::path::Path::new(&format!("/proc/{pid}/task/{t}")).exists())
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        } else {
            proc::tids(pid)?
        };
        let t_ann = Instant::now();
        let (sql, read_now) = self.sql_threads();
        let sql_fresh = self.opts.sql_bracket && read_now;
        let role = |tid: i32| annotate::role_of(pid, tid, sql.get(&tid));
        let filter = self.opts.filter.with_connection_threads(&sql);
        let (chosen, os, io_workers) =
            choose(&filter, &tids, role, |tid| proc::os_thread(pid, tid).unwrap_or_default());
        self.timing.annotate_us += t_ann.elapsed().as_micros() as u64;
        if io_workers > 0 && !self.notes.iter().any(|n| n.contains("io_uring")) {
            self.notes.push(format!(
                "{io_workers} io_uring kernel worker {} no user-space stack and {} not sampled",
                if io_workers == 1 { "thread has" } else { "threads have" },
                if io_workers == 1 { "is" } else { "are" }
            ));
        }
        if chosen.is_empty() {
            self.unmatched += 1;
        }
        Ok(Selection { tids, by_tid, chosen, os, sql, sql_fresh })
    }

    /// Stop (or not, in passive mode) and copy the chosen threads.
    fn capture(&mut self, sel: &Selection) -> Result<capture::RawSample, EngineError> {
        let pid = self.pid;
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(EngineError::ProcessExited(pid));
        }
        let mut raw = match self.opts.capture.mode {
            // Its perf events live as long as the sampler.
            Mode::Passive => self.passive.capture(pid, &sel.chosen, &self.maps, &self.opts.capture),
            _ => {
                // The OS states just read: blocked threads are read without a stop.
                let asleep: Vec<i32> = sel
                    .chosen
                    .iter()
                    .copied()
                    .filter(|t| sel.os.get(t).is_some_and(|o| matches!(o.state, 'S' | 'D')))
                    .collect();
                capture::capture(pid, &sel.chosen, &asleep, &self.maps, &self.opts.capture)?
            }
        };
        if !sel.by_tid {
            raw.stats.threads_appeared = proc::tids(pid)
                .map(|now| now.iter().filter(|t| sel.tids.binary_search(t).is_err()).count())
                .unwrap_or(0);
        }
        self.timing.capture_us += raw.stats.capture_us;
        Ok(raw)
    }

    /// Unwind each copy (the threads run again meanwhile) and join it to
    /// what was known of its thread.
    fn unwind(
        &mut self,
        copies: Vec<capture::RawThread>,
        mut os: HashMap<i32, proc::OsThread>,
        sql: HashMap<i32, SqlThread>,
    ) -> Vec<ThreadStack> {
        let pid = self.pid;
        let t_unw = Instant::now();
        let mut threads = Vec::with_capacity(copies.len());
        for rt in copies {
            let mods = &self.mods;
            let call_ok = |ra: u64, callee: u64| modules::call_into(pid, mods, ra, callee);
            let u = unwind::unwind(&mods.unwinder, &mut self.cache, &rt.regs, rt.stack_addr, &rt.stack, call_ok);
            let o = os.remove(&rt.tid).unwrap_or_default();
            let s = sql.get(&rt.tid).cloned();
            threads.push(ThreadStack {
                tid: rt.tid,
                name: o.name,
                state: o.state,
                state_label: proc::state_label(o.state),
                wchan: o.wchan,
                syscall: rt.regs.blocked_syscall().map(crate::regs::syscall_name),
                file: proc::file_io(pid, &rt.regs),
                role: annotate::role_of(pid, rt.tid, s.as_ref()),
                sql: s,
                lock_wait: None,
                stopped_us: rt.stopped_us,
                held_us: rt.held_us,
                frames: vec![],
                addrs: u.frames.iter().map(|f| f.lookup()).collect(),
                unwind_error: u.error,
                futex: rt.futex,
            });
        }
        self.timing.unwind_us += t_unw.elapsed().as_micros() as u64;
        threads
    }

    /// Names for the addresses not seen before, through any debug file that
    /// has arrived meanwhile.
    fn name_frames(&mut self, threads: &mut [ThreadStack]) {
        let t_sym = Instant::now();
        self.apply_fetched(false);
        self.symbols.add(&self.mods, threads.iter().flat_map(|t| t.addrs.iter().copied()));
        for t in threads {
            t.frames = self.symbols.stack(&t.addrs);
        }
        self.timing.symbolize_us += t_sym.elapsed().as_micros() as u64;
    }

    /// Lock waits and owners of sample `idx`: facts of this instant, read
    /// from each waiter's futex word and frames, grouped by lock with their
    /// holders' stacks and statements.
    fn lock_waits(&mut self, threads: &mut [ThreadStack], late: &HashSet<i32>, tids: &HashSet<i32>, idx: usize) {
        let mut waits = vec![];
        for t in threads.iter_mut() {
            if let Some((addr, window)) = t.futex.take() {
                let labels: Vec<&str> = t.labels().collect();
                let mut w = locks::classify(&labels, addr, &window, tids, t.tid);
                if late.contains(&t.tid) {
                    w = locks::read_late(w);
                }
                waits.push((t.tid, w.clone()));
                t.lock_wait = Some(w);
            }
        }
        let mut groups = locks::group_with_late(&waits, late, idx);
        let stack_of = |tid: i32| threads.iter().find(|t| t.tid == tid);
        for g in &mut groups {
            if let Some(t) = g.waits.first().and_then(|w| stack_of(w.tid)) {
                g.waiting_in = t.labels().map(String::from).collect();
                g.waiting_in_addrs = t.addrs.clone();
            }
            if let Some(t) = g.owner_tid.filter(|_| g.owner_sample == Some(idx)).and_then(stack_of) {
                g.holder_stack = Some(t.labels().map(String::from).collect());
                g.holder_addrs = t.addrs.clone();
                g.holder = match &t.sql {
                    Some(sql) => Some(sql.summary(160)),
                    None if !t.name.is_empty() => Some(t.name.clone()),
                    None => None,
                };
            }
        }
        if !groups.is_empty() {
            let mut all = std::mem::take(&mut self.locks);
            all.extend(groups);
            self.locks = locks::merge(all);
        }
    }

    /// Count the sample's stacks. Without DWARF a frame's name is its
    /// function's: the innermost frame is counted by its function's start.
    fn count(&mut self, threads: &[ThreadStack]) {
        for t in threads {
            let leaf_start = (!self.opts.debug_info)
                .then(|| t.addrs.first())
                .flatten()
                .and_then(|&a| self.mods.find(a).and_then(|m| m.func_start(m.svma(a)).map(|s| s.wrapping_add(m.bias))));
            self.tally.add(t, leaf_start);
        }
    }

    /// Take `n` samples `interval` apart (start to start), calling `progress`
    /// after each. Stops early, keeping what it has, if the process exits.
    pub fn run(
        &mut self,
        n: usize,
        interval: Duration,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<(), EngineError> {
        self.run_until(n, interval, None, None, |p| progress(p.taken, p.of))
    }

    /// [`Sampler::run`], also stopping (keeping what it has) once `stop` is
    /// set: a signal handler sets it, and the profile is still whole. A
    /// sample that falls due while the previous one is still being taken is
    /// skipped, never taken late in a burst.
    /// With `for_at_most` (a `--duration`), no sample starts after that
    /// long: skipped ticks do not stretch the run. An error other than the
    /// process exiting, after samples were taken, ends the run with a note
    /// and keeps them.
    pub fn run_until(
        &mut self,
        n: usize,
        interval: Duration,
        for_at_most: Option<Duration>,
        stop: Option<&AtomicBool>,
        mut progress: impl FnMut(Progress),
    ) -> Result<(), EngineError> {
        let t0 = Instant::now();
        let stopped = || stop.is_some_and(|s| s.load(Ordering::SeqCst));
        let mut ticks = Ticks { interval, tick: 0, skipped: 0 };
        for i in 0..n {
            if stopped() {
                self.notes.push(format!(
                    "stopped by a signal after {} of {n} {}",
                    self.taken,
                    if n == 1 { "sample" } else { "samples" }
                ));
                self.interrupted = true;
                break;
            }
            match self.sample().map(|_| ()) {
                Ok(()) => {}
                Err(EngineError::ProcessExited(p) | EngineError::NoSuchProcess(p)) if self.taken > 0 => {
                    self.notes.push(format!("process {p} exited after {}; showing those", samples(self.taken)));
                    break;
                }
                Err(e) if self.taken > 0 => {
                    self.notes.push(format!("sampling ended after {}: {e}; showing those", samples(self.taken)));
                    break;
                }
                Err(e) => return Err(e),
            }
            progress(Progress { taken: i + 1, of: n, distinct_stacks: self.tally.distinct() });
            if i + 1 == n {
                break;
            }
            let (due, next) = ticks.due(t0.elapsed());
            if for_at_most.is_some_and(|d| next >= d) {
                break;
            }
            ticks.take(due);
            // Sleep in short steps so a stop request is seen promptly.
            while let Some(wait) = (t0 + next).checked_duration_since(Instant::now()) {
                if stopped() {
                    break;
                }
                std::thread::sleep(wait.min(Duration::from_millis(50)));
            }
        }
        let skipped = ticks.skipped;
        if skipped > 0 {
            self.notes.push(format!(
                "{} due while the previous one was still being taken and {} skipped (--interval-ms {} is shorter than a sample takes)",
                if skipped == 1 { "1 sample fell".to_string() } else { format!("{skipped} samples fell") },
                if skipped == 1 { "was" } else { "were" },
                interval.as_millis()
            ));
        }
        Ok(())
    }

    /// Build the profile (waiting, within the fetch timeout, for debug
    /// files still on their way).
    pub fn finish(self) -> Profile {
        self.finish_with_modules().0
    }

    /// The modules, for the next sampler of the same process, without a
    /// profile (a run not wanted).
    pub fn into_modules(self) -> LoadedModules {
        LoadedModules { pid: self.pid, exec: self.exec, mods: self.mods }
    }

    /// [`Sampler::finish`], keeping the modules for the next sampler of
    /// the same process ([`Sampler::with_modules`]).
    pub fn finish_keeping_modules(self) -> (Profile, LoadedModules) {
        self.finish_with_modules()
    }

    fn finish_with_modules(mut self) -> (Profile, LoadedModules) {
        // Stopped by a signal: the user wants the result now, not after a
        // download.
        let wait = !self.interrupted;
        self.apply_fetched(wait);
        if self.fetching.is_some() {
            self.notes.push("debug files still being fetched were not waited for; their modules' frames are labelled module+0xFUNCSTART".into());
        }
        let w = &self.windows;
        if !w.is_empty() {
            self.stops.median_window_us = w.value_at_quantile(0.5);
            self.stops.p99_window_us = w.value_at_quantile(0.99);
        }
        let addrs: BTreeSet<u64> = self.symbols.by_addr.keys().copied().collect();
        if self.unmatched > 0 {
            self.notes.push(format!("{} of {}: no thread matched --focus", self.unmatched, samples(self.taken)));
        }
        if self.stops.sampled_by_thread_event > 0 {
            self.notes.push(format!(
                "passive mode sampled runnable threads with perf events attached to them: {}",
                self.passive
                    .fallback_reason()
                    .unwrap_or_else(|| "CPU events or the eBPF iterator could not be had".into())
            ));
        }
        if self.stops.budget_exceeded > 0 {
            let released =
                self.stops.missed.iter().filter(|(r, _)| r.contains("max-stop")).map(|(_, n)| n).sum::<usize>();
            // The budget can also run out while sleeping threads are checked
            // again, with every thread that can run already copied.
            let what = if released == 0 {
                "no thread was released uncopied (sleeping threads not checked again in time keep the copy read just before the window)".to_string()
            } else {
                match released {
                    1 => "1 thread was released uncaptured".to_string(),
                    n => format!("{n} threads were released uncaptured"),
                }
            };
            self.notes.push(format!(
                "--max-stop-ms {} ran out in {} sample(s); {what}",
                self.opts.capture.max_stop.as_millis(),
                self.stops.budget_exceeded
            ));
        }
        let mut modules = vec![];
        let mut named_total = 0usize;
        for m in &self.mods.modules {
            let mine: Vec<&u64> = addrs.iter().filter(|a| m.avma.contains(a)).collect();
            let named = mine.iter().filter(|a| self.symbols.named(***a)).count();
            named_total += named;
            if mine.is_empty() {
                continue;
            }
            modules.push(ModuleReport {
                name: m.name.clone(),
                path: m.path.clone(),
                build_id: m.build_id.clone(),
                symbols: m.symbols.describe(),
                debug_file: m.symbols.debug_file.clone(),
                frames: mine.len(),
                named,
            });
        }
        modules.sort_by_key(|b| std::cmp::Reverse(b.frames));
        let named_pct = if addrs.is_empty() { 100.0 } else { 100.0 * named_total as f64 / addrs.len() as f64 };
        let version = self.server_version().map(String::from);
        let mut timing = self.timing;
        timing.cpu_us = proc::own_cpu_us().saturating_sub(self.cpu_start_us);
        let (switches, since) = self.switches_start;
        timing.machine_context_switches_per_s = switches
            .zip(proc::context_switches())
            .map(|(a, b)| (b.saturating_sub(a) as f64 / since.elapsed().as_secs_f64().max(1e-3)) as u64);
        // After an SQL error the connection's thread may serve someone else.
        let sql_cpu_end =
            self.sql.as_ref().filter(|_| self.sql_error.is_none()).and_then(|s| s.server_cpu_ns(self.pid));
        timing.server_sql_cpu_us = match (self.sql_cpu_start, sql_cpu_end) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) / 1000),
            _ => None,
        };
        let profile = Profile {
            pid: self.pid,
            exe: self.exe,
            server_version: version,
            mode: self.opts.capture.mode,
            thread_stacks: self.tally.thread_stacks,
            stacks: self.tally.into_counted(),
            stops: self.stops,
            samples: self.samples.into(),
            modules,
            named_pct,
            locks: self.locks,
            timing,
            notes: self.notes,
        };
        (profile, LoadedModules { pid: self.pid, exec: self.exec, mods: self.mods })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_due_while_the_last_is_taken_is_skipped_not_taken_late() {
        let ms = Duration::from_millis;
        let mut t = Ticks { interval: ms(100), tick: 0, skipped: 0 };
        assert_eq!(t.next(ms(30)), ms(100));
        assert_eq!(t.next(ms(130)), ms(200));
        assert_eq!(t.skipped, 0);
        // The sample at 200 took 250 ms: 300 and 400 fell due meanwhile.
        assert_eq!(t.next(ms(450)), ms(500));
        assert_eq!(t.skipped, 2);
        assert_eq!(t.next(ms(520)), ms(600));
        assert_eq!(t.skipped, 2);
    }

    fn os(name: &str, io_worker: bool) -> proc::OsThread {
        proc::OsThread { name: name.into(), state: 'S', io_worker, ..Default::default() }
    }

    #[test]
    fn threads_are_chosen_by_id_role_or_name_and_unchosen_ones_are_not_read_without_a_name_pattern() {
        let names = |t: i32| match t {
            1 => os("mariadbd", false),
            2 => os("iou-wrk-1", true),
            3 => os("one_connection", false),
            _ => os("ib_io_wr-1", false),
        };
        let role = |t: i32| (t == 3).then_some(Role::Connection);
        let tids = [1, 2, 3, 4];
        // Everything: every thread read, the io_uring worker passed over.
        let (chosen, seen, io) = choose(&ThreadFilter::default(), &tids, role, names);
        assert_eq!((chosen, seen.len(), io), (vec![1, 3, 4], 3, 1));
        // By id and role: only the chosen threads' state is read.
        let mut read = vec![];
        let f = ThreadFilter::parse("4,connections").unwrap();
        let (chosen, seen, _) = choose(&f, &tids, role, |t| {
            read.push(t);
            names(t)
        });
        assert_eq!(chosen, vec![3, 4]);
        assert_eq!(read, vec![3, 4]);
        assert_eq!(seen.len(), 2);
        // By name: every thread's name must be read to choose.
        let f = ThreadFilter::parse("name:^ib_").unwrap();
        let (chosen, seen, io) = choose(&f, &tids, role, names);
        assert_eq!((chosen, seen.len(), io), (vec![4], 3, 1));
    }
}
