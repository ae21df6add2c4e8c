//! `pileup stacks`: argument parsing and wiring for pileup_engine.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use pileup_annotate::SqlSource;
use pileup_conn::ConnOptions;
use pileup_engine::{CaptureOptions, Mode, Sampler, SamplerOptions, ThreadFilter};

use crate::output::{emit, Options};

/// Capture the stacks of a live mysqld with a stop of microseconds per thread.
///
/// Threads are seized with PTRACE_SEIZE (if pileup dies, the kernel resumes
/// them), their registers and live stack are copied, and they are resumed
/// before any unwinding or symbolizing. Identical stacks are counted, most
/// frequent first; each is annotated with the thread's OS state and, when a
/// SQL connection is available, the connection and statement behind it. For
/// threads blocked on a pthread mutex or a write-held rwlock, the holder is
/// named.
///
/// Examples:
///   pileup stacks                                  # the one running server, pt-pmp text
///   pileup stacks --samples 50 --interval-ms 100 --format svg -o flame.svg
///   pileup stacks --focus accept --duration 60s --format dot -o accept.dot
///   pileup stacks --focus sql-thread --samples 100 --format folded
///   pileup stacks --focus accept --duration 1h -o accept.pb.gz   # 36,000 samples
///
/// Stacks are counted as they are taken, so a run of hours holds one entry
/// per distinct stack, not every sample; the last --keep-samples samples are
/// also kept whole for --format json. Ctrl-C (SIGINT) or SIGTERM ends the run
/// early and writes what was collected, complete, in the chosen format.
///
/// Files written with -o are created mode 0600: they can hold query text.
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct StacksArgs {
    /// Server process id, or "auto" for the one running mariadbd/mysqld.
    #[arg(long, default_value = "auto", value_name = "PID|auto")]
    pub pid: String,
    /// How threads are read [default: consistent; passive with --focus].
    /// Passive stops nothing: a blocked thread's stack is read while it
    /// sleeps, a runnable one waiting for a CPU where it stands (eBPF), and
    /// a running one is sampled on its CPU by a perf event on that CPU's
    /// clock, so one thread can be sampled for hours without ever being
    /// stopped (as root, or with CAP_BPF and CAP_PERFMON, no other
    /// thread's context switches cost more; without them a perf event is
    /// attached to the thread, which adds about 0.07 µs to every context
    /// switch); threads are seen one after another, not at one instant.
    #[arg(long, value_parser = mode_parser())]
    pub mode: Option<Mode>,
    /// Number of samples.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub samples: usize,
    /// Time between samples (start to start).
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub interval_ms: u64,
    /// Sample for this long instead of --samples (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration)]
    pub duration: Option<Duration>,
    /// Focus: comma-separated thread ids, roles (accept, sql-thread,
    /// io-thread, connections), conn:ID (the thread serving a processlist
    /// id) and/or name:REGEX on thread names.
    #[arg(long, value_name = "SPEC")]
    pub focus: Option<String>,
    #[command(flatten)]
    pub out: crate::output::OutputArgs,
    /// Most stack bytes copied per thread.
    #[arg(long, default_value_t = 256 * 1024, value_name = "BYTES")]
    pub stack_bytes: usize,
    /// Longest any thread may stay stopped; past it the capture is abandoned
    /// and every thread resumed.
    #[arg(long, default_value_t = 200, value_name = "MS")]
    pub max_stop_ms: u64,
    /// Capture at normal scheduling priority. By default the capture thread
    /// runs at real-time priority (SCHED_FIFO 1) while it holds threads
    /// stopped, so on a saturated server they are not held while pileup
    /// waits for a CPU; it sleeps between polls and returns to normal
    /// priority when the stop window closes.
    #[arg(long)]
    pub normal_priority: bool,
    /// Print stop times, capture/unwind/symbolize times and thread counts to stderr.
    #[arg(long)]
    pub stats: bool,
    /// While sampling, re-read the processlist at most this often (statements
    /// shown may be this much older than the stack).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub sql_every_ms: u64,
    /// Samples kept whole (every thread's frames and annotations, in --format
    /// json): the last N. Every sample is counted in the stacks, lock groups
    /// and stop statistics regardless.
    #[arg(long, default_value_t = pileup_engine::KEEP_SAMPLES, value_name = "N")]
    pub keep_samples: usize,
    /// Do not connect to SQL (no statement annotation).
    #[arg(long)]
    pub no_sql: bool,
    /// Sample a process that is not mariadbd/mysqld.
    #[arg(long)]
    pub any_process: bool,
    /// Also read DWARF debug info: inlined frames and source lines. Names are
    /// complete without it when debug files are installed; this adds their
    /// parse time (libc's ~60 ms, the server's own can take seconds).
    #[arg(long)]
    pub debug_info: bool,
    #[command(flatten)]
    pub debug_files: super::debug_files::DebugFileArgs,
    /// pmp: only the pt-pmp lines, no `#` annotations.
    #[arg(long)]
    pub plain: bool,
    /// folded/svg: root each stack at its thread's role or name.
    #[arg(long)]
    pub thread_root: bool,
    /// dot: hide functions seen in less than this percent of stacks.
    #[arg(long, default_value_t = 0.5, value_name = "PCT")]
    pub dot_min_pct: f64,
}

