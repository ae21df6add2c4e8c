//! `pileup-stacks`: the poor man's profiler, done right.
//!
//! Data flows through one module per concern:
//!
//! ```text
//! proc ─▶ capture ─▶ unwind ─▶ symbolize ─▶ annotate / locks ─▶ aggregate ─▶ render
//! (/proc)  (ptrace,   (framehop,  (blazesym)   (SQL, OS state,     (group      (pmp, folded,
//!           copies)    offline)                 lock owners)        stacks)     svg, dot, pprof, json)
//! ```
//!
//! [`Sampler`] wires them: it loads the target's modules once, then each
//! [`Sampler::sample`] stops the selected threads only for the copy, resumes
//! them and unwinds the copies; [`Sampler::finish`] symbolizes every distinct
//! address once and builds the [`Profile`] the renderers consume.

pub mod aggregate;
pub mod annotate;
pub mod capture;
pub mod error;
pub mod locks;
pub mod modules;
pub mod proc;
pub mod render;
pub mod symbolize;
pub mod unwind;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use regex::Regex;
use serde::Serialize;

pub use annotate::{Role, SqlSource, SqlThread};
pub use capture::{CaptureOptions, CaptureStats, Missed, Mode};
pub use error::StacksError;
pub use locks::{LockGroup, LockWait, WaitSeen};
pub use symbolize::Frame;

/// Which threads to sample.
#[derive(Debug, Clone, Default)]
pub struct ThreadFilter {
    pub tids: Vec<i32>,
    pub name: Option<Regex>,
    pub roles: Vec<Role>,
}

impl ThreadFilter {
    pub fn is_all(&self) -> bool {
        self.tids.is_empty() && self.name.is_none() && self.roles.is_empty()
    }

    /// Parse `--threads` values: comma-separated tids, role names, or
    /// `name:REGEX` / `/REGEX/` for thread names.
    pub fn parse(spec: &str) -> Result<ThreadFilter, String> {
        let mut f = ThreadFilter::default();
        for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if let Ok(t) = part.parse::<i32>() {
                f.tids.push(t);
            } else if let Some(r) = Role::parse(part) {
                f.roles.push(r);
            } else {
                let re =
                    part.strip_prefix("name:").or_else(|| part.strip_prefix('/').and_then(|p| p.strip_suffix('/')));
                let Some(re) = re else {
                    return Err(format!(
                        "--threads {part:?}: expected a thread id, a role (accept, sql-thread, io-thread, connections) or name:REGEX"
                    ));
                };
                f.name = Some(Regex::new(re).map_err(|e| format!("--threads name regex: {e}"))?);
            }
        }
        Ok(f)
    }

    fn matches(&self, tid: i32, role: Option<Role>, name: &str) -> bool {
        self.is_all()
            || self.tids.contains(&tid)
            || role.is_some_and(|r| self.roles.contains(&r))
            || self.name.as_ref().is_some_and(|re| re.is_match(name))
    }
}

/// One thread in one sample.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadStack {
    pub tid: i32,
    pub name: String,
    /// OS state letter before the stop (R, S, D, …) and its meaning.
    pub state: char,
    pub state_label: &'static str,
    pub wchan: Option<String>,
    /// The system call the thread was blocked in, if any.
    pub syscall: Option<String>,
    pub role: Option<Role>,
    pub sql: Option<SqlThread>,
    pub lock_wait: Option<LockWait>,
    /// Microseconds this thread was stopped.
    pub stopped_us: u64,
    /// Frames, innermost first (inlined frames expanded).
    pub frames: Vec<Frame>,
    /// Raw lookup addresses, innermost first.
    pub addrs: Vec<u64>,
    /// Why the stack may be incomplete.
    pub unwind_error: Option<String>,
    #[serde(skip)]
    futex: Option<(u64, [u8; capture::FUTEX_WINDOW])>,
}

impl ThreadStack {
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.frames.iter().map(|f| f.label.as_str())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub index: usize,
    /// Unix time of the capture, milliseconds.
    pub at_unix_ms: u64,
    pub stats: CaptureStats,
    pub threads: Vec<ThreadStack>,
    pub missed: Vec<Missed>,
}

/// Per-module symbol coverage, for the "how complete are the symbols" line.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleReport {
    pub name: String,
    pub path: String,
    pub build_id: Option<String>,
    pub symbols: String,
    pub debug_file: Option<String>,
    /// Distinct frame addresses in this module, and how many got a name.
    pub frames: usize,
    pub named: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Timing {
    pub load_modules_us: u64,
    pub capture_us: u64,
    pub unwind_us: u64,
    pub symbolize_us: u64,
    pub annotate_us: u64,
}

/// Everything one `pileup stacks` run learned.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    pub pid: i32,
    pub exe: String,
    pub server_version: Option<String>,
    pub mode: Mode,
    pub samples: Vec<Sample>,
    pub modules: Vec<ModuleReport>,
    /// Share of distinct frame addresses that have a function name (0–100).
    pub named_pct: f64,
    pub locks: Vec<LockGroup>,
    pub timing: Timing,
    /// Things the user must know to read the result honestly.
    pub notes: Vec<String>,
}

