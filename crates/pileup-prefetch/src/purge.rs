//! `--defer-purge`: hold InnoDB's purge off while the replica catches up.
//!
//! Every row the applier updates leaves an old version and, for each
//! changed secondary-index column, a delete-marked index entry; purge
//! removes them about a second later. On an I/O-bound replica the pages it
//! needs for that (the row's primary-key leaf, the old entry's index leaf)
//! have been evicted again by then, so purge reads them back, and it holds
//! their latches while it changes them — the same pages the applier is
//! busy with. Measured (bench/prefetch, 128 MB pool, oltp_update_index):
//! purge made ~1.2 of the ~3 buffer-pool reads per applied transaction,
//! and the plain applier ran ~40% faster with purge held off.
//!
//! An open read view keeps purge from removing anything committed after
//! it, so holding one (`START TRANSACTION WITH CONSISTENT SNAPSHOT`, which
//! takes no locks) while the replica lags moves that work to after the
//! catch-up, when the applier no longer competes with it. The cost is the
//! history list (undo log) growing meanwhile: the hold is released when
//! the history reaches a cap, when the replica stops lagging, and when
//! pileup exits (the server ends the transaction when the connection
//! closes, even if pileup is killed).

use crate::error::{PrefetchError, Result};
use mysql::prelude::Queryable;

/// What to do with the hold, given where things stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Hold,
    Release(Why),
    Keep,
}

/// Why a hold ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The replica no longer lags (or its SQL thread stopped).
    CaughtUp,
    /// The history list reached the cap.
    HistoryCap,
}

/// The rule, a pure function: hold while lagging and the history is below
/// the cap; after a release at the cap, hold again only once purge has
/// brought the history below half of it (so the hold does not flap at the
/// cap, and purge gets to work off a real share of what piled up).
pub fn decide(held: bool, lagging: bool, history: u64, cap: u64) -> Action {
    match (held, lagging) {
        (true, false) => Action::Release(Why::CaughtUp),
        (true, true) if history >= cap => Action::Release(Why::HistoryCap),
        (false, true) if history < cap / 2 => Action::Hold,
        _ => Action::Keep,
    }
}

pub use pileup_replica::history::history_length;

/// A connection that holds a read view while the replica lags.
pub struct PurgeHold {
    conn: mysql::Conn,
    cap: u64,
    /// When the read view was taken (None: not holding).
    since: Option<std::time::Instant>,
}

impl PurgeHold {
    pub fn new(mut conn: mysql::Conn, cap: u64) -> Result<Self> {
        // Checked up front: a server without the figure cannot be bounded.
        history_length(&mut conn)?;
        conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")?;
        Ok(PurgeHold { conn, cap, since: None })
    }

    pub fn held(&self) -> bool {
        self.since.is_some()
    }

    /// How long the current hold has lasted (zero when not holding).
    pub fn held_for(&self) -> std::time::Duration {
        self.since.map(|t| t.elapsed()).unwrap_or_default()
    }

    /// Look at the history and hold or release; returns the history length
    /// and what was done.
    pub fn step(&mut self, lagging: bool) -> Result<(u64, Action)> {
        let history = history_length(&mut self.conn)?;
        let action = decide(self.held(), lagging, history, self.cap);
        match action {
            Action::Hold => {
                self.conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")?;
                self.since = Some(std::time::Instant::now());
            }
            Action::Release(_) => self.release()?,
            Action::Keep => {}
        }
        Ok((history, action))
    }

    /// End the hold, if any.
    pub fn release(&mut self) -> Result<()> {
        if self.since.take().is_some() {
            self.conn.query_drop("COMMIT")?;
        }
        Ok(())
    }
}

/// `--defer-purge` inside the prefetch loop: looks four times a second,
/// keeps the counters, and survives the replica going away (the server
/// ended the hold with the connection; a new one is made at the next look).
pub struct Deferral {
    spec: pileup_conn::ConnSpec,
    cap: u64,
    hold: Option<PurgeHold>,
    last: Option<std::time::Instant>,
    failed: bool,
    /// Said once that a long history keeps the hold off.
    told_long: bool,
}

