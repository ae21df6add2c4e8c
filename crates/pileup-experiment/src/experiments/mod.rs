//! The experiments, and the loop that measures their curves: each
//! experiment makes its tables and names its variants (a system, the
//! settings it runs with, and the client that repeats the operation);
//! every variant is measured at every thread count, `rounds` times.

mod accept;
mod durability;
mod hot_row;
mod point_select;
mod range;
mod table_open;

use std::any::Any;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mysql::prelude::Queryable;

use crate::drive::{self, Client, DriveError, OpError, Window};
use crate::error::{ExperimentError, Result};
use crate::knee;
use crate::profile::{self, KneeProfile, LockProfiler};
use crate::report::{median, ExperimentReport, Point, Series, System};
use crate::target::{Machine, Maria, Pg};
use crate::{Event, Options, Sink, SCHEMA};

/// The experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    HotRow,
    Accept,
    TableOpen,
    PointSelect,
    Range,
    Durability,
}

impl Name {
    pub const ALL: [Name; 6] =
        [Name::HotRow, Name::Accept, Name::TableOpen, Name::PointSelect, Name::Range, Name::Durability];

    pub fn parse(s: &str) -> Option<Name> {
        Name::ALL.into_iter().find(|n| n.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Name::HotRow => "hot-row",
            Name::Accept => "accept",
            Name::TableOpen => "table-open",
            Name::PointSelect => "point-select",
            Name::Range => "range",
            Name::Durability => "durability",
        }
    }

    /// What the experiment asks.
    pub fn question(self) -> &'static str {
        match self {
            Name::HotRow => "one row updated by N threads: does throughput collapse, and does deadlock detection cost it?",
            Name::Accept => "a connection avalanche: how many connections a second does the server accept, beside PostgreSQL?",
            Name::TableOpen => "thousands of tables opened by N connections through a small table cache: how fast can tables be opened?",
            Name::PointSelect => "primary-key lookups: how does a snapshot per statement (autocommit) cost, beside PostgreSQL plain and prepared?",
            Name::Range => "100-row primary-key ranges, returning the rows or aggregating them, with and without innodb_thread_concurrency, beside PostgreSQL",
            Name::Durability => "one-row updates committed at each durability setting, MariaDB beside PostgreSQL at the same durability",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Name::HotRow => "updates/s",
            Name::Accept => "connects/s",
            Name::TableOpen => "selects/s",
            Name::PointSelect => "selects/s",
            Name::Range => "ranges/s",
            Name::Durability => "commits/s",
        }
    }

    /// Whether it compares with PostgreSQL.
    pub fn uses_postgres(self) -> bool {
        matches!(self, Name::Accept | Name::PointSelect | Name::Range | Name::Durability)
    }
}

/// Something put back when dropped (a global setting).
pub(crate) type Guard = Box<dyn Any>;

/// innodb_thread_concurrency in the range experiment's limited curve.
pub(crate) const THREAD_CONCURRENCY_LIMIT: &str = "8";

/// Makes the client of thread N, or says why it cannot.
pub(crate) type MakeClient<'a> = dyn Fn(u32) -> std::result::Result<Box<dyn Client>, String> + Sync + 'a;

/// Global settings of a variant: name, value.
pub(crate) type Globals = &'static [(&'static str, &'static str)];

/// One curve to measure.
pub(crate) struct Variant<'a> {
    pub label: String,
    /// `MariaDB` or `PostgreSQL`.
    pub system: &'static str,
    /// The settings this curve runs with, for the report.
    pub settings: BTreeMap<String, String>,
    /// Put the settings in place; dropping what it returns puts them back.
    pub apply: Box<dyn Fn() -> Result<Vec<Guard>> + 'a>,
    /// A client for thread N.
    pub make: Box<MakeClient<'a>>,
    /// The server's process, for its CPU.
    pub pid: Option<i32>,
    /// A MariaDB status counter whose rate is reported beside.
    pub counter: Option<&'static str>,
    /// The curve profiled at its knee.
    pub profiled: bool,
}

