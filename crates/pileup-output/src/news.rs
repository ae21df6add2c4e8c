//! What a long run says as it goes: typed events, each able to say itself
//! as JSON (a line of JSON Lines), as a line a person reads, and as a move
//! of a progress bar. Libraries define their events and hand them to a
//! callback; the program's one sink decides where each goes (ripgrep's
//! `Sink`, with the printers in the program).

use serde::Serialize;

/// An event of a long run.
pub trait News: Serialize {
    /// The line a person reads (on stderr, above any progress bar);
    /// `None` when the bar alone shows it.
    fn text(&self) -> Option<String> {
        None
    }
    /// How it moves the progress bar.
    fn progress(&self) -> Progress {
        Progress::None
    }
}

/// How an event moves a progress bar.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Not at all.
    None,
    /// The size of the work is known now (in the bar's unit: bytes or steps).
    Total(u64),
    /// This much more is done, holding `rows` rows (shown beside the bar).
    Advance {
        /// In the bar's unit.
        by: u64,
        /// Rows in it; 0 when the work is not rows.
        rows: u64,
    },
    /// This much is done in all.
    At(u64),
    /// What is under way now, shown beside the bar.
    Doing(String),
}
