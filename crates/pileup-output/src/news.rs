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
        Progress::none()
    }
    /// A diagnostic (a note, a warning, advice): its text goes to stderr
    /// whatever the format, and it is no event of a JSON stream.
    fn diagnostic(&self) -> bool {
        false
    }
}

/// How an event moves a progress bar: each part it says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// The size of the work, once known (in the bar's unit: bytes, steps,
    /// milliseconds).
    pub total: Option<u64>,
    /// Done in all, when the event says.
    pub done: Option<u64>,
    /// Done since the last event.
    pub advance: u64,
    /// Rows in `advance`, counted beside the bar; 0 when the work is not rows.
    pub rows: u64,
    /// What is under way now, shown beside the bar.
    pub doing: Option<String>,
}

impl Progress {
    /// No move.
    pub fn none() -> Progress {
        Progress::default()
    }
    /// The work's size is known now.
    pub fn total(total: u64) -> Progress {
        Progress { total: Some(total), ..Default::default() }
    }
    /// `by` more done, holding `rows` rows.
    pub fn advance(by: u64, rows: u64) -> Progress {
        Progress { advance: by, rows, ..Default::default() }
    }
    /// `done` in all, of `total` when known.
    pub fn at(done: u64, total: Option<u64>) -> Progress {
        Progress { done: Some(done), total, ..Default::default() }
    }
    /// What is under way now.
    pub fn doing(what: String) -> Progress {
        Progress { doing: Some(what), ..Default::default() }
    }
    /// This, with what is under way.
    pub fn and_doing(self, what: Option<String>) -> Progress {
        Progress { doing: what, ..self }
    }
}

/// Progress counted in steps or bytes, and nothing else to say: `done` of
/// `total` when it is known.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "event", rename = "progress")]
pub struct Step {
    /// Done so far.
    pub done: u64,
    /// The whole, when known.
    pub total: Option<u64>,
}

impl News for Step {
    fn progress(&self) -> Progress {
        Progress::at(self.done, self.total)
    }
}

/// What is under way, and nothing else to say: shown beside the bar or
/// spinner.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename = "doing")]
pub struct Doing {
    /// The work under way, in a few words.
    pub what: String,
}

impl News for Doing {
    fn progress(&self) -> Progress {
        Progress::doing(self.what.clone())
    }
}