/// What an experiment needs from its servers, made once.
pub(crate) struct Ctx<'a> {
    pub maria: &'a Maria,
    pub pg: Option<&'a Pg>,
    pub o: &'a Options,
    /// What an experiment could not measure on these servers, and why.
    pub notes: std::cell::RefCell<Vec<String>>,
}

/// A MariaDB error that a client repeats past (a deadlock, a lock wait
/// timeout), or one that ends the run.
pub(crate) fn maria_error(e: mysql::Error) -> OpError {
    match &e {
        mysql::Error::MySqlError(m) if matches!(m.code, 1205 | 1213) => OpError::Retry(m.message.clone()),
        mysql::Error::MySqlError(m) if !matches!(m.code, 1927 | 2006 | 2013 | 1053) => {
            OpError::Retry(m.message.clone())
        }
        _ => OpError::Gone(pileup_conn::error_text(&e)),
    }
}

/// A PostgreSQL error that a client repeats past, or one that ends the run.
pub(crate) fn pg_error(e: postgres::Error) -> OpError {
    if e.is_closed() || e.as_db_error().is_none() {
        OpError::Gone(pg_text(&e))
    } else {
        OpError::Retry(pg_text(&e))
    }
}

/// A PostgreSQL error's own message (the client's display of a server
/// error is only "db error").
pub fn pg_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => {
            let mut t = e.to_string();
            let mut cur = std::error::Error::source(e);
            while let Some(c) = cur {
                t.push_str(&format!(": {c}"));
                cur = c.source();
            }
            t
        }
    }
}

/// Run one MariaDB statement (no result) as a client's operation.
pub(crate) struct MariaStatement {
    pub conn: mysql::Conn,
    pub sql: String,
}

impl Client for MariaStatement {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        self.conn.query_drop(&self.sql).map_err(maria_error)
    }
}

