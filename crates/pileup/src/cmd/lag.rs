//! `pileup lag`: where a replica's apply time goes.

use std::time::Duration;

use anyhow::{bail, Result};
use pileup_conn::ConnOptions;
use pileup_lag::{sample, LagOptions};

use crate::output::{emit, Options};

#[derive(clap::Args)]
#[command(
    after_long_help = "Samples the replica's applier threads (the SQL thread, and the workers of parallel replication) \
with the stacks engine and reads their processlist state at every sample, then shows where apply time goes: \
the applier's own page reads, lock and latch waits, commit and fsync, waiting for a prior commit (parallel replication), \
CPU in row apply, and waiting for the relay log; overall, per table and per row operation (finding the row by \
primary key, or changing it and its secondary index entries). It also finds stalls: stretches of at least \
--stall-ms in which the applier had work but its relay log position did not move (an I/O-bound replica applies in \
sprints and stops: a flush batch holding the pages it must change, no free page, a latch convoy), and what it was \
doing meanwhile. Where performance_schema is on, it also \
lists the applier threads' instrumented waits over the period (which latch, which file), longest first; MariaDB \
times latches only with performance_schema_instrument='wait/synch/%=ON'. Run it on the replica's host (it needs \
ptrace permission on mariadbd, as `pileup stacks` does).\n\nExamples:\n  pileup lag -S /run/mysqld/mysqld.sock --duration 30s\n  \
pileup lag --duration 1m -o lag.svg      # flame graph rooted at category, then table\n  pileup lag --format json > lag.json"
)]
pub struct LagArgs {
    /// Server process id, or "auto" for the one listening where pileup connects.
    #[arg(long, default_value = "auto", value_name = "PID|auto")]
    pub pid: String,
    /// How long to sample (e.g. 10s, 2m).
    #[arg(long, default_value = "10s", value_parser = super::parse_duration)]
    pub duration: Duration,
    /// Time between samples.
    #[arg(long, default_value_t = 50)]
    pub interval_ms: u64,
    /// Longest the applier may stay stopped in one sample, milliseconds.
    #[arg(long, default_value_t = 50)]
    pub max_stop_ms: u64,
    /// A position held this long (milliseconds) while the applier had work counts as a stall.
    #[arg(long, default_value_t = 200)]
    pub stall_ms: u64,
    // Folded samples are rooted at their category, then table.
    #[command(flatten)]
    pub out: crate::output::OutputArgs,
}

pub fn run(a: LagArgs, conn: &ConnOptions) -> Result<()> {
    if a.interval_ms == 0 || a.max_stop_ms == 0 {
        super::usage!("--interval-ms and --max-stop-ms must be at least 1");
    }
    if a.stall_ms < a.interval_ms {
        super::usage!("--stall-ms ({}) must be at least --interval-ms ({}): a stall is a position seen unchanged by several samples", a.stall_ms, a.interval_ms);
    }
    super::more_than_0("--duration", a.duration)?;
    let targets = a.out.targets("lag")?;
    let spec = conn.resolve()?;
    let (pid, why) = super::resolve_server_pid(&a.pid, &spec)?;
    let Some(pid) = pid else {
        bail!("lag needs the replica's process: {}", why.unwrap_or_else(|| "give --pid".into()));
    };
    let o = LagOptions {
        duration: a.duration,
        interval: Duration::from_millis(a.interval_ms),
        max_stop: Duration::from_millis(a.max_stop_ms),
        stall: Duration::from_millis(a.stall_ms),
    };
    let total = (a.duration.as_millis() as u64 / a.interval_ms).max(1);
    let mut sink = crate::output::Sink::new(
        false,
        Some("{spinner} sampling the applier [{bar:30}] {pos}/{len} {elapsed}/{duration}"),
    );
    let r = sample(pid, &spec, &o, |i, _| sink.event(&pileup_output::Step { done: i as u64, total: Some(total) }));
    sink.finish();
    let r = r?;
    emit(&r, &targets, &Options::default())?;
    Ok(())
}
