//! The stalls whose sufferers are few or not held up at all: a table-open
//! storm, a connection storm and a flushing storm, each after a steady load
//! the watcher learns.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use mysql::prelude::Queryable;
use pileup_sandbox::{Options, Sandbox};

use crate::evidence::{first_stack, kept_before, verdict_after, Onset};
use crate::watcher::{cpu_secs, mysqld_named, start_watcher, Running};

/// Run `work(connection slot, client number, iteration)` on `n` threads until `stop`.
fn clients(
    n: usize,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    work: impl Fn(&mut Option<mysql::Conn>, usize, u64) + Send + Sync + 'static,
) -> Vec<std::thread::JoinHandle<()>> {
    let work = std::sync::Arc::new(work);
    (0..n)
        .map(|i| {
            let (stop, work) = (stop.clone(), work.clone());
            std::thread::spawn(move || {
                let (mut c, mut k) = (None, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    work(&mut c, i, k);
                    k += 1;
                }
            })
        })
        .collect()
}

/// Clients stopped and joined when this goes out of scope.
struct Clients(std::sync::Arc<std::sync::atomic::AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Drop for Clients {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

/// The storms and the flushing storm: a steady load while the watcher
/// learns it (20 s: the default triggers judge against the server's own
/// baseline), then the stall; seconds from its onset to the first stack.
pub(crate) fn class_onset(pileup: &str, kind: &str, stall: &str, root: &Path, round: usize) -> Result<Onset> {
    let cnf = class_cnf(stall);
    let sb = Sandbox::start(Options { mariadbd: Some(mysqld_named(root)?), cnf, ..Options::default() })?;
    let dir = root.join(format!("{stall}-{}-{round}", kind.replace([' ', ','], "-")));
    let mut steady = Steady::start(&sb, stall)?;
    let w = Running(start_watcher(kind, pileup, &sb, &dir)?);
    let (cpu0, run0) = (cpu_secs(&w.0), Instant::now());
    learn(steady.gauge_spec.as_ref())?;
    // What watching the steady load cost, apart from any capture.
    let watching = (cpu_secs(&w.0) - cpu0) / run0.elapsed().as_secs_f64() * 100.0;
    let cpu1 = cpu_secs(&w.0);
    let from = std::time::SystemTime::now();
    let from_instant = Instant::now();
    let (storm, more) = start_storm(&sb, stall, &steady.flush_args)?;
    // The onset: the storm's start, or when the checkpoint age passed 7/8.
    let gauge = steady.gauge_spec.take().map(|spec| AgeGauge::start(spec, 87.5)).transpose()?;
    let (onset, first) = wait_onset(gauge.as_ref(), &dir, kind, from, from_instant);
    let verdict = (kind.starts_with("pileup") && first.is_some())
        .then(|| verdict_after(&dir, from, Duration::from_secs(15)))
        .flatten();
    if onset.is_none() {
        eprintln!("{stall} {kind}: the checkpoint age never passed 7/8 of its maximum within 35 s");
    }
    drop(storm);
    drop(more);
    drop(gauge);
    drop(steady);
    let before = kept_before(&dir, from);
    let stall_cpu = cpu_secs(&w.0) - cpu1;
    drop(w);
    Ok(Onset { first_stack: first, verdict, before, cpu: watching, stall_cpu: Some(stall_cpu) })
}

/// The server options a storm needs: a small table cache for the
/// table-open storm, a small redo log and a slow page cleaner for the
/// flushing storm.
fn class_cnf(stall: &str) -> Vec<(String, String)> {
    match stall {
        "table-open" => {
            vec![("table_open_cache".into(), "64".into()), ("table_open_cache_instances".into(), "1".into())]
        }
        "flushing" => vec![
            ("innodb_log_file_size".into(), "4M".into()),
            ("innodb_io_capacity".into(), "100".into()),
            ("innodb_io_capacity_max".into(), "100".into()),
            ("innodb_flush_log_at_trx_commit".into(), "2".into()),
        ],
        _ => vec![],
    }
}

/// The steady load the watcher learns before a storm, and what the storm
/// needs from it. Its parts stop in the order they are listed.
struct Steady {
    /// The flushing storm's connection for its checkpoint-age gauge.
    gauge_spec: Option<pileup_conn::ConnSpec>,
    /// The flushing storm's sysbench arguments (its writers unthrottled).
    flush_args: Vec<String>,
    /// The flushing storm's throttled writers.
    load: Option<pileup_bench_drivers::Load>,
    /// The other storms' two steady clients.
    clients: Clients,
}

impl Steady {
    /// Start the steady load for `stall` on `sb`.
    fn start(sb: &Sandbox, stall: &str) -> Result<Steady> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut steady =
            Steady { gauge_spec: None, flush_args: vec![], load: None, clients: Clients(stop.clone(), vec![]) };
        match stall {
            "table-open" => {
                let mut ddl = String::from("CREATE DATABASE t;");
                for i in 0..400 {
                    ddl += &format!("CREATE TABLE t.t{i} (id INT PRIMARY KEY, v INT) ENGINE=InnoDB;");
                }
                sb.sql(&ddl)?;
                let spec = sb.conn_spec();
                steady.clients.1 = clients(2, &stop, move |c, i, k| {
                    let t = (i as u64 * 3 + k) % 8;
                    let _ =
                        c.get_or_insert_with(|| spec.connect().unwrap()).query_drop(format!("SELECT * FROM t.t{t}"));
                });
            }
            "connection" => {
                let spec = sb.conn_spec();
                steady.clients.1 = clients(2, &stop, move |c, _, _| {
                    let _ = c.get_or_insert_with(|| spec.connect().unwrap()).query_drop("SELECT 1");
                });
            }
            _ => {
                let (load, flush_args) = flushing_load(sb)?;
                steady.flush_args = flush_args;
                steady.load = Some(load);
                steady.gauge_spec = Some(sb.conn_spec());
            }
        }
        Ok(steady)
    }
}

/// The flushing storm's steady load: 4 writers at 2 transactions a second,
/// started once the checkpoint age the prepare left has fallen; also the
/// sysbench arguments without the rate, for the storm.
fn flushing_load(sb: &Sandbox) -> Result<(pileup_bench_drivers::Load, Vec<String>)> {
    let mut sbargs = pileup_bench_drivers::sysbench_prepared_sized(sb, "oltp_write_only", 4, 20_000)?;
    let sbargs_flush = sbargs.clone();
    // Few enough that the checkpoint age stays low while the
    // watcher learns: the storm's onset is then a change.
    sbargs.push("--rate=2".into());
    // The prepare leaves the checkpoint age high: flushed at full
    // speed until it falls, then the slow page cleaner again.
    sb.sql("SET GLOBAL innodb_io_capacity_max = 20000, innodb_io_capacity = 10000, innodb_max_dirty_pages_pct = 0")?;
    let settle = Instant::now();
    while checkpoint_age_pct(&mut sb.connect()?)? > 5.0 {
        anyhow::ensure!(settle.elapsed() < Duration::from_secs(60), "the checkpoint age never fell after the prepare");
        std::thread::sleep(Duration::from_millis(200));
    }
    sb.sql("SET GLOBAL innodb_max_dirty_pages_pct = DEFAULT, innodb_io_capacity = 100, innodb_io_capacity_max = 100")?;
    Ok((pileup_bench_drivers::Load::start("oltp_write_only", &sbargs, 4)?, sbargs_flush))
}

/// Let the watcher learn the steady load: pileup's baselines need 10
/// values older than 5 s. The checkpoint age is followed meanwhile: a storm
/// already under way (the age past 7/8 of its maximum) has no onset.
fn learn(gauge_spec: Option<&pileup_conn::ConnSpec>) -> Result<()> {
    let mut learnt_age = 0.0f64;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_secs(1));
        if let Some(spec) = gauge_spec {
            learnt_age = learnt_age.max(checkpoint_age_pct(&mut spec.connect()?)?);
        }
    }
    anyhow::ensure!(
        learnt_age < 87.5,
        "the checkpoint age reached {learnt_age:.0}% under the steady load, before the flushing storm"
    );
    Ok(())
}