impl Deferral {
    pub fn new(spec: &pileup_conn::ConnSpec, cap: u64) -> Result<Self> {
        let hold = PurgeHold::new(spec.connect()?, cap).map_err(|e| PrefetchError::DeferPurge(Box::new(e)))?;
        Ok(Deferral { spec: spec.clone(), cap, hold: Some(hold), last: None, failed: false, told_long: false })
    }

    pub fn tick(&mut self, lagging: bool, counters: &crate::metrics::Counters, say: &crate::config::Say) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.last.is_some_and(|t| t.elapsed() < std::time::Duration::from_millis(250)) {
            return;
        }
        self.last = Some(std::time::Instant::now());
        if self.hold.is_none() {
            self.hold = self.spec.connect().ok().and_then(|c| PurgeHold::new(c, self.cap).ok());
        }
        let Some(h) = self.hold.as_mut() else { return };
        // Measured before the step, which may end the hold.
        let held_for = h.held_for();
        match h.step(lagging) {
            Ok((history, action)) => {
                self.failed = false;
                counters.history_length.store(history, Relaxed);
                match action {
                    Action::Hold => {
                        counters.purge_holds.fetch_add(1, Relaxed);
                        tracing::debug!(history, "holding purge off");
                    }
                    Action::Release(why) => {
                        if why == Why::HistoryCap {
                            counters.purge_released_at_cap.fetch_add(1, Relaxed);
                            say(format!("the history list reached {history} (--defer-purge cap {}): letting purge run until it is below half of that", self.cap));
                        }
                        counters.purge_held_ms.fetch_add(held_for.as_millis() as u64, Relaxed);
                        tracing::debug!(history, ?why, "purge released");
                    }
                    Action::Keep => {
                        if lagging && !h.held() && history >= self.cap / 2 && !self.told_long {
                            self.told_long = true;
                            say(format!(
                                "--defer-purge: the history list is already {history} (half the cap of {} or more): purge runs until it is below that",
                                self.cap
                            ));
                        }
                    }
                }
            }
            Err(e) => {
                if !self.failed {
                    say(format!(
                        "--defer-purge lost its connection ({}); purge runs until it is back",
                        pileup_conn::error_text(&e)
                    ));
                }
                self.failed = true;
                // The server ended the hold with the connection.
                counters.purge_held_ms.fetch_add(held_for.as_millis() as u64, Relaxed);
                self.hold = None;
            }
        }
        counters.purge_held.store(u64::from(self.hold.as_ref().is_some_and(|h| h.held())), Relaxed);
    }

    /// Let purge run again (on exit).
    pub fn finish(&mut self, counters: &crate::metrics::Counters) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(h) = self.hold.as_mut() {
            // A failed COMMIT still ends the hold: the connection goes with us.
            let held_for = h.held_for();
            let _ = h.release();
            counters.purge_held_ms.fetch_add(held_for.as_millis() as u64, Relaxed);
        }
        counters.purge_held.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_while_lagging_below_the_cap() {
        assert_eq!(decide(false, true, 0, 1000), Action::Hold);
        assert_eq!(decide(true, true, 999, 1000), Action::Keep);
        assert_eq!(decide(false, false, 0, 1000), Action::Keep, "no lag: nothing to hold for");
    }

    #[test]
    fn releases_when_caught_up_or_at_the_cap() {
        assert_eq!(decide(true, false, 10, 1000), Action::Release(Why::CaughtUp));
        assert_eq!(decide(true, true, 1000, 1000), Action::Release(Why::HistoryCap));
        assert_eq!(decide(true, false, 5000, 1000), Action::Release(Why::CaughtUp));
    }

    #[test]
    fn holds_again_only_below_half_the_cap() {
        // Released at the cap: purge must bring the history down first.
        assert_eq!(decide(false, true, 900, 1000), Action::Keep);
        assert_eq!(decide(false, true, 500, 1000), Action::Keep);
        assert_eq!(decide(false, true, 499, 1000), Action::Hold);
        // A server that already has a long history is not held at all.
        assert_eq!(decide(false, true, 2_000_000, 1000), Action::Keep);
    }
}
