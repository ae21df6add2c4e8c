//! The experiments, and the loop that measures their curves: each
//! experiment makes its tables and names its variants (a system, the
//! settings it runs with, and the client that repeats the operation);
//! every variant is measured at every thread count, `rounds` times.

mod accept;
pub(crate) mod common;
mod durability;
mod hot_row;
mod point_select;
mod range;
mod table_open;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::syscalls::SyscallError;
use mysql::prelude::Queryable;

use crate::drive::{self, DriveError, Window};
use crate::error::{ExperimentError, Result};
use crate::knee;
use crate::name::Name;
use crate::options::{Event, Options, Sink};
use crate::profile::{self, KneeProfile, LockProfiler};
use crate::report::{ExperimentReport, Point, Series, System};
use crate::target::{Machine, Maria, Pg, SCHEMA};
use common::{Ctx, Variant};
use pileup_stats::median;

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
    check(o)?;
    let ctx = Ctx { maria, pg, o, notes: Default::default() };
    if name.uses_postgres() && pg.is_none() {
        ctx.notes.borrow_mut().push("PostgreSQL was not compared: --sandbox starts a throwaway cluster for it, or --pg CONNINFO (with --i-know) names a server of yours.".into());
    }
    let systems = systems(name, maria, pg)?;
    let variants = match name {
        Name::HotRow => hot_row::setup(&ctx)?,
        Name::Accept => accept::setup(&ctx)?,
        Name::TableOpen => table_open::setup(&ctx)?,
        Name::PointSelect => point_select::setup(&ctx)?,
        Name::Range => range::setup(&ctx)?,
        Name::Durability => durability::setup(&ctx)?,
    };
    let mut report = new_report(name, o, systems);
    let mut threads = o.threads.clone();
    threads.sort_unstable();
    threads.dedup();
    let window = Window { warmup: o.warmup, measure: o.duration };
    let of = variants.len();
    for (i, v) in variants.iter().enumerate() {
        sink.event(&Event::Series { experiment: name.as_str(), label: &v.label, index: i + 1, of });
        let _guards = match (v.apply)() {
            Ok(g) => g,
            // Curves already measured are kept: the server may be gone.
            Err(e) if !report.series.is_empty() => {
                report.stopped = Some(format!("{}: {e}", v.label));
                break;
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
        if let Err(why) = measure_curve(maria, o, v, &threads, window, &mut report, sink) {
            report.stopped = Some(why);
            break;
        }
        let s = report.series.last_mut().unwrap();
        let m = s.medians();
        s.knee_threads = knee::knee(&m).map(|i| m[i].0);
        s.shape = knee::shape(&m);
        // The profile is taken at the knee, or at the most threads on a
        // curve that does not bend.
        let most = *threads.last().unwrap();
        if o.profile && v.profiled {
            let k = s.knee_threads;
            let accept = name == Name::Accept;
            if let Err(why) = profile_knee(&ctx, v, (k, most), accept, locks.as_deref_mut(), &mut report, sink) {
                report.stopped = Some(why);
                break;
            }
        }
    }
    report.findings = crate::why::findings(name, &report);
    report.findings.extend(ctx.notes.take());
    // The experiments' tables go; a run that stopped keeps them, for a
    // look at what the server was left with.
    if report.stopped.is_none() {
        drop_tables(maria, pg);
    }
    Ok(report)
}

/// The checks of the options that their types do not make.
fn check(o: &Options) -> Result<()> {
    if o.threads.is_empty() || o.threads.contains(&0) {
        return Err(ExperimentError::Usage("--threads needs one or more counts of at least 1".into()));
    }
    if o.rounds == 0 {
        return Err(ExperimentError::Usage("--rounds must be at least 1".into()));
    }
    Ok(())
}

/// The systems compared: MariaDB, and PostgreSQL when the experiment uses
/// it and one is given.
fn systems(name: Name, maria: &Maria, pg: Option<&Pg>) -> Result<Vec<System>> {
    let mut systems =
        vec![System { name: "MariaDB".into(), version: maria.version.clone(), settings: maria.durability()? }];
    if let (Some(pg), true) = (pg, name.uses_postgres()) {
        systems.push(System { name: "PostgreSQL".into(), version: pg.version.clone(), settings: pg.settings.clone() });
    }
    Ok(systems)
}

/// The report of a run starting now, with no curve measured yet.
fn new_report(name: Name, o: &Options, systems: Vec<System>) -> ExperimentReport {
    ExperimentReport {
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
    }
}

/// Measure variant `v` at every thread count, `o.rounds` times each, into
/// the report's last series. A server gone or refusing connections ends
/// the curve: the reason is returned.
fn measure_curve(
    maria: &Maria,
    o: &Options,
    v: &Variant,
    threads: &[u32],
    window: Window,
    report: &mut ExperimentReport,
    sink: &mut dyn Sink,
) -> std::result::Result<(), String> {
    for &t in threads {
        let mut runs = vec![];
        for round in 1..=o.rounds {
            let experiment = report.experiment.as_str();
            sink.event(&Event::Window { experiment, label: &v.label, threads: t, round, rounds: o.rounds });
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
                    return Err(format!("{} at {}, round {round}: {why}", v.label, crate::words::threads(t)));
                }
                Err(e @ DriveError::Connect { .. }) => {
                    return Err(format!("{} at {}: {e}", v.label, crate::words::threads(t)))
                }
            }
        }
        let point = point_of(t, &runs, report.machine.cores);
        report.series.last_mut().unwrap().points.push(point);
        sink.event(&Event::Point { report });
    }
    Ok(())
}

