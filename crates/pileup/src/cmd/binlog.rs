//! `pileup binlog`: print the events of binlog and relay log files, row
//! images decoded (a mysqlbinlog that speaks JSON).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use pileup_binlog::{print_event, Decoder, Follower, PrintFormat, Stats, Step};

#[derive(clap::Args)]
#[command(
    after_long_help = "Examples:\n  pileup binlog /var/lib/mysql/mariadb-bin.000042\n  pileup binlog --format json relay-bin.000007 | jq 'select(.type == \"Update_rows\")'\n  pileup binlog --follow --start-position 1234 relay-bin.000007\n\nRow images hold your data: treat the output like the files themselves."
)]
pub struct BinlogArgs {
    /// Binlog or relay log files, read in this order.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// text: one line per event and per row (images as JSON objects);
    /// json: JSON Lines, one object per event.
    #[command(flatten)]
    pub out: crate::output::FormatArgs,
    /// Start at this offset in the first file (an event boundary, e.g. Relay_Log_Pos).
    #[arg(long, value_name = "OFFSET")]
    pub start_position: Option<u64>,
    /// Keep reading as the server writes, and on into the next numbered file (like tail -f).
    #[arg(long)]
    pub follow: bool,
    /// Do not verify event checksums.
    #[arg(long)]
    pub no_verify: bool,
    /// Print no events: decode every event and row, then a summary (events
    /// by type, rows changed per table, decode speed). JSON with --format json.
    #[arg(long)]
    pub stats: bool,
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

pub fn run(a: BinlogArgs) -> Result<()> {
    let json = a.out.json();
    let mut r = Reader {
        out: crate::output::Stdout::new(),
        format: if json { PrintFormat::Json } else { PrintFormat::Text },
        stats_only: a.stats,
        dec: Decoder::new(),
        problems: 0,
        cut_short: vec![],
        stats: Stats::default(),
    };
    let t0 = std::time::Instant::now();
    for (i, path) in a.files.iter().enumerate() {
        let start = if i == 0 { a.start_position.unwrap_or(4) } else { 4 };
        let f = Follower::open_with(path, start, !a.no_verify).map_err(|e| {
            anyhow::anyhow!("{e}; give a binlog or relay log file (e.g. mariadb-bin.000001, relay-bin.000002)")
        })?;
        // Without --follow each file named is read to its end; with it, the
        // last one is followed on into the files the server writes next.
        let follow = a.follow && i + 1 == a.files.len();
        let f = if follow { f } else { f.one_file() };
        if !r.read(f, follow)? {
            return Ok(()); // the reader went away (| head)
        }
    }
    r.out.flush()?;
    if a.stats {
        r.stats.finish(t0.elapsed().as_secs_f64());
        let format = if json { crate::output::Format::Json } else { crate::output::Format::Text };
        crate::output::emit(&r.stats, &[(None, format)], &Default::default())?;
    }
    damaged(r.problems, &r.cut_short)
}

/// The files' events printed (or counted, with `--stats`) as they are
/// read, and what could not be read.
struct Reader {
    out: crate::output::Stdout,
    format: PrintFormat,
    /// `--stats`: events counted, not printed.
    stats_only: bool,
    dec: Decoder,
    /// Corrupt or undecodable events, each reported as it was met.
    problems: usize,
    /// Files that end inside an event.
    cut_short: Vec<String>,
    stats: Stats,
}

impl Reader {
    /// Read `f` to its end (with `follow`, on into the files the server
    /// writes next, for ever). False when the reader of the output went
    /// away.
    fn read(&mut self, mut f: Follower, follow: bool) -> Result<bool> {
        self.stats.files += 1;
        let (mut path, mut rotated) = (f.path().to_path_buf(), false);
        let mut name = file_name(&path);
        loop {
            if rotated {
                path = f.path().to_path_buf();
                name = file_name(&path);
                rotated = false;
            }
            match f.step() {
            Step::Event(ev, fmt) if self.stats_only => {
                if let Err(e) = self.dec.decode(fmt, ev.bytes).and_then(|e| self.stats.add(&ev, &e)) {
                    self.problems += 1;
                    note!("pileup: {}", pileup_binlog::reader::at(&ev, &path, e));
                }
            }
            Step::Event(ev, fmt) => {
                let decoded = self.dec.decode(fmt, ev.bytes);
                match print_event(&mut self.out, self.format, &path, &name, &ev, &decoded) {
                    Ok(None) => {}
                    Ok(Some(problem)) => {
                        self.problems += 1;
                        note!("pileup: {problem}");
                    }
                    Err(_) => return Ok(false), // the reader went away (| head)
                }
            }
            Step::Rotated => {
                self.stats.files += 1;
                rotated = true;
            }
            Step::End if follow => {
                let _ = self.out.flush();
                std::thread::sleep(Duration::from_millis(100));
            }
            Step::End => {
                let rest = f.trailing_bytes();
                if rest > 0 {
                    note!(
                        "pileup: {} ends inside an event at offset {} ({rest} bytes follow; still being written? --follow waits for the rest)",
                        path.display(),
                        f.position()
                    );
                    self.cut_short.push(name.clone());
                }
                break;
            }
            Step::Corrupt { error, resumed_at: Some(next) } => {
                self.problems += 1;
                note!("pileup: {error}; resynchronised at offset {next}");
            }
            Step::Corrupt { error, resumed_at: None } => {
                self.problems += 1;
                note!(
                    "pileup: {error}; cannot find the next event (checksums are off or the file ends): skipping the rest of {}",
                    path.display()
                );
                break;
            }
            Step::CannotFollow { next, error } => bail!(
                "cannot read on into {}: {error}; give a binlog or relay log file (e.g. mariadb-bin.000001, relay-bin.000002)",
                next.display()
            ),
            Step::Failed(e) => return Err(e).context("reading"),
        }
        }
        Ok(true)
    }
}

/// Exit status 3 when part of the input could not be read: everything
/// readable was printed (as digest does for a damaged log).
fn damaged(problems: usize, cut_short: &[String]) -> Result<()> {
    let mut damage = vec![];
    if problems > 0 {
        damage.push(format!(
            "{} reported above with {} offset",
            super::plural(problems, "corrupt or undecodable event", "corrupt or undecodable events"),
            if problems == 1 { "its" } else { "their" }
        ));
    }
    if !cut_short.is_empty() {
        let ends = if cut_short.len() == 1 { "ends" } else { "end" };
        damage.push(format!("{} {ends} inside an event (cut short, or still being written)", cut_short.join(", ")));
    }
    if !damage.is_empty() {
        return Err(super::Damaged(damage.join("; ")).into());
    }
    Ok(())
}