impl Profile {
    pub fn threads(&self) -> impl Iterator<Item = &ThreadStack> {
        self.samples.iter().flat_map(|s| s.threads.iter())
    }

    /// The stack of a thread in the last sample that has it.
    pub fn thread(&self, tid: i32) -> Option<&ThreadStack> {
        self.samples.iter().rev().find_map(|s| s.threads.iter().find(|t| t.tid == tid))
    }

    /// The stack of a thread in sample `index` (a lock's waiter or holder
    /// at the instant it was seen as one).
    pub fn thread_in(&self, index: usize, tid: i32) -> Option<&ThreadStack> {
        self.samples.iter().find(|s| s.index == index).and_then(|s| s.threads.iter().find(|t| t.tid == tid))
    }
}

/// Options for a run.
#[derive(Debug, Clone)]
pub struct SamplerOptions {
    pub capture: CaptureOptions,
    pub filter: ThreadFilter,
    /// Accept a process that is not mariadbd/mysqld.
    pub any_process: bool,
    /// Read DWARF for inlined frames and source lines (slower).
    pub debug_info: bool,
    /// Re-read the processlist at most this often while sampling (a long
    /// 10 Hz run must not query the server ten times a second).
    pub sql_refresh: Duration,
}

/// Samples one process. Modules are loaded once, at creation.
pub struct Sampler {
    pub pid: i32,
    pub exe: String,
    opts: SamplerOptions,
    maps: Vec<proc::MapEntry>,
    mods: modules::ModuleSet,
    cache: framehop::x86_64::CacheX86_64,
    sql: Option<SqlSource>,
    sql_error: Option<String>,
    sql_cache: Option<(Instant, HashMap<i32, SqlThread>)>,
    samples: Vec<Sample>,
    timing: Timing,
    notes: Vec<String>,
}

impl Sampler {
    pub fn new(pid: i32, opts: SamplerOptions, sql: Option<SqlSource>) -> Result<Sampler, StacksError> {
        let exe = proc::check_target(pid, opts.any_process)?;
        let t = Instant::now();
        let maps = proc::read_maps(pid)?;
        let mods = modules::ModuleSet::load(pid, &maps);
        let mut notes = vec![];
        for (p, why) in &mods.unreadable {
            notes.push(format!(
                "module {p} could not be read ({why}); its frames are unnamed and unwinding through it may stop"
            ));
        }
        if !opts.filter.roles.is_empty() && opts.filter.roles.iter().any(|r| *r != Role::Accept) && sql.is_none() {
            notes.push("--threads with a role other than accept needs a SQL connection to know which thread is which; none is open".into());
        }
        let timing = Timing { load_modules_us: t.elapsed().as_micros() as u64, ..Default::default() };
        Ok(Sampler {
            pid,
            exe,
            opts,
            maps,
            mods,
            cache: Default::default(),
            sql,
            sql_error: None,
            sql_cache: None,
            samples: vec![],
            timing,
            notes,
        })
    }

    pub fn server_version(&self) -> Option<&str> {
        self.sql.as_ref().map(|s| s.version.as_str())
    }

    fn sql_threads(&mut self) -> HashMap<i32, SqlThread> {
        if let Some((at, m)) = &self.sql_cache {
            if at.elapsed() < self.opts.sql_refresh {
                return m.clone();
            }
        }
        let Some(s) = self.sql.as_mut() else { return HashMap::new() };
        match s.threads() {
            Ok(m) => {
                self.sql_cache = Some((Instant::now(), m.clone()));
                m
            }
            Err(e) => {
                // Stacks never depend on SQL: note it once and go on without.
                if self.sql_error.is_none() {
                    let msg = format!("SQL annotation failed ({e:#}); stacks are captured without it");
                    self.notes.push(msg.clone());
                    self.sql_error = Some(msg);
                }
                HashMap::new()
            }
        }
    }

