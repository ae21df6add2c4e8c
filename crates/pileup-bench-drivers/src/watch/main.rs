//! Watch benchmark: what watching costs and how fast it catches a stall,
//! pileup against pt-stalk, side by side in one run.
//!
//! 1. Throughput: sysbench oltp_read_only (8 threads, 20 s) with no watcher,
//!    `pileup watch` at 1 s (with and without its 100 ms thread scan) and at
//!    100 ms, and pt-stalk with its defaults
//!    (polling Threads_running every second), interleaved over `--rounds`
//!    rounds (the order rotating each round); median transactions per second and the ratio to no watcher.
//! 2. Onset to first stack: seven stalls on a default server (no plugin,
//!    performance_schema off): the four that hold up 30 connections (a
//!    hot-row lock convoy, FLUSH TABLES WITH READ LOCK, an ALTER waiting
//!    for an open transaction with readers queued behind it, and the
//!    datadir's device throttled under point selects that read from disk),
//!    and three whose sufferers are few or not held up at all (a table-open
//!    storm, a connection storm over TCP, and a flushing storm when writers
//!    outrun a small redo log, whose onset is when the checkpoint age first
//!    passes 7/8 of its maximum); for the classes, the watcher
//!    first learns 20 s of steady load, and its CPU is measured while it
//!    watches that load and, apart, from the stall on (its capture
//!    included). Time from the stall's onset to the
//!    first stack file each tool writes, both with their default triggers
//!    (pt-stalk: Threads_running > 25 for 5 cycles, `--collect-gdb`). The
//!    server runs as `mysqld` here: pt-stalk only looks for that name. Each
//!    tool's watcher CPU over the run is measured too (% of one core).
//!
//! 3. Idle cost: against an idle server, the server's CPU (answering the
//!    polls) and the watcher's own, 30 s each: the cost without the noise
//!    of a loaded shared box.
//!
//! 4. Short stalls: FLUSH TABLES WITH READ LOCK held 50 ms to 500 ms under
//!    write load, over and over: how many of them the thread scan records as
//!    stalls, and how long it says they were.
//!
//! Usage: see [`USAGE`] (what `--help` prints).

/// What `--help` prints; the flags it names are the ones accepted.
const USAGE: &str = "Usage: watch-bench --pileup PATH [--rounds 3] [--part all|throughput|idle|onset|short] [--stalls convoy,ftwrl,mdl,slow-disk,table-open,connection,flushing] [--out FILE]";

mod cost;
mod evidence;
mod onset;
mod short;
mod storms;
mod watcher;

use anyhow::{bail, Result};
use pileup_bench_drivers::arg;

use crate::cost::{idle_cost, throughput};
use crate::onset::{onset, STALLS};
use crate::short::short_stalls;

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").expect("--pileup PATH");
    let rounds: usize = arg(&args, "--rounds").map(|s| s.parse().unwrap()).unwrap_or(3);
    let part = arg(&args, "--part").unwrap_or_else(|| "all".into());
    if !["all", "throughput", "idle", "onset", "short"].contains(&part.as_str()) {
        bail!("--part must be all, throughput, idle, onset or short");
    }
    // Checked before any part runs: the onset part comes after twenty minutes of others.
    let only = arg(&args, "--stalls");
    if let Some(bad) = only.as_deref().and_then(|o| o.split(',').find(|x| !STALLS.iter().any(|(s, _)| s == x))) {
        bail!(
            "--stalls: no stall named {bad:?}; the stalls are {}",
            STALLS.iter().map(|(s, _)| *s).collect::<Vec<_>>().join(", ")
        );
    }
    let mut md = String::new();
    let root = std::env::temp_dir().join(format!("pileup-watch-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);

    if part == "all" || part == "throughput" {
        md.push_str(&throughput(&pileup, &root, rounds)?);
    }
    if part == "all" || part == "idle" {
        md.push_str(&idle_cost(&pileup, &root, rounds)?);
    }
    if part == "all" || part == "onset" {
        md.push_str(&onset(&pileup, &root, rounds, only.as_deref())?);
    }
    if part == "all" || part == "short" {
        md.push_str(&short_stalls(&pileup, &root, rounds)?);
    }
    print!("{md}");
    if let Some(o) = arg(&args, "--out") {
        pileup_bench_drivers::write(o, &md)?;
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