/// Run an experiment: make its tables, measure every variant's curve,
/// profile the knee, and say what it shows. A server that goes away
/// mid-run ends it with the points measured so far (`stopped` says why).
pub fn run(
    name: Name,
    maria: &Maria,
    pg: Option<&Pg>,
    o: &Options,
    mut locks: Option<&mut dyn LockProfiler>,
    sink: &mut dyn Sink,
) -> Result<ExperimentReport> {
    if o.threads.is_empty() || o.threads.contains(&0) {
        return Err(ExperimentError::Usage("--threads needs one or more counts of at least 1".into()));
    }
    if o.rounds == 0 {
        return Err(ExperimentError::Usage("--rounds must be at least 1".into()));
    }
    let ctx = Ctx { maria, pg, o, notes: Default::default() };
    let mut systems =
        vec![System { name: "MariaDB".into(), version: maria.version.clone(), settings: maria.durability()? }];
    if let (Some(pg), true) = (pg, name.uses_postgres()) {
        systems.push(System { name: "PostgreSQL".into(), version: pg.version.clone(), settings: pg.settings.clone() });
    }
    let variants = match name {
        Name::HotRow => hot_row::setup(&ctx)?,
        Name::Accept => accept::setup(&ctx)?,
        Name::TableOpen => table_open::setup(&ctx)?,
        Name::PointSelect => point_select::setup(&ctx)?,
        Name::Range => range::setup(&ctx)?,
        Name::Durability => durability::setup(&ctx)?,
    };
    let mut report = ExperimentReport {
        experiment: name.as_str().into(),
        question: name.question().into(),
        unit: name.unit().into(),
        started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
        machine: Machine::here(),
        driver: "pileup's own load generator (one thread and one connection per client; the mysql and postgres crates); its CPU is reported beside the server's".into(),
        systems,
        series: vec![],
        profiles: vec![],
        findings: vec![],
        stopped: None,
        window_s: o.duration.as_secs_f64(),
        warmup_s: o.warmup.as_secs_f64(),
        rounds: o.rounds,
    };
    let mut threads = o.threads.clone();
    threads.sort_unstable();
    threads.dedup();
    let window = Window { warmup: o.warmup, measure: o.duration };
    let of = variants.len();
    'variants: for (i, v) in variants.iter().enumerate() {
        sink.event(&Event::Series { experiment: name.as_str(), label: &v.label, index: i + 1, of });
        let _guards = match (v.apply)() {
            Ok(g) => g,
            // Curves already measured are kept: the server may be gone.
            Err(e) if !report.series.is_empty() => {
                report.stopped = Some(format!("{}: {e}", v.label));
                break 'variants;
            }
            Err(e) => return Err(e),
        };
        report.series.push(Series {
            label: v.label.clone(),
            system: v.system.into(),
            settings: v.settings.clone(),
            points: vec![],
            knee_threads: None,
            shape: None,
        });
        for &t in &threads {
            let mut runs = vec![];
            for round in 1..=o.rounds {
                sink.event(&Event::Window { label: &v.label, threads: t, round, rounds: o.rounds });
                let name = v.counter;
                let read = move || counter(maria, name);
                let probes = drive::Probes {
                    server_pid: v.pid,
                    counter: v.counter.is_some().then_some(&read as &(dyn Fn() -> Option<u64> + Sync)),
                    stop: o.stop.as_deref(),
                };
                match drive::drive(t, window, probes, &v.make) {
                    Ok(m) => {
                        let rate = m.counted.map(|n| n as f64 / m.seconds.max(1e-9));
                        runs.push((m, rate));
                    }
                    Err(DriveError::Gone { why, .. }) => {
                        report.stopped = Some(format!("{} at {t} threads, round {round}: {why}", v.label));
                        break 'variants;
                    }
                    Err(e @ DriveError::Connect { .. }) => {
                        report.stopped = Some(format!("{} at {t} threads: {e}", v.label));
                        break 'variants;
                    }
                }
            }
            let point = point_of(t, &runs, report.machine.cores);
            report.series.last_mut().unwrap().points.push(point);
            sink.event(&Event::Point { report: &report });
        }
        let s = report.series.last_mut().unwrap();
        let m = s.medians();
        s.knee_threads = knee::knee(&m).map(|i| m[i].0);
        s.shape = knee::shape(&m);
        if o.profile && v.profiled {
            if let Some(k) = s.knee_threads {
                let most = *threads.last().unwrap();
                let mut at = vec![(k, "knee")];
                if most != k {
                    at.push((most, "most threads"));
                }
                for (t, why) in at {
                    match profile_point(&ctx, v, t, why, locks.as_deref_mut(), sink) {
                        Ok(p) => report.profiles.push(p),
                        Err(ExperimentError::Stopped { why: e }) => {
                            report.stopped = Some(format!("profiling {} at {t} threads: {e}", v.label));
                            break 'variants;
                        }
                        // The curves stand without it; the report says why.
                        Err(e) => {
                            ctx.notes.borrow_mut().push(format!("{} was not profiled at {t} threads: {e}", v.label))
                        }
                    }
                }
            }
        }
    }
    report.findings = crate::why::findings(name, &report);
    report.findings.extend(ctx.notes.take());
    // The experiments' tables go; a run that stopped keeps them, for a
    // look at what the server was left with.
    if report.stopped.is_none() {
        if let Ok(mut c) = maria.admin() {
            let _ = c.query_drop(format!("DROP DATABASE IF EXISTS {SCHEMA}"));
        }
        if let Some(mut c) = pg.and_then(|p| p.admin().ok()) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"));
        }
    }
    Ok(report)
}

/// A MariaDB global status counter's value.
fn counter(m: &Maria, name: Option<&str>) -> Option<u64> {
    let name = name?;
    let mut c = m.admin().ok()?;
    pileup_conn::global_status(&mut c, name).ok().flatten()
}

