//! The one way out of the CLI. Results go to stdout, or to a file created
//! 0600 (results hold query text) through a temporary file renamed into
//! place, so a full disk or a crash never leaves a truncated file under
//! the requested name; paths that are not regular files (`/dev/null`,
//! FIFOs, symlinks) are written through. Diagnostics go to stderr.
//!
//! A reader that goes away (a closed pipe: `pileup digest | head`) ends the
//! run quietly, as `grep` and `cat` end: the write that finds it closed
//! asks the run to stop (the same flag SIGINT sets, so a capture being
//! written is finished, not cut). A run that then ends well, or ends on
//! that closed stdout, exits 0 without a message; any other failure is
//! reported as always. Nothing here panics on a failed write.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::Result;

use crate::exit::Usage;

pub use pileup_output::SCHEMA_VERSION;

/// Set when a write to stdout found its reader gone.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// The run's stop flag: SIGINT, SIGTERM and a reader gone set it.
fn stop_flag() -> &'static Arc<AtomicBool> {
    static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    STOP.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// The flag a long run polls to stop early: set by SIGINT, SIGTERM, or a
/// reader of its output gone. The signal handlers are installed on the
/// first call.
pub fn stop_requested() -> Arc<AtomicBool> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        for sig in [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGTERM] {
            extern "C" fn handler(_: i32) {
                stop_flag().store(true, Ordering::SeqCst);
            }
            let sa = nix::sys::signal::SigAction::new(
                nix::sys::signal::SigHandler::Handler(handler),
                nix::sys::signal::SaFlags::SA_RESTART,
                nix::sys::signal::SigSet::empty(),
            );
            // SAFETY: the handler only stores to an atomic that exists
            // before it is installed (get_or_init above it in this call).
            let _ = unsafe { nix::sys::signal::sigaction(sig, &sa) };
        }
    });
    stop_flag().clone()
}

/// Whether the reader of stdout went away during the run.
pub fn stdout_gone() -> bool {
    STDOUT_GONE.load(Ordering::SeqCst)
}

/// Note a write's error on stdout: a closed pipe marks its reader gone
/// and asks the run to stop.
fn seen(e: &std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        STDOUT_GONE.store(true, Ordering::SeqCst);
        stop_flag().store(true, Ordering::SeqCst);
    }
}

/// Note a write's error on stderr: a closed pipe asks the run to stop (as
/// SIGPIPE would end it), but decides nothing about how it ended.
fn seen_on_stderr(e: &std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        stop_flag().store(true, Ordering::SeqCst);
    }
}

/// Whether `e` is a write to stdout that found its reader gone: the run
/// then ends quietly, with status 0, as `grep` and `cat` end.
pub fn ended_by_closed_stdout(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    // The write's io error, where a wrapper keeps it out of the chain of
    // sources (the output layer's and serde_json's errors do).
    let broken = |c: &(dyn std::error::Error + 'static)| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == BrokenPipe)
            || matches!(c.downcast_ref(), Some(pileup_output::OutputError::Io(io)) if io.kind() == BrokenPipe)
            || c.downcast_ref::<serde_json::Error>().is_some_and(|j| j.io_error_kind() == Some(BrokenPipe))
    };
    stdout_gone() && e.chain().any(broken)
}

/// stdout as the one writer of results: buffered (stdout alone flushes at
/// every newline, a system call per line of a long report), and a closed
/// pipe noted ([`stdout_gone`]).
pub struct Stdout(std::io::BufWriter<std::io::StdoutLock<'static>>);

impl Stdout {
    pub fn new() -> Stdout {
        Stdout(std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock()))
    }
}

impl Write for Stdout {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write(b).inspect_err(seen)
    }
    // BufWriter's own write_all (a copy into its buffer when the bytes fit),
    // not the default's loop over write: a JSON serializer writes every
    // token on its own.
    #[inline]
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.0.write_all(b).inspect_err(seen)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush().inspect_err(seen)
    }
}

/// One line of a result on stdout, flushed (a line is news when it is
/// written: events, progress lines of JSON). A closed pipe is an error the
/// caller ends on; `main` then exits quietly.
pub fn out_line(args: fmt::Arguments) -> std::io::Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_fmt(args).and_then(|()| o.write_all(b"\n")).and_then(|()| o.flush()).inspect_err(seen)
}

/// One object of a stream on stdout as a line of JSON Lines, with its
/// `schema_version`, flushed.
pub fn json_line<T: serde::Serialize + ?Sized>(t: &T) -> std::io::Result<()> {
    let line = serde_json::to_string(&pileup_output::versioned(t)).map_err(std::io::Error::from)?;
    out_line(format_args!("{line}"))
}

/// One diagnostic line on stderr. Never fails: a closed stderr marks the
/// reader gone and asks the run to stop.
pub fn note_line(args: fmt::Arguments) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.write_all(b"\n")).inspect_err(seen_on_stderr);
}