/// The sampling's bar.
const SAMPLING: &str = "{spinner} sampling [{bar:30}] {pos}/{len} {elapsed}/{duration} {msg} (Ctrl-C: stop and write)";

pub fn run(a: StacksArgs, conn: &ConnOptions) -> Result<()> {
    super::at_least_1("--samples", a.samples as u64)?;
    if a.interval_ms == 0 && a.samples > 1 {
        super::usage!("--interval-ms must be at least 1");
    }
    super::at_least_1("--max-stop-ms", a.max_stop_ms)?;
    if !(0.0..=100.0).contains(&a.dot_min_pct) {
        super::usage!("--dot-min-pct is a percent of the stacks: from 0 to 100");
    }
    if a.stack_bytes < 512 {
        super::usage!("--stack-bytes {} is too small to unwind anything; use at least 512", a.stack_bytes);
    }
    let interval = Duration::from_millis(a.interval_ms.max(1));
    let samples = match a.duration {
        Some(d) => ((d.as_secs_f64() / interval.as_secs_f64()).floor() as usize).max(1),
        None => a.samples,
    };
    let filter = match &a.focus {
        Some(s) => ThreadFilter::parse(s).map_err(|e| super::Usage(format!("--focus {e}")))?,
        None => ThreadFilter::default(),
    };
    let targets = a.out.targets("stacks")?;
    let pid = super::parse_pid(&a.pid, conn)?;
    // Check the target before connecting anywhere.
    pileup_engine::process::check_target(pid, a.any_process)?;
    let sql = if a.no_sql { None } else { open_sql(pid, conn) };

    // Progress bars on a terminal: debug info being fetched, and the
    // sampling's, drawn by the sink among them.
    let bars = super::debug_files::fetch_bars();
    let opts = SamplerOptions {
        capture: CaptureOptions {
            mode: a.mode.unwrap_or(if a.focus.is_some() { Mode::Passive } else { Mode::Consistent }),
            stack_bytes: a.stack_bytes,
            max_stop: Duration::from_millis(a.max_stop_ms),
            raised_priority: !a.normal_priority,
        },
        filter,
        any_process: a.any_process,
        debug_info: a.debug_info,
        sql_refresh: Duration::from_millis(a.sql_every_ms),
        sql_bracket: true,
        keep_samples: a.keep_samples.max(1),
        debug_dirs: a.debug_files.dirs(),
        debuginfod: Some(a.debug_files.debuginfod_with_bars(&bars)),
        // One sample waits for its names; a run of many starts at once and
        // names what it sampled as debug files arrive.
        debuginfod_wait: samples == 1,
    };
    let mut sampler = Sampler::new(pid, opts, sql.map(SqlSource::boxed))?;
    // The result is a document: the sink only moves the bar (one sample
    // has none).
    let mut sink = crate::output::Sink::new(false, (samples > 1).then_some(SAMPLING)).among(&bars);
    // A signal ends the sampling; what was collected is still written.
    let stop = super::stop_on_signals();
    let ran = sampler
        .run_until(samples, interval, a.duration, Some(&stop), |p| sink.event(&pileup_profile::Sampled::from(p)));
    sink.finish();
    ran?;
    let profile = sampler.finish();
    let o = Options { plain: a.plain, thread_root: a.thread_root, dot_min_pct: a.dot_min_pct, ..Default::default() };
    emit(&pileup_profile::ProfileReport(&profile), &targets, &o)?;
    if a.stats {
        print_stats(&profile);
    }
    Ok(())
}