/// The rounds of one thread count as a point.
fn point_of(threads: u32, runs: &[(drive::Measured, Option<f64>)], cores: usize) -> Point {
    let v = |f: &dyn Fn(&drive::Measured) -> f64| median(runs.iter().map(|(m, _)| f(m)).collect());
    let rates: Vec<f64> = runs.iter().map(|(m, _)| m.ops_per_s).collect();
    let server: Vec<f64> = runs.iter().filter_map(|(m, _)| Some(m.server_cpu_s? / m.server_seconds)).collect();
    let bound = runs
        .iter()
        .filter(|(m, _)| {
            let server = m.server_cpu_s.map(|s| s / m.server_seconds * m.seconds);
            knee::cpu_bound(server, m.driver_cpu_s, m.seconds, cores)
        })
        .count();
    let counted: Vec<f64> = runs.iter().filter_map(|(_, r)| *r).collect();
    Point {
        threads,
        median: median(rates.clone()),
        min: rates.iter().copied().fold(f64::NAN, f64::min),
        max: rates.iter().copied().fold(f64::NAN, f64::max),
        rounds: rates,
        p50_ms: Some(v(&|m| m.p50_ms)).filter(|x| x.is_finite()),
        p99_ms: Some(v(&|m| m.p99_ms)).filter(|x| x.is_finite()),
        errors: runs.iter().map(|(m, _)| m.errors).sum(),
        driver_cores: v(&|m| m.driver_cpu_s / m.seconds),
        server_cores: (!server.is_empty()).then(|| median(server)),
        cpu_bound: bound * 2 > runs.len(),
        counter_per_s: (!counted.is_empty()).then(|| median(counted)),
    }
}

/// Run the variant's load at `threads` while the server is sampled and
/// its lock waits traced.
fn profile_point<'l>(
    ctx: &Ctx,
    v: &Variant,
    threads: u32,
    at: &str,
    locks: Option<&mut (dyn LockProfiler + 'l)>,
    sink: &mut dyn Sink,
) -> Result<KneeProfile> {
    let Some(pid) = v.pid else {
        return Err(ExperimentError::Usage("the server's process is not on this host: nothing to profile".into()));
    };
    let secs = ctx.o.duration.max(Duration::from_secs(3));
    sink.event(&Event::Profiling { threads, seconds: secs.as_secs_f64() });
    // The load runs a little longer than the profile on both sides.
    let window = Window { warmup: Duration::from_secs(1), measure: secs + Duration::from_secs(1) };
    let probes = drive::Probes { server_pid: v.pid, counter: None, stop: ctx.o.stop.as_deref() };
    let sql = ctx.maria.admin().ok().and_then(|c| pileup_engine::SqlSource::new(c).ok());
    std::thread::scope(|s| {
        let make = &v.make;
        let load = s.spawn(move || drive::drive(threads, window, probes, make));
        std::thread::sleep(Duration::from_secs(1));
        let traced = locks.map(|l| s.spawn(move || l.profile(pid, secs)));
        let sampled = profile::sample(pid, secs, sql);
        let traced = traced.map(|h| h.join().unwrap_or_else(|_| Err("the lock tracer failed".into())));
        let loaded = load.join().map_err(|_| ExperimentError::Stopped { why: "the load generator failed".into() })?;
        match loaded {
            Err(DriveError::Gone { why, .. }) => return Err(ExperimentError::Stopped { why }),
            Err(e @ DriveError::Connect { .. }) => return Err(ExperimentError::Server(e.to_string())),
            Ok(_) => {}
        }
        let p = sampled.map_err(ExperimentError::Server)?;
        let mut k = profile::reduce(&p, &v.label, threads, at, secs.as_secs_f64());
        match traced {
            Some(Ok(l)) => k.locks = Some(l),
            Some(Err(e)) => k.locks_error = Some(e),
            None => k.locks_error = Some("no lock profiler here".into()),
        }
        Ok(k)
    })
}

/// Make the experiments' schema afresh.
pub(crate) fn fresh_schema(c: &mut mysql::Conn) -> Result<()> {
    c.query_drop(format!("DROP DATABASE IF EXISTS {SCHEMA}"))
        .and_then(|_| c.query_drop(format!("CREATE DATABASE {SCHEMA}")))
        .map_err(crate::target::sql("making the experiments' schema"))
}

