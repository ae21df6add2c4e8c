//! The report: what was run, then per format the speed, purge, CPU and
//! device tables and their bounds, then the lag rounds' shares.

use pileup_bench_drivers::median;
use pileup_replica::device::DeviceReport;

use crate::bench::Bench;
use crate::config::{leak, Config};
use crate::device::Device;
use crate::measure::Sample;
use crate::rounds::{Lagged, Samples};

/// What was run: data, pool, backlog, modes and options.
pub(crate) fn header(b: &Bench, cfg: &Config, bytes: f64) -> String {
    let mut md = format!(
        "\n{:.2} GB of data ({} sysbench tables × {} rows) on a replica with a {} buffer pool and O_DIRECT; \
         backlog {} oltp_update_index transactions (uniform keys) per round, {} rounds, modes in rotated order; \
         parallel = slave_parallel_threads={} slave_parallel_mode=optimistic; prefetch = `pileup prefetch --threads {}{}`; replica options {}{}. Medians.\n",
        bytes / 1e9,
        cfg.tables,
        cfg.size,
        cfg.pool,
        cfg.trx,
        cfg.rounds,
        b.parallel_threads,
        b.readers,
        b.prefetch_args.iter().map(|a| format!(" {a}")).collect::<String>(),
        cfg.extra.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
        if b.hold_purge { "; purge held off during each catch-up (--hold-purge: a consistent snapshot taken before the applier starts)" } else { "" }
    );
    if b.io_thread_down {
        md.push_str("Catch-up with the IO thread down: replicating by file and position, restarted with skip-slave-start, `START SLAVE SQL_THREAD` on the backlog in the relay log (Seconds_Behind_Master NULL); the prefetcher with its default --min-lag.\n");
    }
    md
}

/// The median of one figure of one format's catch-ups in a mode.
struct Medians<'a> {
    samples: &'a Samples,
    format: &'a str,
}

impl Medians<'_> {
    fn of(&self, mode: &str, g: &dyn Fn(&Sample) -> f64) -> f64 {
        median(
            &self
                .samples
                .get(&(self.format.to_string(), leak(mode)))
                .map(|v| v.iter().map(g).collect::<Vec<f64>>())
                .unwrap_or_default(),
        )
    }
}

/// One format's tables: speed, purge, CPU, the device, and the bounds.
pub(crate) fn format_section(cfg: &Config, f: &str, samples: &Samples, dev: &Device) -> String {
    let med = Medians { samples, format: f };
    let trx = cfg.trx as f64;
    let base = med.of("none", &|s| s.secs);
    let mut md = format!(
        "\n#### binlog_format={f}\n\n| mode | catch-up (s) | trx/s | speed-up vs none | applier threads' CPU (% of wall) | replica CPU (cores) | prefetcher CPU (cores) | buffer-pool reads per trx |\n|---|---|---|---|---|---|---|---|\n"
    );
    for m in &cfg.modes {
        let secs = med.of(m.name, &|s| s.secs);
        md.push_str(&format!(
            "| {} | {:.2} | {:.0} | {:.2}× | {:.0}% | {:.2} | {:.2} | {:.2} |\n",
            m.name,
            secs,
            trx / secs,
            base / secs,
            100.0 * med.of(m.name, &|s| s.applier_cpu / s.secs),
            med.of(m.name, &|s| s.replica_cpu / s.secs),
            med.of(m.name, &|s| s.prefetch_cpu / s.secs),
            med.of(m.name, &|s| s.pool_reads) / trx
        ));
    }
    md.push_str(&purge_and_cpu_tables(cfg, &med));
    if samples.values().flatten().all(|s| s.disk.is_some()) {
        md.push_str(&disk_table(cfg, &med, dev));
    }
    md.push_str(&bounds(cfg, &med, dev));
    md
}

