//! Renderers: one function per output format, each reading a [`Profile`].
//!
//! * `pmp` — pt-pmp's text (`COUNT frame,frame,…`, innermost first, most
//!   frequent first), then `#` comment lines with annotations;
//! * `folded` — FlameGraph / inferno / speedscope input;
//! * `svg` — a flame graph (inferno);
//! * `dot` — a Graphviz call graph weighted by samples;
//! * `pprof` — gzipped profile.proto for `go tool pprof`, Pyroscope, Parca;
//! * `json` — everything, including annotations and capture statistics.

mod dot;
mod pmp;
pub mod pprof;

use std::io::Write;

use anyhow::Result;

use crate::Profile;

pub use dot::dot;
pub use pmp::pmp;
pub use pprof::{pprof, pprof_message};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// pt-pmp text: `COUNT frame,frame,…` innermost first, then `#` annotations.
    Pmp,
    /// Folded stacks for FlameGraph, inferno or speedscope.
    Folded,
    /// Flame graph (SVG).
    Svg,
    /// Graphviz call graph weighted by samples.
    Dot,
    /// Gzipped pprof profile (go tool pprof, Pyroscope, Parca).
    Pprof,
    /// Everything: stacks, annotations, lock owners, capture statistics.
    Json,
}

impl Format {
    /// Guess from an output file's extension.
    pub fn from_path(p: &std::path::Path) -> Option<Format> {
        match p.extension()?.to_str()? {
            "svg" => Some(Format::Svg),
            "dot" | "gv" => Some(Format::Dot),
            "pb" | "pprof" | "gz" => Some(Format::Pprof),
            "json" => Some(Format::Json),
            "folded" => Some(Format::Folded),
            _ => None,
        }
    }
}

/// Rendering switches shared by the formats.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// pmp: print only the pt-pmp lines, no `#` annotation section.
    pub plain: bool,
    /// folded/svg: root each stack at its thread role or name.
    pub thread_root: bool,
    /// dot: hide nodes under this share of samples (percent).
    pub dot_min_pct: f64,
    /// svg title.
    pub title: Option<String>,
}

pub fn render(p: &Profile, f: Format, o: &RenderOptions, w: &mut dyn Write) -> Result<()> {
    match f {
        Format::Pmp => pmp(p, o, w),
        Format::Folded => folded(p, o, w),
        Format::Svg => svg(p, o, w),
        Format::Dot => dot(p, o, w),
        Format::Pprof => pprof(p, w),
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, p)?;
            writeln!(w)?;
            Ok(())
        }
    }
}

pub fn folded(p: &Profile, o: &RenderOptions, w: &mut dyn Write) -> Result<()> {
    for (stack, n) in crate::aggregate::folded(p, o.thread_root) {
        writeln!(w, "{stack} {n}")?;
    }
    Ok(())
}

pub fn svg(p: &Profile, o: &RenderOptions, w: &mut dyn Write) -> Result<()> {
    use inferno::flamegraph::{self, Options};
    let lines: Vec<String> =
        crate::aggregate::folded(p, o.thread_root).into_iter().map(|(s, n)| format!("{s} {n}")).collect();
    let mut opts = Options::default();
    opts.title = o.title.clone().unwrap_or_else(|| default_title(p));
    opts.count_name = "thread samples".into();
    opts.subtitle = Some(subtitle(p));
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)?;
    Ok(())
}

pub(crate) fn default_title(p: &Profile) -> String {
    format!("pileup stacks: {} pid {}", p.exe, p.pid)
}

pub(crate) fn subtitle(p: &Profile) -> String {
    format!(
        "{} sample(s), {} thread stacks, {} mode; {:.0}% of frames named",
        p.stops.samples,
        p.thread_stacks,
        p.mode.name(),
        p.named_pct
    )
}
