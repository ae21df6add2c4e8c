//! `pileup watch` at its defaults under a steady load of every stall
//! class's shape, without the stall, for ten minutes: nothing fires.
//!
//! A test binary of its own, so that no other test's load shares the
//! machine's cores with this one's server while it is judged.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mysql::prelude::Queryable;

/// Run `work` every `every` on its own thread until `stop` is set.
fn every(
    stop: &Arc<AtomicBool>,
    every: Duration,
    mut work: impl FnMut() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut n = 0u32;
        while !stop.load(Ordering::Relaxed) {
            work();
            n += 1;
            if let Some(w) = (every * n).checked_sub(t0.elapsed()) {
                std::thread::sleep(w);
            }
        }
    })
}

#[test]
fn a_steady_load_of_every_stall_shape_triggers_nothing_in_ten_minutes() {
    let minutes: u64 = std::env::var("PILEUP_STEADY_MINUTES").ok().and_then(|m| m.parse().ok()).unwrap_or(10);
    // A buffer pool smaller than the data: reads go to the disk, steadily.
    let sb = sandbox_with(vec![("innodb_buffer_pool_size", "32M")]);
    let mut ddl = String::from("CREATE DATABASE t; CREATE TABLE t.ddl (id INT PRIMARY KEY) ENGINE=InnoDB;");
    for i in 0..300 {
        ddl += &format!("CREATE TABLE t.t{i} (id INT PRIMARY KEY, v INT) ENGINE=InnoDB;");
    }
    sb.sql(&ddl).unwrap();
    // Writes and reads (row locks, redo, flushing, disk reads): sysbench
    // at a steady rate on four tables larger than the buffer pool.
    let mut base = sysbench_prepare(&sb, "oltp_read_write", 4, 100_000);
    base.push("--rate=60".into());
    let mut load = sysbench_start("oltp_read_write", &base, 8, (minutes * 60 + 120) as u32);
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = vec![];
    // Table opens: 300 tables read in turn by two clients; the table cache
    // holds them all, so they are opened once.
    for k in 0..2u64 {
        let spec = sb.conn_spec();
        let mut c = spec.connect().unwrap();
        let n = std::sync::atomic::AtomicU64::new(k * 150);
        threads.push(every(&stop, Duration::from_millis(5), move || {
            let i = n.fetch_add(1, Ordering::Relaxed) % 300;
            let _ = c.query_drop(format!("SELECT * FROM t.t{i}"));
        }));
    }
    // Connections: twenty a second, each asking one thing.
    let spec = sb.conn_spec();
    threads.push(every(&stop, Duration::from_millis(50), move || {
        if let Ok(mut c) = spec.connect() {
            let _ = c.query_drop("SELECT 1");
        }
    }));
    // A metadata lock taken briefly: a DDL a minute on a table nobody reads.
    let spec = sb.conn_spec();
    let flip = std::sync::atomic::AtomicBool::new(false);
    threads.push(every(&stop, Duration::from_secs(60), move || {
        if let Ok(mut c) = spec.connect() {
            let add = !flip.fetch_xor(true, Ordering::Relaxed);
            let _ = c.query_drop(if add {
                "ALTER TABLE t.ddl ADD COLUMN x INT"
            } else {
                "ALTER TABLE t.ddl DROP COLUMN x"
            });
        }
    }));
    // The load settles (every table opened once, the buffer pool full).
    std::thread::sleep(Duration::from_secs(30));

    let data = scratch("watch-steady");
    let mut watch = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["watch", "-S", sb.endpoint.socket.to_str().unwrap(), "-u", "root", "--pid", &sb.pid().to_string()])
        .args(["--data-dir", data.to_str().unwrap(), "--json", "--duration", &format!("{}s", minutes * 60)])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut events = vec![];
    for l in BufReader::new(watch.stdout.take().unwrap()).lines().map_while(Result::ok) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) {
            events.push(v);
        }
    }
    // Exited and not yet reaped: its CPU times are still in its stat.
    let cpu = cpu_secs(watch.id());
    let status = watch.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let _ = load.kill();
    let _ = load.wait();
    assert!(status.success(), "watch exited with {status}");

    let polls: Vec<&serde_json::Value> = events.iter().filter(|v| v["event"] == "poll").collect();
    let peak = |k: &str| polls.iter().filter_map(|v| v["derived"][k].as_f64()).fold(0.0, f64::max);
    eprintln!(
        "{} polls; peaks: opened_tables_rate {:.0}, connections_rate {:.0}, innodb_row_lock_current_waits {:.0}, pl_waiting_lock {:.0}, io_pressure_pct {:.0}, checkpoint_age_pct {:.0}, questions_rate {:.0}; watcher CPU {cpu:.1} s ({:.2}% of a core)",
        polls.len(),
        peak("opened_tables_rate"),
        peak("connections_rate"),
        peak("innodb_row_lock_current_waits"),
        peak("pl_waiting_lock"),
        peak("io_pressure_pct"),
        peak("checkpoint_age_pct"),
        peak("questions_rate"),
        100.0 * cpu / (minutes * 60) as f64,
    );
    let short: Vec<&serde_json::Value> = events.iter().filter(|v| v["event"] == "stall").collect();
    eprintln!("short stalls recorded (not triggers): {}", short.len());
    for s in &short {
        eprintln!("  {s}");
    }
    // The load ran throughout.
    assert!(polls.len() as u64 >= minutes * 55, "only {} polls in {minutes} min", polls.len());
    assert!(peak("questions_rate") > 100.0 && peak("connections_rate") >= 10.0, "the load ran");
    let fired: Vec<&serde_json::Value> = events
        .iter()
        .filter(|v| ["fired", "captured", "skipped"].contains(&v["event"].as_str().unwrap_or("")))
        .collect();
    assert!(fired.is_empty(), "the steady load set off: {fired:#?}");
}

/// CPU seconds (user and system) of process `pid`, from /proc/PID/stat.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<f64> =
        stat.rsplit_once(')').map_or(vec![], |r| r.1.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect());
    // utime and stime are fields 14 and 15, in clock ticks of 1/100 s.
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}