/// Make `rows` rows of the point-select/range table (`id` 1..=rows), in
/// MariaDB and, given one, PostgreSQL.
pub(crate) fn rows_table(ctx: &Ctx) -> Result<()> {
    let mut c = ctx.maria.admin()?;
    fresh_schema(&mut c)?;
    c.query_drop(format!(
        "CREATE TABLE {SCHEMA}.sb (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY (k)) ENGINE=InnoDB"
    ))
    .map_err(crate::target::sql("making the table"))?;
    let mut id = 0;
    while id < ctx.o.rows {
        let n = (ctx.o.rows - id).min(5000);
        let values: Vec<String> = (id + 1..=id + n)
            .map(|i| format!("({i},{},'{:0>119}','{:0>59}')", i.wrapping_mul(2654435761) % ctx.o.rows.max(1), i, i))
            .collect();
        c.query_drop(format!("INSERT INTO {SCHEMA}.sb VALUES {}", values.join(",")))
            .map_err(crate::target::sql("filling the table"))?;
        id += n;
    }
    if let Some(pg) = ctx.pg {
        let mut p = pg.admin()?;
        p.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA};
             CREATE TABLE {SCHEMA}.sb (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL);
             INSERT INTO {SCHEMA}.sb SELECT i, (i::bigint * 2654435761 % {rows})::int, lpad(i::text, 119, '0'), lpad(i::text, 59, '0') FROM generate_series(1, {rows}) i;
             CREATE INDEX ON {SCHEMA}.sb (k)",
            rows = ctx.o.rows.max(1)
        ))
        .and_then(|_| p.batch_execute(&format!("VACUUM ANALYZE {SCHEMA}.sb")))
        .map_err(|e| ExperimentError::Postgres(format!("making the table: {}", pg_text(&e))))?;
    }
    Ok(())
}

/// A small, fast random number source for the clients (xorshift): which
/// row or table an operation touches is not worth a dependency.
pub(crate) struct Rand(u64);

impl Rand {
    pub fn new(seed: u32) -> Rand {
        Rand(0x9E37_79B9_7F4A_7C15 ^ (seed as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9))
    }

    /// 1..=n.
    pub fn upto(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as u32 + 1
    }
}

/// `name=value` pairs for a report.
pub(crate) fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Set MariaDB globals for a variant; they are put back when the guards drop.
pub(crate) fn globals<'a>(m: &'a Maria, pairs: &'a [(&'a str, &'a str)]) -> Box<dyn Fn() -> Result<Vec<Guard>> + 'a> {
    Box::new(move || {
        let mut g: Vec<Guard> = vec![];
        for (k, v) in pairs {
            g.push(Box::new(m.set_global(k, v)?));
        }
        Ok(g)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for n in Name::ALL {
            assert_eq!(Name::parse(n.as_str()), Some(n));
        }
        assert_eq!(Name::parse("hot_row"), None);
    }

    #[test]
    fn random_rows_stay_in_range() {
        let mut r = Rand::new(3);
        let v: Vec<u32> = (0..10_000).map(|_| r.upto(100)).collect();
        assert!(v.iter().all(|&x| (1..=100).contains(&x)));
        assert!(v.contains(&1) && v.contains(&100));
    }

    #[test]
    fn a_point_is_the_median_of_its_rounds() {
        let m = |ops_per_s: f64, server: f64| drive::Measured {
            threads: 4,
            ops: 0,
            errors: 1,
            seconds: 10.0,
            ops_per_s,
            driver_cpu_s: 5.0,
            server_cpu_s: Some(server),
            server_seconds: 10.0,
            counted: None,
            p50_ms: 1.0,
            p99_ms: 2.0,
        };
        let p = point_of(4, &[(m(100.0, 14.0), Some(5.0)), (m(300.0, 14.0), Some(7.0)), (m(200.0, 2.0), None)], 2);
        assert_eq!((p.median, p.min, p.max), (200.0, 100.0, 300.0));
        assert_eq!(p.errors, 3);
        assert!(p.cpu_bound, "two of three rounds used both cores");
        assert_eq!(p.counter_per_s, Some(6.0));
        assert_eq!(p.driver_cores, 0.5);
    }
}