/// Connect for annotation. Without explicit options, try the server's own
/// socket (from its command line) or the usual ones; failing quietly then,
/// since stacks are useful without SQL. With explicit options, say why not.
pub(crate) fn open_sql(pid: i32, conn: &ConnOptions) -> Option<SqlSource> {
    let explicit = conn.any_given();
    let mut spec = match conn.resolve() {
        Ok(s) => s,
        Err(e) => {
            note!("pileup: SQL annotation off: {e:#}");
            return None;
        }
    };
    if !explicit && std::env::var_os("MYSQL_UNIX_PORT").is_none() && std::env::var_os("MYSQL_HOST").is_none() {
        if let Some(sock) = pileup_engine::process::server_socket(pid) {
            spec.socket = Some(sock);
        }
    }
    spec.timeout = spec.timeout.min(Duration::from_secs(5));
    match spec.connect().map_err(anyhow::Error::from).and_then(|c| Ok(SqlSource::new(c)?)) {
        Ok(s) => Some(s),
        Err(e) => {
            if explicit || std::env::var_os("MYSQL_PWD").is_some() {
                note!("pileup: SQL annotation off: {e:#}");
            } else {
                tracing::info!("SQL annotation off: {e:#}");
            }
            None
        }
    }
}

fn print_stats(p: &pileup_engine::Profile) {
    let ms = |us: u64| us as f64 / 1000.0;
    let st = &p.stops;
    note!(
        "pileup stats: pid {} ({}), {}, {} mode; {}, {} distinct",
        p.pid,
        p.exe,
        super::plural(st.samples, "sample", "samples"),
        p.mode.name(),
        super::plural(p.thread_stacks, "thread stack", "thread stacks"),
        p.stacks.len()
    );
    if p.samples.len() < st.samples {
        note!("  the last {} of {} samples:", p.samples.len(), st.samples);
    }
    for s in &p.samples {
        let st = &s.stats;
        note!(
            "  sample {}: threads listed {} captured {} missed {} appeared {}; stopped window {:.2} ms{}, longest thread {:.3} ms (held {:.3} ms once stopped), median thread {:.3} ms (held {:.3} ms); capture {:.2} ms; {} KiB of stack copied{}",
            s.index,
            st.threads_listed,
            st.threads_captured,
            st.threads_missed,
            st.threads_appeared,
            ms(st.window_us),
            if st.mode == "consistent" && st.window_us > 0 {
                format!(" ({:.2} ms of it checking sleepers)", ms(st.checks_us))
            } else {
                String::new()
            },
            ms(st.max_thread_stop_us),
            ms(st.max_thread_held_us),
            ms(st.median_thread_stop_us),
            ms(st.median_thread_held_us),
            ms(st.capture_us),
            st.stack_bytes_copied / 1024,
            if st.budget_exceeded { " [--max-stop-ms exceeded]" } else { "" }
        );
    }
    if p.mode == Mode::Passive {
        note!(
            "  passive: no thread stopped; {} read while blocked, {} while waiting for a CPU, {} sampled on a CPU",
            super::plural(st.read_blocked, "thread stack", "thread stacks"),
            st.read_queued,
            st.sampled_on_cpu
        );
    } else {
        note!(
        "  stopped windows: median {:.2} ms, 99th percentile {:.2} ms, worst {:.2} ms (sample {}); longest single thread {:.3} ms, held {:.3} ms once stopped",
        ms(st.median_window_us),
        ms(st.p99_window_us),
        ms(st.worst_window_us),
        st.worst_window_sample,
        ms(st.longest_thread_us),
        ms(st.longest_held_us)
    );
        if p.mode == Mode::Consistent {
            note!(
                "  blocked threads read where they slept, not stopped: {}; read asleep but found to have run when checked while the others were held, and interrupted then: {}; still queued for a CPU when the others were let go, copied as each stopped: {}",
                st.read_blocked, st.woke_after_read, st.stopped_late
            );
        }
    }
    let t = &p.timing;
    note!(
        "  totals: load modules {:.1} ms, capture {:.2} ms, unwind {:.1} ms, symbolize {:.1} ms, annotate {:.1} ms; {:.0}% of frames named",
        ms(t.load_modules_us),
        ms(t.capture_us),
        ms(t.unwind_us),
        ms(t.symbolize_us),
        ms(t.annotate_us),
        p.named_pct
    );
}

/// `--mode`'s values, each with its one-line meaning for `--help`.
fn mode_parser() -> impl clap::builder::TypedValueParser<Value = Mode> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(Mode::ALL.map(|m| {
        PossibleValue::new(m.name()).help(match m {
            Mode::Consistent => "All threads stopped together: one true snapshot, window as short as possible",
            Mode::Rolling => "One thread at a time: the least stop for any single thread",
            Mode::Passive => "No thread stopped: blocked threads read as they sleep, running ones sampled on their CPU",
        })
    }))
    .map(|s| Mode::parse(&s).expect("a name from Mode::ALL"))
}