/// What each catch-up left for purge, and the CPU during it.
fn purge_and_cpu_tables(cfg: &Config, med: &Medians) -> String {
    let base_total = med.of("none", &|s| s.secs + s.purge_after);
    let mut md = String::from(
        "\nWhat each catch-up left for purge (InnoDB's history list when the applier had caught up and any hold was released) \
         and how long purge then took to bring it under 1,000 on the idle replica; the last column counts that time too:\n\n\
         | mode | history left | purge afterwards (s) | catch-up + purge (s) | speed-up vs none, purge included |\n|---|---|---|---|---|\n",
    );
    for m in &cfg.modes {
        let total = med.of(m.name, &|s| s.secs + s.purge_after);
        md.push_str(&format!(
            "| {} | {:.0} | {:.1} | {:.2} | {:.2}× |\n",
            m.name,
            med.of(m.name, &|s| s.history_left),
            med.of(m.name, &|s| s.purge_after),
            total,
            base_total / total
        ));
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    md.push_str(&format!(
        "\nCPU during the catch-up: the whole machine's busy time (/proc/stat, every state but idle and iowait) and the time the \
         applier threads were runnable but waiting for a CPU (schedstat; with parallel replication, the mean over its threads):\n\n\
         | mode | machine busy (cores of {cores:.0}) | an applier thread waiting for a CPU (% of wall) |\n|---|---|---|\n"
    ));
    for m in &cfg.modes {
        md.push_str(&format!(
            "| {} | {:.2} | {:.0}% |\n",
            m.name,
            med.of(m.name, &|s| s.machine_busy / s.secs),
            100.0 * med.of(m.name, &|s| s.applier_runq / s.secs)
        ));
    }
    md
}

/// The replica's device during the catch-ups.
fn disk_table(cfg: &Config, med: &Medians, dev: &Device) -> String {
    let trx = cfg.trx as f64;
    let mut md = String::from(
        "\nThe replica's device during the catch-up (/proc/diskstats):\n\n\
         | mode | reads/s | writes/s | MB written/s | mean read latency (µs) | busy | device reads per trx | device writes per trx |\n|---|---|---|---|---|---|---|---|\n",
    );
    for m in &cfg.modes {
        let d = |g: &dyn Fn(&DeviceReport, f64) -> f64| {
            med.of(m.name, &|s| s.disk.as_ref().map(|d| g(d, s.secs)).unwrap_or(0.0))
        };
        md.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0}% | {:.2} | {:.2} |\n",
            m.name,
            d(&|d, _| d.reads_per_s),
            d(&|d, _| d.writes_per_s),
            d(&|d, _| d.mb_written_per_s),
            d(&|d, _| d.mean_read_us),
            d(&|d, _| 100.0 * d.busy),
            d(&|d, t| d.reads_per_s * t) / trx,
            d(&|d, t| d.writes_per_s * t) / trx,
        ));
    }
    let lat = med.of("none", &|s| s.disk.as_ref().map(|d| d.mean_read_us).unwrap_or(0.0));
    let wpt = med.of("none", &|s| s.disk.as_ref().map(|d| d.writes_per_s * s.secs).unwrap_or(0.0)) / trx;
    md.push_str(&if lat > 2.0 * dev.one.read_us {
        format!(
            "\nThe plain applier's replica read a page in {lat:.0} µs on average where the idle device takes {:.0} µs: \
             it also writes ({wpt:.1} writes per transaction: page flushes, doublewrite, redo), and the reads queue behind those writes. \
             A prefetcher adds reads to that queue; it does not remove any.\n",
            dev.one.read_us
        )
    } else {
        format!(
            "\nThe plain applier's replica read a page in {lat:.0} µs on average (the idle device: {:.0} µs; {wpt:.1} writes per transaction).\n",
            dev.one.read_us
        )
    });
    md
}

