//! Short stalls: a global read lock held briefly, over and over, and how
//! many of them the thread scan records.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Result;
use mysql::prelude::Queryable;
use pileup_bench_drivers::median;
use pileup_sandbox::{Options, Sandbox};

use crate::evidence::unix_secs;
use crate::watcher::Running;

/// How long each short stall holds the global read lock, in milliseconds.
const SHORT_HOLDS: &[u64] = &[50, 100, 150, 200, 300, 500];

/// Short stalls: 30 connections insert 1,000 rows a second; FLUSH TABLES
/// WITH READ LOCK is held for each of [`SHORT_HOLDS`], `4 × rounds` times,
/// 1.5 s apart, under `pileup watch` at its defaults. A stall is caught when
/// the scan records one beginning between the lock and 350 ms after the
/// unlock (the writers queue behind the lock within milliseconds).
pub(crate) fn short_stalls(pileup: &str, root: &Path, rounds: usize) -> Result<String> {
    let sb = Sandbox::start(Options::default())?;
    let mut sbargs = pileup_bench_drivers::sysbench_prepared_sized(&sb, "oltp_insert", 1, 1000)?;
    sbargs.push("--rate=1000".into());
    let load = pileup_bench_drivers::Load::start("oltp_insert", &sbargs, 30)?;
    let dir = root.join("short");
    std::fs::create_dir_all(&dir)?;
    let mut child = Command::new(pileup)
        .args(["watch", "-S", &sb.endpoint.socket.to_string_lossy(), "-u", "root", "--pid", &sb.pid().to_string()])
        .args(["--data-dir", &dir.to_string_lossy(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let out = child.stdout.take().expect("piped stdout");
    let w = Running(Some(child));
    let stalls = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(f64, f64)>::new()));
    let s2 = stalls.clone();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) else { continue };
            if v["event"] == "stall" {
                if let (Some(b), Some(e)) = (v["began_unix"].as_f64(), v["ended_unix"].as_f64()) {
                    s2.lock().unwrap().push((b, e));
                }
            }
        }
    });
    std::thread::sleep(Duration::from_secs(6));
    let now = || unix_secs(std::time::SystemTime::now());
    let mut c = sb.connect()?;
    let mut held: Vec<(u64, f64, f64)> = vec![];
    for i in 0..4 * rounds {
        for &ms in SHORT_HOLDS {
            c.query_drop("FLUSH TABLES WITH READ LOCK")?;
            let t = now();
            std::thread::sleep(Duration::from_millis(ms));
            c.query_drop("UNLOCK TABLES")?;
            held.push((ms, t, now()));
            std::thread::sleep(Duration::from_millis(1500));
        }
        eprintln!("short stalls: pass {} of {}", i + 1, 4 * rounds);
    }
    std::thread::sleep(Duration::from_secs(2));
    drop(w);
    let _ = reader.join();
    drop(load);
    let stalls = stalls.lock().unwrap().clone();
    let mut md = format!(
        "\n### Short stalls: FLUSH TABLES WITH READ LOCK held briefly under 30 inserting connections (1,000 rows/s), {} times each, pileup watch at its defaults\n\n| lock held | recorded as a stall | stall length recorded (median) |\n|---|---|---|\n",
        4 * rounds
    );
    for &ms in SHORT_HOLDS {
        let mut lens = vec![];
        let tries = held.iter().filter(|h| h.0 == ms).count();
        for &(_, from, to) in held.iter().filter(|h| h.0 == ms) {
            if let Some((b, e)) = stalls.iter().find(|(b, _)| *b >= from - 0.05 && *b <= to + 0.35) {
                lens.push((e - b) * 1000.0);
            }
        }
        let shown = if lens.is_empty() { "–".to_string() } else { format!("{:.0} ms", median(&lens.clone())) };
        md.push_str(&format!("| {ms} ms | {} of {tries} | {shown} |\n", lens.len()));
    }
    md.push_str(&format!("\nStalls recorded in all: {} (locks taken: {}).\n", stalls.len(), held.len()));
    Ok(md)
}
