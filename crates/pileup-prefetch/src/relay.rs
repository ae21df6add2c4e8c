//! Following the relay log ahead of the applier ([`pileup_binlog::Follower`]
//! in the prefetcher's terms): start at the applier's position, read on into
//! the next file, read on after a corrupt event, and say when the reader
//! must go back to where the applier is (it fell behind, its file was
//! removed or replaced, or nothing sound follows a corrupt event).

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use pileup_binlog::{Follower, Format, RawEvent, Step};

use crate::config::Shared;
use crate::window::{relay_pos, RelayPos};

/// What reading on gave.
pub enum Read<'a> {
    /// An event, with its format description and the relay position
    /// just after it.
    Event(RawEvent<'a>, &'a Format, RelayPos),
    /// Read again at once (went on into the next file, or past a corrupt
    /// event).
    Again,
    /// Nothing to read now.
    Wait,
    /// No file open (until the next poll puts the reader at the applier).
    NoReader,
    /// The relay log cannot be read.
    Failed(pileup_binlog::ReadError),
}

#[derive(Default)]
pub struct Relay {
    follower: Option<Follower>,
    /// A corrupt event with nothing sound after it: go back to the applier.
    lost: bool,
}

impl Relay {
    /// Read on from `pos` in `file` (where the applier is). The file may
    /// not exist yet (relay logs being fetched anew): then nothing is read
    /// until the next jump.
    pub fn jump_to(&mut self, file: &Path, pos: u64) {
        self.follower = Follower::open_at(file, pos).ok();
        self.lost = false;
    }

    /// Read nothing until the next jump (the replica went away).
    pub fn forget(&mut self) {
        self.follower = None;
    }

    /// The position was lost at a corrupt event (the next poll goes back
    /// to the applier; that is not a jump over events the applier passed).
    pub fn lost(&self) -> bool {
        self.lost
    }

    pub fn path(&self) -> Option<&Path> {
        self.follower.as_ref().map(|f| f.path())
    }

    pub fn position(&self) -> Option<RelayPos> {
        self.follower.as_ref().map(|f| relay_pos(f.path(), f.position()))
    }

    /// Must the reader go back to the applier at `applier`? Yes when it
    /// reads nothing, when it is behind the applier with nothing read
    /// ahead, or when its file was removed under it (RESET SLAVE, relay
    /// logs purged and fetched anew after a restart with GTID, when the
    /// numbering starts again and the name may already hold other events).
    pub fn must_jump(&self, nothing_ahead: bool, applier: RelayPos) -> bool {
        match &self.follower {
            None => true,
            Some(_) if self.lost => true,
            Some(f) => (nothing_ahead && relay_pos(f.path(), f.position()) < applier) || f.replaced(),
        }
    }

    /// Read one step on; what happened besides events is counted and, the
    /// first few times, said.
    pub fn next(&mut self, sh: &Shared) -> Read<'_> {
        let Some(f) = self.follower.as_mut().filter(|_| !self.lost) else { return Read::NoReader };
        let c = &sh.counters;
        // Taken before the step: the event borrows the follower.
        let file = relay_pos(f.path(), 0).0;
        match f.step() {
            Step::Event(ev, fmt) => {
                let end = (file, ev.end());
                Read::Event(ev, fmt, end)
            }
            Step::End => Read::Wait,
            Step::Rotated => {
                c.files_followed.fetch_add(1, Relaxed);
                Read::Again
            }
            // Not a relay log it can read (or gone again, when a restart
            // purges relay logs): stay; the next poll follows the applier
            // once it moves on.
            Step::CannotFollow { next, error } => {
                if c.follow_errors.fetch_add(1, Relaxed) < 10 {
                    (sh.say)(format!(
                        "cannot follow the relay log into the next file ({}): {error}; waiting for the applier",
                        next.display()
                    ));
                }
                Read::Wait
            }
            Step::Corrupt { error, resumed_at: Some(at) } => {
                if c.corrupt_events.fetch_add(1, Relaxed) < 10 {
                    (sh.say)(format!("{error}; reading on at offset {at}"));
                }
                Read::Again
            }
            Step::Corrupt { error, resumed_at: None } => {
                if c.corrupt_events.fetch_add(1, Relaxed) < 10 {
                    (sh.say)(format!("{error}; reading on from the applier's position"));
                }
                self.lost = true;
                Read::NoReader
            }
            Step::Failed(e) => Read::Failed(e),
        }
    }
}