/// Text on stderr without a newline (a prompt, a line redrawn in place).
pub fn note_raw(args: fmt::Arguments) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.flush()).inspect_err(seen_on_stderr);
}

/// Write a result to `path`, or to stdout when there is none (a binary
/// format was refused for a terminal by [`targets`], before any work).
pub fn write_output(path: Option<&Path>, f: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    match path {
        None => {
            let mut w = Stdout::new();
            f(&mut w)?;
            w.flush()?;
            Ok(())
        }
        Some(p) => pileup_files::write_private(p, f),
    }
}

pub use pileup_output::{Format, Options};

/// The formats each command writes, the first being its default: `--format`
/// offers exactly these (in `--help`, the manual and completions) and an
/// `-o` name whose extension asks for another is refused before any work.
pub fn formats_of(command: &str) -> &'static [Format] {
    use Format::*;
    match command {
        "stacks" | "locks" => &[Text, Json, Folded, Svg, Dot, Pprof],
        "lag" | "memory" => &[Text, Json, Folded, Svg, Dot, Pprof],
        "digest" | "report" => &[Text, Json, Html],
        "bench" => &[Text, Json, Svg],
        _ => &[Text, Json],
    }
}

/// `--format` for a command: its formats as clap's possible values, so an
/// unknown or unsupported one is a usage error, and help, manual pages and
/// completions list them.
/// `files`: whether the command's `-o` names a file of the result (its
/// extension then chooses the format). Each format's other names
/// (`pmp`, `collapsed`, `flamegraph`, `graphviz`, `txt`) and any case are
/// taken too.
pub fn format_arg(command: &str, files: bool, a: clap::Arg) -> clap::Arg {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let fs = formats_of(command);
    let values: Vec<PossibleValue> =
        fs.iter().map(|f| PossibleValue::new(f.name()).help(f.describe()).aliases(f.aliases())).collect();
    let described: Vec<String> = fs.iter().map(|f| format!("{} ({})", f.name(), f.describe())).collect();
    let default = if files { "Default: from the -o extension, else text" } else { "Default: text" };
    let help = format!("Output format: {}. {default}", described.join(", "));
    // Every listed name parses; the default is never reached.
    a.value_parser(PossibleValuesParser::new(values).map(|s| Format::parse(&s).unwrap_or(Format::Text)))
        .ignore_case(true)
        .help(help.clone())
        .long_help(help)
}

/// `-f/--format`, `-o` and `--json`, the same for every tool that writes a
/// report: flattened into its arguments. `--format`'s values are set per
/// command by [`format_arg`].
#[derive(clap::Args)]
pub struct OutputArgs {
    /// Output format. Default: from the -o extension, else text.
    #[arg(long, short = 'f', value_parser = parse_format)]
    pub format: Option<Format>,
    /// Write to this file (created 0600) instead of stdout, in the format
    /// its extension names (.txt, .json, and where the command writes them
    /// .html, .folded, .svg, .dot, .pb.gz). Give -o several times to write
    /// one run in several formats.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Vec<PathBuf>,
    /// The same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
}

/// `-f/--format` and `--json` for a command whose results go to stdout
/// only (events, a listing, a status).
#[derive(clap::Args)]
pub struct FormatArgs {
    /// Output format. Default: text.
    #[arg(long, short = 'f', value_parser = parse_format)]
    pub format: Option<Format>,
    /// The same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
}

impl FormatArgs {
    /// Whether JSON was asked for.
    pub fn json(&self) -> bool {
        self.json || self.format == Some(Format::Json)
    }

    /// The format asked for: `--json`, else `--format`, else text.
    pub fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            self.format.unwrap_or(Format::Text)
        }
    }
}

/// A `--format` value (before [`format_arg`] narrows it per command).
pub fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s).map_err(|e| e.to_string())
}

impl OutputArgs {
    /// The format asked for: `--json`, else `--format`.
    pub fn format(&self) -> Option<Format> {
        if self.json {
            Some(Format::Json)
        } else {
            self.format
        }
    }

    /// Where `command`'s report goes, checked before any work.
    pub fn targets(&self, command: &str) -> Result<Vec<Target>> {
        targets(self.format(), &self.output, command)
    }
}

/// One place a result goes (a file, or stdout) and its format.
pub type Target = (Option<PathBuf>, Format);

/// The first target whose format is drawn from stacks (anything but text
/// and JSON), for a run that may have none.
pub fn stack_format(targets: &[Target]) -> Option<Format> {
    targets.iter().map(|(_, f)| *f).find(|f| !matches!(f, Format::Text | Format::Json))
}

