//! The run's settings: the modes a catch-up can run in, and the command
//! line.

use anyhow::{bail, Context, Result};
use pileup_bench_drivers::arg;

pub(crate) struct Mode {
    pub(crate) name: &'static str,
    pub(crate) prefetch: bool,
    pub(crate) parallel: bool,
    /// The ceiling, not a way to run a replica: the applier is held at its
    /// first transaction (another session holds FLUSH TABLES WITH READ
    /// LOCK) while the prefetcher reads the whole backlog, and the clock
    /// starts when the lock is released. Only meaningful when the backlog's
    /// pages fit in the buffer pool (`--trx 2000` with a 128 MB pool).
    pub(crate) prewarm: bool,
    /// Purge held off during the catch-up: by `pileup prefetch
    /// --defer-purge` when prefetching, else by a session holding a
    /// consistent snapshot (what the option does, without the prefetcher).
    pub(crate) defer: bool,
    /// `pileup prefetch --warm pages`.
    pub(crate) pages: bool,
}

const MODES: [Mode; 13] = [
    Mode { name: "none", prefetch: false, parallel: false, prewarm: false, defer: false, pages: false },
    Mode { name: "prefetch", prefetch: true, parallel: false, prewarm: false, defer: false, pages: false },
    Mode { name: "parallel", prefetch: false, parallel: true, prewarm: false, defer: false, pages: false },
    Mode { name: "both", prefetch: true, parallel: true, prewarm: false, defer: false, pages: false },
    Mode { name: "prewarmed", prefetch: true, parallel: false, prewarm: true, defer: false, pages: false },
    Mode { name: "deferred", prefetch: false, parallel: false, prewarm: false, defer: true, pages: false },
    Mode { name: "prefetch-deferred", prefetch: true, parallel: false, prewarm: false, defer: true, pages: false },
    Mode { name: "parallel-deferred", prefetch: false, parallel: true, prewarm: false, defer: true, pages: false },
    Mode { name: "both-deferred", prefetch: true, parallel: true, prewarm: false, defer: true, pages: false },
    Mode { name: "pages", prefetch: true, parallel: false, prewarm: false, defer: false, pages: true },
    Mode { name: "both-pages", prefetch: true, parallel: true, prewarm: false, defer: false, pages: true },
    Mode { name: "pages-deferred", prefetch: true, parallel: false, prewarm: false, defer: true, pages: true },
    Mode { name: "both-pages-deferred", prefetch: true, parallel: true, prewarm: false, defer: true, pages: true },
];

/// The run's settings, from the command line.
pub(crate) struct Config {
    pub(crate) pileup: String,
    pub(crate) tables: u64,
    pub(crate) size: u64,
    pub(crate) trx: u64,
    pub(crate) rounds: u64,
    pub(crate) lag_rounds: u64,
    pub(crate) pool: String,
    pub(crate) formats: Vec<String>,
    pub(crate) modes: Vec<&'static Mode>,
    /// Keep both servers' data in this directory and load it only once.
    pub(crate) reuse: Option<std::path::PathBuf>,
    /// The replica's options beyond the fixed ones (with --cnf's).
    pub(crate) extra: Vec<(String, String)>,
}

/// A server option as a (name, value) pair.
pub(crate) fn kv(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

impl Config {
    /// The settings from the command line, with their defaults.
    pub(crate) fn parse(args: &[String]) -> Result<Config> {
        let num = |k: &str, d: u64| -> Result<u64> {
            Ok(arg(args, k).map(|s| s.parse()).transpose().with_context(|| format!("{k} takes a number"))?.unwrap_or(d))
        };
        let formats = arg(args, "--formats")
            .unwrap_or_else(|| "ROW,MIXED".into())
            .split(',')
            .map(|s| s.trim().to_uppercase())
            .collect();
        let wanted = arg(args, "--modes").unwrap_or_else(|| "none,prefetch,parallel,both".into());
        let modes: Vec<&Mode> = MODES.iter().filter(|m| wanted.split(',').any(|w| w.trim() == m.name)).collect();
        if modes.is_empty() || modes[0].name != "none" {
            bail!("--modes must include none (every ratio is to it)");
        }
        // What a DBA sets for an SSD: the default innodb_io_capacity (200) makes
        // the page cleaner the bottleneck of any write-heavy small-pool server.
        // MariaDB skips neighbour flushing on its own when the kernel says the
        // disk is solid-state, but virtual disks (virtio here) often claim to be
        // rotational, and flushing neighbours then writes pages that are dirtied
        // again soon after: the plain applier caught up ~1.2x faster without it.
        let mut extra: Vec<(String, String)> = vec![
            kv("innodb_io_capacity", "4000"),
            kv("innodb_io_capacity_max", "8000"),
            kv("innodb_flush_neighbors", "0"),
        ];
        for (i, a) in args.iter().enumerate() {
            if a == "--cnf" {
                let v = args.get(i + 1).context("--cnf KEY=VALUE")?;
                let (k, v) = v.split_once('=').context("--cnf KEY=VALUE")?;
                extra.retain(|(x, _)| x != k);
                extra.push(kv(k, v));
            }
        }
        Ok(Config {
            pileup: arg(args, "--pileup").context("--pileup PATH")?,
            tables: num("--tables", 8)?,
            size: num("--table-size", 1_250_000)?,
            trx: num("--trx", 30_000)?,
            rounds: num("--rounds", 3)?,
            lag_rounds: num("--lag-rounds", 1)?,
            pool: arg(args, "--pool").unwrap_or_else(|| "128M".into()),
            formats,
            modes,
            reuse: arg(args, "--reuse").map(std::path::PathBuf::from),
            extra,
        })
    }
}

/// Mode names are 'static; map a borrowed one back for the lookup.
pub(crate) fn leak(m: &str) -> &'static str {
    MODES.iter().find(|x| x.name == m).map(|x| x.name).unwrap_or("none")
}