/// Start the storm: 48 clients reading 400 tables in turn, 96 clients
/// connecting over TCP, or 32 more unthrottled writers (flushing).
fn start_storm(
    sb: &Sandbox,
    stall: &str,
    flush_args: &[String],
) -> Result<(Clients, Option<pileup_bench_drivers::Load>)> {
    let storm_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut storm = Clients(storm_stop.clone(), vec![]);
    let mut more = None;
    match stall {
        "table-open" => {
            let spec = sb.conn_spec();
            storm.1 = clients(48, &storm_stop, move |c, i, k| {
                let t = (i as u64 * 7919 + k * 104_729) % 400;
                let _ = c.get_or_insert_with(|| spec.connect().unwrap()).query_drop(format!("SELECT * FROM t.t{t}"));
            });
        }
        "connection" => {
            // Over TCP, as an application server's clients come.
            let mut spec = sb.conn_spec();
            spec.host = Some("127.0.0.1".into());
            spec.socket = None;
            spec.port = sb.endpoint.port;
            storm.1 = clients(96, &storm_stop, move |_, _, _| {
                if let Ok(mut c) = spec.connect() {
                    let _ = c.query_drop("SELECT 1");
                }
            });
        }
        // Eight times the writers, unthrottled: the redo log fills faster
        // than the page cleaner, told the disk is slow, flushes.
        _ => more = Some(pileup_bench_drivers::Load::start("oltp_write_only", flush_args, 32)?),
    }
    Ok((storm, more))
}

