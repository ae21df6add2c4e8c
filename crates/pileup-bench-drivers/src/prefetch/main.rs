//! Replica catch-up benchmark: how long an I/O-bound replica takes to apply
//! a fixed backlog with no help, with `pileup prefetch`, with MariaDB's
//! optimistic parallel replication, and with both, side by side in one run,
//! for ROW and MIXED binlog formats.
//!
//! Set-up: a primary (buffer pool large enough for everything, so it makes
//! the backlog quickly) and a replica whose buffer pool is several times
//! smaller than the data, with `innodb_flush_method=O_DIRECT` so a page not
//! in the pool is a real read from the device, not a copy from the OS page
//! cache. sysbench oltp_update_index tables fill both.
//!
//! A round, for one format and one mode: stop the replica's SQL thread;
//! run a fixed number of sysbench oltp_update_index transactions on the
//! primary (uniform keys) and wait until the replica's I/O thread has them
//! all in its relay log; restart the replica (an empty buffer pool: every
//! round starts equally cold), and wait until the previous round's purge is
//! done (history list under 1,000); set the mode (slave_parallel_threads,
//! prefetcher); start the applier and time it until it has applied the
//! primary's position. Modes run in a rotated order each round.
//!
//! Reported per format and mode (medians over rounds): catch-up time,
//! transactions per second, the ratio to the plain applier, the applier
//! threads' own CPU (the bound no prefetcher can beat), the replica's whole
//! CPU, the prefetcher's CPU and buffer-pool reads per transaction. Also,
//! per mode: the history list the catch-up left for purge and how long
//! purge then took on the idle replica (deferring purge moves that work
//! after the catch-up, so a speed-up with that time counted is reported
//! beside the catch-up's own), the whole machine's busy CPU and how long an
//! applier thread sat runnable waiting for a CPU (schedstat; the mean over
//! the threads with parallel replication).
//!
//! Usage: see [`USAGE`] (what `--help` prints).
//!
//! The replica runs with innodb_io_capacity=4000 (max 8000) and
//! innodb_flush_neighbors=0, as a DBA sets them for an SSD; `--cnf` adds or
//! overrides replica server options.
//!
//! `--io-thread-down`: the catch-up of a replica restarted with
//! skip-slave-start whose IO thread stays down (a failover with the primary
//! gone, an operator holding the IO thread): the replica replicates by file
//! and position (a GTID replica discards its relay logs at a restart), each
//! round starts only the SQL thread on the backlog already in the relay
//! log, and `Seconds_Behind_Master` stays NULL throughout; the prefetcher
//! runs with its default `--min-lag`.
//!
//! `--reuse DIR` keeps both servers' datadirs in DIR and loads the tables
//! only when DIR does not already hold them.
//!
//! After the timed rounds, `--lag-rounds N` (default 1) extra catch-ups per
//! format run under `pileup lag` for the plain applier and with the
//! prefetcher: where the applier's time goes, and so the most any prefetcher
//! can win here (the page-read share). Before the rounds, the device's
//! random-read latency and parallel throughput are measured, alone and
//! while four threads write (an I/O-bound replica flushes as much as it
//! reads); during every catch-up, what the replica's device did
//! (/proc/diskstats: reads, writes, read latency, busy time).
//!
//! `prewarmed` (not in the default modes) is the ceiling for any
//! prefetcher: the applier is held at its first transaction while the
//! prefetcher reads the whole backlog, and only then timed. Use it with a
//! backlog whose pages fit in the pool (`--trx 2000` for 128 MB): every page
//! the applier needs is then in memory before it starts, and what remains
//! is its CPU, latches, commits and the replica's own writes.
//!
//! The `-deferred` modes (not in the default modes) hold InnoDB's purge off
//! while the applier catches up: with the prefetcher by `pileup prefetch
//! --defer-purge`, without it by a session holding a consistent snapshot
//! (the same hold), so what deferring purge is worth and what prefetching
//! adds to it are told apart. `pages` and `both-pages` run the prefetcher
//! with `--warm pages`; `pages-deferred` and `both-pages-deferred` with
//! `--warm pages --defer-purge`.
//!
//! `--hold-purge` (a diagnostic) keeps purge from running during each
//! catch-up: a session holds a consistent snapshot taken just before the
//! applier starts, so the history the catch-up creates is purged only
//! before the next one. It shows what purge costs the applier beside it.
//!
//! `--profile DIR` also samples the applier threads' stacks for 3 s of each
//! catch-up, starting `--profile-after SECS` (default 0) into it, so the
//! steady state rather than the cold start can be looked at
//! (`pileup stacks --focus sql-thread`), into DIR/ROUND-FORMAT-MODE.txt,
//! with what the applier threads and every kind of server thread waited on
//! (performance_schema: `-waits.txt`, `-waits-all.txt`), pages read by page
//! type when the server counts them (`-page-reads.txt`, with `--cnf
//! innodb_monitor_enable=module_buffer_page`), the prefetcher's
//! counters and stderr, and the lag rounds' `pileup lag --json` reports.

/// What `--help` prints; the flags it names are the ones accepted.
const USAGE: &str = "Usage: prefetch-bench --pileup PATH [--tables 8] [--table-size 1250000]
  [--pool 128M] [--trx 30000] [--rounds 3] [--formats ROW,MIXED]
  [--modes none,prefetch,parallel,both[,prewarmed,deferred,prefetch-deferred,parallel-deferred,both-deferred,pages,both-pages,pages-deferred,both-pages-deferred]]
  [--parallel-threads 4]
  [--readers 4] [--lag-rounds 1] [--prefetch-args \"--batch 8 ...\"] [--cnf KEY=VALUE]... [--hold-purge] [--io-thread-down] [--profile DIR [--profile-after SECS]] [--reuse DIR] [--out FILE]";

mod bench;
mod config;
mod device;
mod measure;
mod report;
mod rounds;

use anyhow::Result;
use pileup_bench_drivers::arg;

use crate::bench::start;
use crate::config::Config;
use crate::device::Device;
use crate::report::{format_section, header, lag_table};
use crate::rounds::{lag_rounds, timed_rounds};

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let cfg = Config::parse(&args)?;
    let (mut b, bytes) = start(&cfg, &args)?;
    let dev = Device::probe(&b)?;
    let samples = timed_rounds(&mut b, &cfg)?;
    let lagged = lag_rounds(&mut b, &cfg, &samples)?;
    let mut md = header(&b, &cfg, bytes);
    for f in &cfg.formats {
        md.push_str(&format_section(&cfg, f, &samples, &dev));
    }
    md.push_str(&dev.describe());
    if !lagged.is_empty() {
        md.push_str(&lag_table(&cfg, &lagged));
    }
    print!("{md}");
    if let Some(o) = arg(&args, "--out") {
        pileup_bench_drivers::write(o, &md)?;
    }
    Ok(())
}