    /// Take one sample: select threads, stop/copy/resume, unwind the copies.
    pub fn sample(&mut self) -> Result<&Sample, StacksError> {
        let pid = self.pid;
        let tids_all = proc::tids(pid)?;
        // SQL and OS state are read before the stop, never during it.
        let t_ann = Instant::now();
        let sql = self.sql_threads();
        let mut os: HashMap<i32, proc::OsThread> = HashMap::with_capacity(tids_all.len());
        let mut chosen = Vec::with_capacity(tids_all.len());
        let mut io_workers = 0;
        for &tid in &tids_all {
            let o = proc::os_thread(pid, tid).unwrap_or_default();
            if o.io_worker {
                io_workers += 1;
                continue;
            }
            let role = annotate::role_of(pid, tid, sql.get(&tid));
            if self.opts.filter.matches(tid, role, &o.name) {
                chosen.push(tid);
            }
            os.insert(tid, o);
        }
        self.timing.annotate_us += t_ann.elapsed().as_micros() as u64;
        if io_workers > 0 && !self.notes.iter().any(|n| n.contains("io_uring")) {
            self.notes.push(format!(
                "{io_workers} io_uring kernel worker thread(s) have no user-space stack and are not sampled"
            ));
        }
        if chosen.is_empty() {
            self.notes.push(format!("sample {}: no thread matched --threads", self.samples.len()));
        }
        let at_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(StacksError::ProcessExited(pid));
        }
        let raw = capture::capture(pid, &chosen, &self.maps, &self.opts.capture)?;
        self.timing.capture_us += raw.stats.capture_us;
        if raw.threads.is_empty() && !chosen.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(StacksError::ProcessExited(pid));
        }
        let t_unw = Instant::now();
        let mut threads = Vec::with_capacity(raw.threads.len());
        for rt in raw.threads {
            let u = unwind::unwind(&self.mods.unwinder, &mut self.cache, &rt.regs, rt.stack_addr, &rt.stack);
            let o = os.remove(&rt.tid).unwrap_or_default();
            let s = sql.get(&rt.tid).cloned();
            threads.push(ThreadStack {
                tid: rt.tid,
                name: o.name,
                state: o.state,
                state_label: proc::state_label(o.state),
                wchan: o.wchan,
                syscall: rt.regs.blocked_syscall().map(proc::syscall_name),
                role: annotate::role_of(pid, rt.tid, s.as_ref()),
                sql: s,
                lock_wait: None,
                stopped_us: rt.stopped_us,
                frames: vec![],
                addrs: u.frames.iter().map(|f| f.lookup()).collect(),
                unwind_error: u.error,
                futex: rt.futex,
            });
        }
        self.timing.unwind_us += t_unw.elapsed().as_micros() as u64;
        if raw.stats.budget_exceeded {
            self.notes.push(format!(
                "sample {}: --max-stop-ms {} ran out; {} thread(s) were released uncaptured",
                self.samples.len(),
                self.opts.capture.max_stop.as_millis(),
                raw.missed.iter().filter(|m| m.reason.contains("max-stop")).count()
            ));
        }
        let idx = self.samples.len();
        self.samples.push(Sample { index: idx, at_unix_ms, stats: raw.stats, threads, missed: raw.missed });
        Ok(self.samples.last().unwrap())
    }

    /// Take `n` samples `interval` apart (start to start), calling `progress`
    /// after each. Stops early, keeping what it has, if the process exits.
    pub fn run(
        &mut self,
        n: usize,
        interval: Duration,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<(), StacksError> {
        let t0 = Instant::now();
        for i in 0..n {
            let r = self.sample().map(|_| ());
            match r {
                Ok(_) => {}
                Err(StacksError::ProcessExited(p) | StacksError::NoSuchProcess(p)) if !self.samples.is_empty() => {
                    self.notes
                        .push(format!("process {p} exited after {} sample(s); showing those", self.samples.len()));
                    break;
                }
                Err(e) => return Err(e),
            }
            progress(i + 1, n);
            if i + 1 < n {
                let next = interval * (i as u32 + 1);
                if let Some(wait) = next.checked_sub(t0.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
        Ok(())
    }

    /// Symbolize, resolve lock owners and build the profile.
    pub fn finish(mut self) -> Profile {
        let t_sym = Instant::now();
        let addrs: BTreeSet<u64> =
            self.samples.iter().flat_map(|s| s.threads.iter()).flat_map(|t| t.addrs.iter().copied()).collect();
        let syms = symbolize::symbolize(&self.mods, &addrs, self.opts.debug_info);
        for s in &mut self.samples {
            for t in &mut s.threads {
                t.frames = t.addrs.iter().flat_map(|a| syms.frames(*a).iter().cloned()).collect();
            }
        }
        self.timing.symbolize_us = t_sym.elapsed().as_micros() as u64;

        // Lock owners, per sample (owners are facts of one instant).
        let mut all_groups = vec![];
        for s in &mut self.samples {
            let tids: HashSet<i32> =
                proc::tids(self.pid).unwrap_or_default().into_iter().chain(s.threads.iter().map(|t| t.tid)).collect();
            let mut waits = vec![];
            for t in &mut s.threads {
                if let Some((addr, window)) = t.futex {
                    let labels: Vec<&str> = t.labels().collect();
                    let w = locks::classify(&labels, addr, &window, &tids, t.tid);
                    waits.push((t.tid, w.clone()));
                    t.lock_wait = Some(w);
                }
            }
            all_groups.extend(locks::group(&waits, s.index));
        }
        let all_groups = locks::merge(all_groups);

        let mut modules = vec![];
        let mut named_total = 0usize;
        for m in &self.mods.modules {
            let mine: Vec<&u64> = addrs.iter().filter(|a| m.avma.contains(a)).collect();
            let named = mine.iter().filter(|a| syms.frames(***a).iter().any(|f| f.function.is_some())).count();
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
        Profile {
            pid: self.pid,
            exe: self.exe,
            server_version: version,
            mode: self.opts.capture.mode,
            samples: self.samples,
            modules,
            named_pct,
            locks: all_groups,
            timing: self.timing,
            notes: self.notes,
        }
    }
}