/// Wait up to 35 s for the onset (the storm's start, or when `gauge` saw
/// the checkpoint age pass its mark) and the watcher's first stack.
fn wait_onset(
    gauge: Option<&AgeGauge>,
    dir: &Path,
    kind: &str,
    from: std::time::SystemTime,
    from_instant: Instant,
) -> (Option<std::time::SystemTime>, Option<f64>) {
    let t0 = Instant::now();
    let (mut onset, mut first) = (None, None);
    while t0.elapsed() < Duration::from_secs(35) && (onset.is_none() || first.is_none()) {
        onset = match gauge {
            Some(g) => g.first_over().map(|at| from + at.duration_since(from_instant)),
            None => Some(from),
        };
        first = onset.and_then(|o| first_stack(dir, kind, from, o));
        std::thread::sleep(Duration::from_millis(100));
    }
    (onset, first)
}

/// The checkpoint age as a share of its maximum, %.
fn checkpoint_age_pct(c: &mut mysql::Conn) -> Result<f64> {
    let rows: Vec<(String, f64)> = c.query("SHOW GLOBAL STATUS LIKE 'Innodb_checkpoint%age'")?;
    let get = |n: &str| rows.iter().find(|r| r.0.eq_ignore_ascii_case(n)).map(|r| r.1);
    match (get("Innodb_checkpoint_age"), get("Innodb_checkpoint_max_age")) {
        (Some(age), Some(max)) if max > 0.0 => Ok(100.0 * age / max),
        _ => anyhow::bail!("the server reports no checkpoint age"),
    }
}

/// When the checkpoint age first reached a share of its maximum, read
/// every 50 ms on a connection of its own until then.
struct AgeGauge {
    first: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl AgeGauge {
    fn start(spec: pileup_conn::ConnSpec, pct: f64) -> Result<AgeGauge> {
        let mut c = spec.connect()?;
        let first = std::sync::Arc::new(std::sync::Mutex::new(None));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (f, st) = (first.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let at = Instant::now();
                match checkpoint_age_pct(&mut c) {
                    Ok(p) if p >= pct => {
                        *f.lock().unwrap() = Some(at);
                        return;
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Ok(AgeGauge { first, stop, handle: Some(handle) })
    }

    fn first_over(&self) -> Option<Instant> {
        *self.first.lock().unwrap()
    }
}

impl Drop for AgeGauge {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