/// Profile variant `v` at its knee and, when that is not the most threads,
/// at the most threads (`(knee, most)`). A server gone ends the run (the
/// reason is returned); another failure is noted and the curves stand.
fn profile_knee<'l>(
    ctx: &Ctx,
    v: &Variant,
    (knee, most): (Option<u32>, u32),
    accept_calls: bool,
    mut locks: Option<&mut (dyn LockProfiler + 'l)>,
    report: &mut ExperimentReport,
    sink: &mut dyn Sink,
) -> std::result::Result<(), String> {
    // At the knee, and at the most threads when that is another point (a
    // curve that does not bend is profiled there alone).
    let mut at: Vec<(u32, &str)> = knee.map(|k| (k, "knee")).into_iter().collect();
    if knee != Some(most) {
        at.push((most, "most threads"));
    }
    for (t, why) in at {
        match profile_point(ctx, v, t, why, accept_calls, locks.as_deref_mut(), sink) {
            Ok(p) => report.profiles.push(p),
            Err(ExperimentError::Stopped { why: e }) => {
                return Err(format!("profiling {} at {}: {e}", v.label, crate::words::threads(t)));
            }
            // The curves stand without it; the report says why.
            Err(e) => ctx.notes.borrow_mut().push(format!(
                "{} was not profiled at {}: {e}",
                v.label,
                crate::words::threads(t)
            )),
        }
    }
    Ok(())
}

/// Drop the experiments' tables on both servers, as far as they answer.
fn drop_tables(maria: &Maria, pg: Option<&Pg>) {
    if let Ok(mut c) = maria.admin() {
        let _ = c.query_drop(format!("DROP DATABASE IF EXISTS {SCHEMA}"));
    }
    if let Some(mut c) = pg.and_then(|p| p.admin().ok()) {
        let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"));
    }
}

/// A MariaDB global status counter's value.
fn counter(m: &Maria, name: Option<&str>) -> Option<u64> {
    let name = name?;
    let mut c = m.admin().ok()?;
    pileup_conn::global_status(&mut c, name).ok().flatten()
}

/// The rounds of one thread count as a point.
fn point_of(threads: u32, runs: &[(drive::Measured, Option<f64>)], cores: usize) -> Point {
    let v = |f: &dyn Fn(&drive::Measured) -> f64| median(&runs.iter().map(|(m, _)| f(m)).collect::<Vec<f64>>());
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
        median: median(&rates),
        min: rates.iter().copied().fold(f64::NAN, f64::min),
        max: rates.iter().copied().fold(f64::NAN, f64::max),
        rounds: rates,
        p50_ms: Some(v(&|m| m.p50_ms)).filter(|x| x.is_finite()),
        p99_ms: Some(v(&|m| m.p99_ms)).filter(|x| x.is_finite()),
        errors: runs.iter().map(|(m, _)| m.errors).sum(),
        driver_cores: v(&|m| m.driver_cpu_s / m.seconds),
        server_cores: (!server.is_empty()).then(|| median(&server)),
        cpu_bound: bound * 2 > runs.len(),
        counter_per_s: (!counted.is_empty()).then(|| median(&counted)),
    }
}

/// Run the variant's load at `threads` while the server is sampled and
/// its lock waits traced, and with `accept_calls` the accept thread's
/// system calls counted.
fn profile_point<'l>(
    ctx: &Ctx,
    v: &Variant,
    threads: u32,
    at: &str,
    accept_calls: bool,
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
    let sql = ctx.maria.admin().ok().and_then(|c| pileup_annotate::SqlSource::new(c).ok());
    std::thread::scope(|s| {
        let make = &v.make;
        let load = s.spawn(move || drive::drive(threads, window, probes, make));
        std::thread::sleep(Duration::from_secs(1));
        let traced = locks.map(|l| s.spawn(move || l.profile(pid, secs)));
        // MariaDB (and MySQL) accept connections in the main thread.
        let stop = ctx.o.stop.as_deref();
        let counted = accept_calls.then(|| {
            s.spawn(move || {
                crate::syscalls::tally_thread(pid, secs, || {
                    stop.is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
                })
            })
        });
        let sampled = profile::sample(pid, secs, sql);
        let traced = traced.map(|h| h.join().unwrap_or_else(|_| Err("the lock tracer failed".into())));
        let counted =
            counted.map(|h| h.join().unwrap_or_else(|_| Err(SyscallError::Ebpf("the counter failed".into()))));
        let loaded = load.join().map_err(|_| ExperimentError::Stopped { why: "the load generator failed".into() })?;
        let rate = match loaded {
            Err(DriveError::Gone { why, .. }) => return Err(ExperimentError::Stopped { why }),
            Err(e @ DriveError::Connect { .. }) => return Err(ExperimentError::Server(e.to_string())),
            Ok(m) => m.ops_per_s,
        };
        let p = sampled.map_err(ExperimentError::Server)?;
        let mut k = profile::reduce(&p, &v.label, threads, at, secs.as_secs_f64());
        match counted {
            Some(Ok(tally)) => {
                let connections = rate * tally.seconds;
                k.accept_syscalls = Some(profile::AcceptSyscalls { tally, connections });
            }
            Some(Err(e)) => k.accept_syscalls_error = Some(e.to_string()),
            None => {}
        }
        match traced {
            Some(Ok(l)) => k.locks = Some(l),
            Some(Err(e)) => k.locks_error = Some(e),
            None => k.locks_error = Some("no lock profiler here".into()),
        }
        Ok(k)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