/// What bounds a speed-up for this format: the device's writes, the
/// applier's CPU, the machine's cores.
fn bounds(cfg: &Config, med: &Medians, dev: &Device) -> String {
    let mut md = String::new();
    let base = med.of("none", &|s| s.secs);
    // What limits a replica catching up on this kind of device is what it
    // writes (page flushes, doublewrite: ~30 KB per write on average), not
    // how many I/Os it makes: the sustained probe's write bandwidth against
    // the plain catch-up's.
    let plain_mbw = med.of("none", &|s| s.disk.as_ref().map(|d| d.mb_written_per_s).unwrap_or(0.0));
    let cap_mbw = dev.sustained.writes_per_s * 16384.0 / 1e6;
    if plain_mbw > 0.0 {
        md.push_str(&format!(
            "\nThe device's bound: the plain catch-up wrote {plain_mbw:.0} MB/s ({:.0} KB per transaction); beside reads, the device sustains about \
             {cap_mbw:.0} MB/s of syncing writes (below), so a mode that writes as much per transaction is capped near {:.2}× here (an estimate: the probe's writes are not InnoDB's). \
             Prefetching moves the applier's reads earlier without making it write less; a larger pool or purge deferred \
             (fewer pages evicted dirty and read back) lowers the bytes per transaction and raises the cap.\n",
            plain_mbw * 1e3 * base / cfg.trx as f64,
            cap_mbw / plain_mbw
        ));
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    let applier = med.of("none", &|s| s.applier_cpu);
    let replica_cores = med.of("none", &|s| s.replica_cpu / s.secs);
    md.push_str(&format!(
        "\nBounds for this format: the plain applier thread was on CPU {:.0}% of the time, so removing every wait it has would make it at most {:.2}× faster; \
         the replica used {:.2} of {cores:.0} cores while applying without help, so with the same CPU per transaction the box caps any speed-up near {:.2}×.\n",
        100.0 * applier / base,
        base / applier.max(1e-9),
        replica_cores,
        cores / replica_cores.max(1e-9)
    ));
    md
}

/// Where the applier's time went in the lag rounds, by format and mode.
pub(crate) fn lag_table(cfg: &Config, lagged: &Lagged) -> String {
    let cats = ["page_read", "ps_data_file", "latch_wait", "commit", "cpu", "other_wait", "relay_wait", "stalled"];
    let mut md = format!(
        "\n#### Where the applier's time goes (`pileup lag` over 60% of an extra, untimed catch-up per mode; medians of {})\n\n\
         | format | mode | page reads | (performance_schema: in data-file reads) | lock/latch waits | commit and fsync | CPU in row apply | other waits | waiting for relay log | stood still (stalls ≥ 200 ms) | bound for a prefetcher |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        cfg.lag_rounds
    );
    for f in &cfg.formats {
        for m in cfg.modes.iter().filter(|m| !m.parallel) {
            let Some(v) = lagged.get(&(f.clone(), m.name)) else { continue };
            let share = |c: &str| {
                median(
                    &v.iter()
                        .map(|sh| sh.iter().find(|(k, _)| k == c).map(|x| x.1).unwrap_or(0.0))
                        .collect::<Vec<f64>>(),
                )
            };
            let cells: Vec<String> = cats.iter().map(|c| format!("{:.0}%", 100.0 * share(c))).collect();
            // A prefetcher can at best take the applier's own page reads away.
            let bound = if m.prefetch {
                "".to_string()
            } else {
                format!("≤ {:.2}×", 1.0 / (1.0 - share("page_read")).max(1e-9))
            };
            md.push_str(&format!("| {f} | {} | {} | {bound} |\n", m.name, cells.join(" | ")));
        }
    }
    md.push_str(
        "\nShares of the applier threads' time from stack samples (each thread is stopped for microseconds every 10 ms; \
         a thread in a read stops as the read returns, so \"page reads\" includes the wait for a CPU after it), and, for comparison, \
         the time performance_schema measured inside InnoDB data-file reads over the same period. \
         The bound assumes a prefetcher removes every page read the applier itself makes and nothing else changes: \
         1 / (1 − page-read share). Lock/latch waits (pages in flight, the index tree latch, purge) and CPU stay. \
         \"Stood still\": the share of the period inside stretches of 200 ms or more in which the applier had work and its \
         relay log position did not move (`pileup lag`'s stalls; the sampled position is read every 10 ms).\n",
    );
    md
}
