//! `pileup-output`: every format every tool writes, in one place.
//!
//! A tool's result implements [`Report`]: its own text, its JSON (serde),
//! and, when it has stacks, those stacks as a [`Stacks`] (weighted frames,
//! root first). [`render`] then writes any [`Format`]:
//!
//! ```text
//! Report ─▶ text   (the tool's own: pt-pmp for stacks, lockstat-like for locks)
//!        ─▶ json   (serde)
//!        ─▶ Stacks ─▶ folded (FlameGraph, inferno, speedscope)
//!                  ─▶ svg    (flame graph, inferno)
//!                  ─▶ dot    (Graphviz call graph)
//!                  ─▶ pprof  (gzipped profile.proto, its sample types from the tool)
//!        ─▶ html, svg (documents the tool draws itself: a report page, a plot)
//! ```
//!
//! The same `-o` extensions mean the same format for every tool
//! ([`Format::from_path`]); a format a tool has no data for is an error
//! ([`OutputError::Unsupported`]), never a file of the wrong kind.

mod dot;
mod format;
pub mod proto;
mod report;
mod stacks;

use std::io::Write;

pub use format::{Format, OutputError, FORMATS};
pub use report::{Options, Report};
pub use stacks::{Stack, Stacks};

/// Write `r` in format `f`.
pub fn render<R: Report + ?Sized>(r: &R, f: Format, o: &Options, w: &mut dyn Write) -> Result<(), OutputError> {
    match f {
        Format::Text => r.text(o, w)?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, r).map_err(std::io::Error::from)?;
            writeln!(w)?;
        }
        Format::Pprof => match r.pprof(o) {
            Some(p) => proto::write_gz(&p, w)?,
            None => proto::write_gz(&stacks_of(r, f, o)?.pprof(), w)?,
        },
        Format::Folded => stacks_of(r, f, o)?.folded(w)?,
        Format::Svg => match r.svg(o, w) {
            Some(done) => done?,
            None => stacks_of(r, f, o)?.svg(o.title.as_deref(), w)?,
        },
        Format::Html => r.html(o, w).ok_or(OutputError::Unsupported { tool: r.tool(), format: f })??,
        Format::Dot => dot::dot(&stacks_of(r, f, o)?, o, w)?,
    }
    Ok(())
}

fn stacks_of<R: Report + ?Sized>(r: &R, format: Format, o: &Options) -> Result<Stacks, OutputError> {
    r.stacks(o).ok_or(OutputError::Unsupported { tool: r.tool(), format })
}