/// Where a result goes and in which format: each `-o` file in the format
/// its extension names (or `--format`'s, when there is one file), or
/// stdout in `--format`'s (text by default). Decided before any work
/// starts, so a bad name costs nothing; one run can write several files.
/// An extension that contradicts `--format`, or names a format `command`
/// does not write, is a usage error.
pub fn targets(format: Option<Format>, outputs: &[PathBuf], command: &str) -> Result<Vec<Target>> {
    let supported = formats_of(command);
    let check = |f: Format, p: Option<&Path>| -> Result<Format> {
        if supported.contains(&f) {
            return Ok(f);
        }
        let names: Vec<&str> = supported.iter().map(|f| f.name()).collect();
        let what = p.map(|p| format!("-o {}: ", p.display())).unwrap_or_default();
        Err(Usage::new(format!("{what}pileup {command} does not write {f}; it writes {}", names.join(", "))).into())
    };
    let of_path = |p: &Path| Format::from_path(p).map_err(|e| anyhow::Error::from(Usage::new(e.to_string())));
    let to_terminal = |f: Format| -> Result<Format> {
        if f.is_binary() && std::io::stdout().is_terminal() {
            return Err(Usage::new(format!("{f} is binary; write it to a file with -o FILE")).into());
        }
        Ok(f)
    };
    match (format, outputs) {
        (f, []) => Ok(vec![(None, to_terminal(check(f.unwrap_or(Format::Text), None)?)?)]),
        (Some(f), [one]) => {
            let f = check(f, None)?;
            // A name without a recognised extension takes --format's.
            match Format::from_path(one) {
                Ok(named) if named != f && one.extension().is_some() => Err(Usage::new(format!(
                    "-o {} names {named} but --format says {f}; name the file .{} or drop --format",
                    one.display(),
                    f.extension()
                ))
                .into()),
                _ => Ok(vec![(Some(one.clone()), f)]),
            }
        }
        (Some(_), _) => Err(Usage::new(
            "--format applies to one output; with several -o files each file's extension names its format",
        )
        .into()),
        (None, many) => many.iter().map(|p| Ok((Some(p.clone()), check(of_path(p)?, Some(p))?))).collect(),
    }
}

/// Write a tool's result to every target.
pub fn emit<R: pileup_output::Report>(r: &R, targets: &[Target], o: &Options) -> Result<()> {
    for (path, format) in targets {
        write_output(path.as_deref(), |w| Ok(pileup_output::render(r, *format, o, w)?))?;
    }
    Ok(())
}

/// The one sink of a long run's events: under `--json` each is a line of
/// JSON Lines on stdout; otherwise its text is a line on stderr and its
/// progress moves a bar (on a terminal only). Diagnostics (notes,
/// warnings) are lines on stderr either way.
pub struct Sink {
    json: bool,
    bar: Option<indicatif::ProgressBar>,
    rows: u64,
}

impl Sink {
    /// A sink for `json` or text; `bar`: the progress bar's indicatif
    /// template, drawn when stderr is a terminal and JSON was not asked for.
    pub fn new(json: bool, bar: Option<&str>) -> Sink {
        let bar = bar.filter(|_| !json && std::io::stderr().is_terminal()).map(|t| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template(t)
                    .expect("progress templates are literals")
                    .progress_chars("=> "),
            );
            b
        });
        Sink { json, bar, rows: 0 }
    }

    /// Draw the bar among `bars`, beside bars the sink does not draw (the
    /// debuginfod downloads', one per file, made on the fetching threads),
    /// so that neither draws over the other.
    pub fn among(mut self, bars: &indicatif::MultiProgress) -> Sink {
        self.bar = self.bar.take().map(|b| bars.add(b));
        self
    }

    /// One event. A reader of stdout gone does not stop the work here: the
    /// run finishes what it writes (nothing half-written is left) and then
    /// ends quietly.
    pub fn event<N: pileup_output::News + ?Sized>(&mut self, n: &N) {
        let diagnostic = n.diagnostic();
        if self.json && !diagnostic {
            let _ = json_line(n);
        }
        if let Some(b) = &self.bar {
            let p = n.progress();
            if let Some(t) = p.total {
                b.set_length(t);
            }
            if let Some(d) = p.done {
                b.set_position(d);
            }
            if p.advance > 0 {
                b.inc(p.advance);
            }
            self.rows += p.rows;
            match p.doing {
                Some(what) => b.set_message(what),
                None if p.rows > 0 => b.set_message(plural_rows(self.rows)),
                None => {}
            }
        }
        if self.json && !diagnostic {
            return;
        }
        if let Some(line) = n.text() {
            match &self.bar {
                Some(b) => b.println(line),
                None => note_line(format_args!("{line}")),
            }
        }
    }

    /// The run's result, once the work is done: its JSON line, or its text
    /// on stdout.
    pub fn result<N: pileup_output::News + ?Sized>(&mut self, n: &N) -> Result<()> {
        self.finish();
        if self.json {
            json_line(n)?;
        } else if let Some(line) = n.text() {
            out_line(format_args!("{line}"))?;
        }
        Ok(())
    }

    /// Clear the bar (the work is done, or failed).
    pub fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.finish();
    }
}

fn plural_rows(n: u64) -> String {
    pileup_output::plural(n, "row", "rows")
}
