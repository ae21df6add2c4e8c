//! What a catch-up is measured by: the server's counters, the applier
//! threads' and the machine's CPU, and the sample that holds them.

use std::process::Command;

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_replica::device::DeviceReport;
use pileup_sandbox::Sandbox;

/// Run sysbench oltp_update_index on the server at `sock` (`extra` says
/// what to do).
pub(crate) fn sysbench(sock: &str, tables: u64, size: u64, extra: &[String]) -> Result<()> {
    let out = Command::new("sysbench")
        .arg("oltp_update_index")
        .args(["--db-driver=mysql", &format!("--mysql-socket={sock}"), "--mysql-user=root", "--mysql-db=sbtest"])
        .args([format!("--tables={tables}"), format!("--table-size={size}")])
        .args(extra)
        .output()
        .context("running sysbench (make deps installs it)")?;
    if !out.status.success() {
        bail!("sysbench {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// utime + stime of a process or one of its threads, in seconds.
pub(crate) fn cpu_of(stat_path: &str) -> f64 {
    pileup_bench_drivers::stat_cpu(stat_path, 2)
}

/// OS thread ids of the replication applier threads (SQL driver and workers).
pub(crate) fn applier_tids(replica: &Sandbox) -> Result<Vec<u64>> {
    let tids: Vec<Option<u64>> = replica
        .connect()?
        .query("SELECT THREAD_OS_ID FROM performance_schema.threads WHERE NAME IN ('thread/sql/slave_sql', 'thread/sql/slave_worker', 'thread/sql/rpl_parallel_thread')")?;
    Ok(tids.into_iter().flatten().collect())
}

/// CPU seconds the applier threads `tids` of `pid` have used.
pub(crate) fn applier_cpu(pid: u32, tids: &[u64]) -> f64 {
    tids.iter().map(|t| cpu_of(&format!("/proc/{pid}/task/{t}/stat"))).sum()
}

/// Seconds an applier thread spent runnable but waiting for a CPU, the mean
/// over the applier threads (the second field of
/// /proc/PID/task/TID/schedstat, in nanoseconds): one thread's figure
/// without parallel replication, a worker's on average with it.
pub(crate) fn applier_runq(pid: u32, tids: &[u64]) -> f64 {
    let waits: Vec<f64> = tids
        .iter()
        .filter_map(|&t| pileup_engine::process::sched_times(pid as i32, t as i32))
        .map(|s| s.waiting_ns as f64)
        .collect();
    waits.iter().sum::<f64>() / waits.len().max(1) as f64 / 1e9
}

/// CPU seconds the whole machine spent busy (every state but idle and
/// iowait, summed over cores), from the first line of /proc/stat.
pub(crate) fn machine_busy() -> f64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<f64> =
        s.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    f.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum::<f64>() / tick
}

/// A global status counter of the server, 0 when it has none.
pub(crate) fn status(c: &mut mysql::Conn, name: &str) -> Result<f64> {
    Ok(pileup_conn::global_status(c, name)?.unwrap_or(0) as f64)
}

#[derive(Default, Clone)]
pub(crate) struct Sample {
    pub(crate) secs: f64,
    pub(crate) applier_cpu: f64,
    pub(crate) replica_cpu: f64,
    pub(crate) prefetch_cpu: f64,
    pub(crate) pool_reads: f64,
    pub(crate) wait_free: f64,
    /// The replica's device over the catch-up (none if /proc/diskstats
    /// does not list it).
    pub(crate) disk: Option<DeviceReport>,
    /// The prefetcher's last counters line (JSON).
    pub(crate) prefetch_report: String,
    /// `pileup lag --json` of this catch-up (untimed composition rounds only).
    pub(crate) lag_json: String,
    /// Seconds an applier thread waited in the run queue for a CPU (mean
    /// over the applier threads).
    pub(crate) applier_runq: f64,
    /// CPU seconds the whole machine was busy during the catch-up.
    pub(crate) machine_busy: f64,
    /// InnoDB's history list when the applier had caught up (and any purge
    /// hold was released): the purge work this catch-up left behind.
    pub(crate) history_left: f64,
    /// Seconds from then until purge brought the history list under 1,000
    /// on the otherwise idle replica (the bar every round starts from).
    pub(crate) purge_after: f64,
}
