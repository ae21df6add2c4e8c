//! What a tool's result offers the formats.

use std::io::Write;

use serde::Serialize;

use crate::proto::PProfile;
use crate::stacks::Stacks;

/// Switches shared by the formats.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Text: only the primary lines (pt-pmp's, for stacks), no annotations.
    pub plain: bool,
    /// Text: how many of the first entries to show in detail (locks).
    pub detail: usize,
    /// Folded/svg/dot/pprof: root each stack at its thread's role or name,
    /// where the tool knows it.
    pub thread_root: bool,
    /// Dot: hide nodes under this share of the first value (percent).
    pub dot_min_pct: f64,
    /// A title in place of the tool's own (svg, dot).
    pub title: Option<String>,
}

/// A tool's result, as every format sees it.
pub trait Report: Serialize {
    /// The tool's name, for messages.
    fn tool(&self) -> &'static str;
    /// The tool's own text.
    fn text(&self, o: &Options, w: &mut dyn Write) -> std::io::Result<()>;
    /// Its stacks, root first and weighted; `None` when it has none.
    fn stacks(&self, _o: &Options) -> Option<Stacks> {
        None
    }
    /// A pprof profile richer than one built from [`Report::stacks`]
    /// (addresses and mappings), when the tool has one.
    fn pprof(&self, _o: &Options) -> Option<PProfile> {
        None
    }
    /// The tool's own picture (a plot), in place of a flame graph of its
    /// stacks; `None` when it draws none.
    fn svg(&self, _o: &Options, _w: &mut dyn Write) -> Option<std::io::Result<()>> {
        None
    }
    /// The tool's self-contained HTML page, when it writes one.
    fn html(&self, _o: &Options, _w: &mut dyn Write) -> Option<std::io::Result<()>> {
        None
    }
}
