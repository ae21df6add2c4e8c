//! `pileup memory`: wiring for pileup_memory.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Result};
use pileup_conn::ConnOptions;
use pileup_memory::{MemoryOptions, Point, Sink};

use crate::output::{emit, Options, OutputArgs};

/// Where a running server's memory went over a window: its resident memory
/// by region (glibc's heaps, the buffer pool, thread stacks, file-backed),
/// beside what the server says it allocated (Memory_used, each
/// connection's MEMORY_USED): the heap growth its accounting does not
/// explain, and the memory it freed that the allocator kept.
///
/// It reads /proc/PID/status and three queries per interval, and
/// /proc/PID/smaps (a walk of the page tables in the kernel) only as often
/// as keeps that under 1% of a core; nothing is changed on the server.
#[derive(clap::Args)]
#[command(
    verbatim_doc_comment,
    after_long_help = "Examples:\n  pileup memory --duration 1m\n  pileup memory --pid 4242 --interval 500ms -o memory.json\n  pileup memory --no-sql --duration 10s   # /proc alone"
)]
pub struct MemoryArgs {
    /// The server process: a pid, or "auto" (the server the connection
    /// options reach, else the one running).
    #[arg(long, default_value = "auto", value_name = "PID|auto")]
    pub pid: String,
    /// How long to follow it.
    #[arg(long, default_value = "30s", value_parser = super::parse_duration)]
    pub duration: Duration,
    /// Time between points (at least 100ms).
    #[arg(long, default_value = "1s", value_parser = super::parse_duration)]
    pub interval: Duration,
    /// Read /proc alone: no SQL connection, so not the server's accounting.
    #[arg(long)]
    pub no_sql: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// A progress line on a terminal, and Ctrl-C to stop early.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Sink for Progress {
    fn point(&mut self, p: &Point) {
        if let Some(b) = &self.bar {
            b.set_position(p.at_s as u64);
            b.set_message(format!("rss {:.0} MiB", p.resident.rss as f64 / 1048576.0));
        }
    }

    fn stop(&mut self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

pub fn run(a: MemoryArgs, conn: &ConnOptions) -> Result<()> {
    if a.interval < Duration::from_millis(100) {
        bail!("--interval must be at least 100ms");
    }
    let targets = a.out.targets()?;
    let spec = conn.resolve()?;
    let pid = super::parse_pid(&a.pid, conn)?;
    let sql = if a.no_sql { None } else { Some(spec.connect()?) };
    let bar = std::io::stderr().is_terminal().then(|| {
        super::progress_bar(
            a.duration.as_secs().max(1),
            "{spinner} following the server's memory [{bar:30}] {pos}/{len} s {msg}",
        )
    });
    let mut sink = Progress { bar, stop: super::stop_on_signals() };
    let o = MemoryOptions { pid, duration: a.duration, interval: a.interval };
    let r = pileup_memory::run(&o, sql, &mut sink);
    if let Some(b) = &sink.bar {
        b.finish_and_clear();
    }
    emit(&r?, &targets, &Options::default())?;
    Ok(())
}
