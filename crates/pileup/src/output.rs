//! Writing results: to stdout, or to a file created 0600 (results hold query
//! text) through a temporary file renamed into place, so a full disk or a
//! crash never leaves a truncated file under the requested name. Paths that
//! are not regular files (`/dev/null`, FIFOs, symlinks) are written through.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

pub fn write_output(path: Option<&Path>, binary: bool, f: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    match path {
        None => {
            let stdout = std::io::stdout();
            if binary && stdout.is_terminal() {
                bail!("this format is binary; write it to a file with -o FILE");
            }
            // Buffered: stdout alone flushes at every newline, a system call
            // per line of a long report.
            let mut w = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
            f(&mut w)?;
            w.flush()?;
            Ok(())
        }
        Some(p) => pileup_files::write_private(p, f),
    }
}

pub use pileup_output::{Format, Options};

/// `--format`'s value parser: every tool takes the same names.
pub fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s).map_err(|e| e.to_string())
}

/// `-f/--format`, `-o` and `--json`, the same for every tool that writes a
/// report: flattened into its arguments.
#[derive(clap::Args)]
pub struct OutputArgs {
    /// Output format: text, json, and where the tool has stacks folded, svg
    /// (flame graph), dot (call graph) or pprof. Default: from the -o
    /// extension, else text.
    #[arg(long, short = 'f', value_parser = parse_format)]
    pub format: Option<Format>,
    /// Write to this file (created 0600) instead of stdout, in the format
    /// its extension names (.txt, .json, .folded, .svg, .dot, .pb.gz). Give
    /// -o several times to write one run in several formats.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Vec<PathBuf>,
    /// The same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
}

impl OutputArgs {
    /// Where the report goes, checked before any work.
    pub fn targets(&self) -> Result<Vec<Target>> {
        targets(if self.json { Some(Format::Json) } else { self.format }, &self.output)
    }
}

/// One place a result goes (a file, or stdout) and its format.
pub type Target = (Option<PathBuf>, Format);

/// Where a result goes and in which format: each `-o` file in the format
/// its extension names (or `--format`'s, when there is one file), or
/// stdout in `--format`'s (text by default). Decided before any work
/// starts, so a bad name costs nothing; one run can write several files.
pub fn targets(format: Option<Format>, outputs: &[PathBuf]) -> Result<Vec<Target>> {
    match (format, outputs) {
        (f, []) => Ok(vec![(None, f.unwrap_or(Format::Text))]),
        (Some(f), [one]) => Ok(vec![(Some(one.clone()), f)]),
        (Some(_), _) => {
            bail!("--format applies to one output; with several -o files each file's extension names its format")
        }
        (None, many) => many.iter().map(|p| Ok((Some(p.clone()), Format::from_path(p)?))).collect(),
    }
}

/// Write a tool's result to every target.
pub fn emit<R: pileup_output::Report>(r: &R, targets: &[Target], o: &Options) -> Result<()> {
    for (path, format) in targets {
        write_output(path.as_deref(), format.is_binary(), |w| Ok(pileup_output::render(r, *format, o, w)?))?;
    }
    Ok(())
}
