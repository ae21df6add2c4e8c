//! The window ahead of the applier: the events read and not yet applied,
//! with the keys issued for them and the transactions they start. The
//! prefetcher reads on only while the window has room (events, keys, and
//! seconds of primary time), forgets what the applier has passed, and
//! stops at DDL until the applier has run it.
//!
//! The key limit keeps warmed pages from being evicted before the applier
//! gets to them (see [`default_keys`]).

use std::collections::VecDeque;
use std::path::Path;

/// A relay log position, ordered across files: (file number, offset).
pub type RelayPos = (u64, u64);

pub fn relay_pos(p: &Path, offset: u64) -> RelayPos {
    (pileup_binlog::reader::file_number(p).unwrap_or(0), offset)
}

/// How far ahead of the applier the prefetcher may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub events: u64,
    pub keys: u64,
    /// Seconds of primary time between the oldest and newest event.
    pub secs: u32,
}

/// The key limit when none is given: a quarter of the buffer pool's old
/// sublist, in pages. A page read ahead enters the LRU's old sublist and,
/// if not touched again within innodb_old_blocks_time, is evicted from
/// there; everyone else's reads enter it too (the applier's misses,
/// purge), and dirty pages in it cannot be evicted. At half the sublist,
/// about a quarter of the warmed pages were evicted unused (bench/prefetch).
pub fn default_keys(pool_bytes: u64, page_bytes: u64, old_blocks_pct: u64) -> u64 {
    (pool_bytes / page_bytes.max(1) * old_blocks_pct / 100 / 4).max(64)
}

#[derive(Debug, Clone, Copy)]
struct Ahead {
    /// Relay position just after the event.
    end: RelayPos,
    /// The primary's timestamp of the event.
    ts: u32,
    /// Keys issued for it.
    keys: u64,
    /// It starts a transaction (a GTID event).
    trx_start: bool,
}

#[derive(Debug)]
pub struct Window {
    limits: Limits,
    events: VecDeque<Ahead>,
    keys: u64,
    trx: u64,
    /// A DDL statement was read: read no further until the applier has run it.
    ddl_pending: bool,
}

impl Window {
    pub fn new(limits: Limits) -> Window {
        Window { limits, events: VecDeque::new(), keys: 0, trx: 0, ddl_pending: false }
    }

    /// An event was read; it ends at `end`.
    pub fn push(&mut self, end: RelayPos, ts: u32, trx_start: bool) {
        self.events.push_back(Ahead { end, ts, keys: 0, trx_start });
        self.trx += u64::from(trx_start);
    }

    /// Keys were issued for the newest event.
    pub fn add_keys(&mut self, n: u64) {
        if let Some(last) = self.events.back_mut() {
            last.keys += n;
            self.keys += n;
        }
    }

    /// The newest event is DDL.
    pub fn ddl_read(&mut self) {
        self.ddl_pending = true;
    }

    /// The applier is at `applier`: forget the events it has passed.
    /// Returns true when a DDL statement it waited at is now applied (table
    /// definitions must be read again).
    pub fn advance(&mut self, applier: RelayPos) -> bool {
        while self.events.front().is_some_and(|a| a.end <= applier) {
            if let Some(a) = self.events.pop_front() {
                self.keys -= a.keys;
                self.trx -= u64::from(a.trx_start);
            }
        }
        let ddl_done = self.ddl_pending && self.events.is_empty();
        if ddl_done {
            self.ddl_pending = false;
        }
        ddl_done
    }

    /// Start again empty (the reader jumped to the applier).
    pub fn clear(&mut self) {
        self.events.clear();
        self.keys = 0;
        self.trx = 0;
    }

    /// Start again empty, with no DDL pending (the replica restarted).
    pub fn reset(&mut self) {
        self.clear();
        self.ddl_pending = false;
    }

    /// No room to read further: a limit is reached or DDL is pending.
    pub fn is_full(&self) -> bool {
        let secs = match (self.events.front(), self.events.back()) {
            (Some(a), Some(b)) => b.ts.saturating_sub(a.ts),
            _ => 0,
        };
        self.ddl_pending
            || self.events.len() as u64 >= self.limits.events
            || self.keys >= self.limits.keys
            || secs > self.limits.secs
    }

    /// Events read and not yet applied.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Keys issued for events the applier has not reached.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Transactions started in the window. With parallel replication the
    /// first few are already running in the workers: see
    /// [`Window::in_flight`].
    pub fn transactions(&self) -> u64 {
        self.trx
    }

    /// Is the newest event within the first `in_flight_trx` transactions
    /// ahead (ones parallel workers may already be running: reads for them
    /// come too late)?
    pub fn in_flight(&self, in_flight_trx: u64) -> bool {
        self.trx <= in_flight_trx
    }

    /// The number of the event the applier is about to apply, given that
    /// the newest event read is number `newest` (past all read when the
    /// window is empty).
    pub fn applier_seq(&self, newest: u64) -> u64 {
        newest + 1 - self.events.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { events: 4, keys: 10, secs: 30 };

    #[test]
    fn the_applier_passing_frees_room() {
        let mut w = Window::new(LIMITS);
        for (i, trx) in [(100, true), (200, false), (300, true)] {
            w.push((1, i), 1000, trx);
            w.add_keys(3);
        }
        assert_eq!((w.len(), w.keys(), w.transactions()), (3, 9, 2));
        assert!(!w.is_full());
        assert_eq!(w.applier_seq(3), 1, "the applier has applied nothing read");
        assert!(!w.advance((1, 150)), "the applier is inside the second event");
        assert_eq!((w.len(), w.keys(), w.transactions()), (2, 6, 1));
        assert_eq!(w.applier_seq(3), 2);
        w.advance((2, 4));
        assert!(w.is_empty() && w.keys() == 0 && w.transactions() == 0, "a later file is past every event");
        assert_eq!(w.applier_seq(3), 4, "past everything read");
    }

    #[test]
    fn full_by_events_keys_seconds_or_ddl() {
        let mut w = Window::new(LIMITS);
        for i in 0..4 {
            w.push((1, i), 1000, false);
        }
        assert!(w.is_full(), "four events");
        let mut w = Window::new(LIMITS);
        w.push((1, 1), 1000, false);
        w.add_keys(10);
        assert!(w.is_full(), "ten keys");
        let mut w = Window::new(LIMITS);
        w.push((1, 1), 1000, false);
        w.push((1, 2), 1030, false);
        assert!(!w.is_full(), "thirty seconds is within the limit");
        w.push((1, 3), 1031, false);
        assert!(w.is_full(), "thirty-one seconds of primary time");
        let mut w = Window::new(LIMITS);
        w.push((1, 1), 1000, false);
        w.ddl_read();
        assert!(w.is_full(), "DDL waits for the applier");
        assert!(!w.advance((1, 0)), "not applied yet");
        assert!(w.advance((1, 1)), "applied: tables are read again");
        assert!(!w.is_full());
    }

    #[test]
    fn in_flight_transactions_and_reset() {
        let mut w = Window::new(LIMITS);
        w.push((1, 1), 1000, true);
        assert!(w.in_flight(2), "the first transaction ahead may be running in a worker");
        w.push((1, 2), 1000, true);
        w.push((1, 3), 1000, true);
        assert!(!w.in_flight(2), "the third is past two per worker");
        w.ddl_read();
        w.clear();
        assert!(w.is_full(), "a jump keeps a pending DDL");
        w.reset();
        assert!(w.is_empty() && !w.is_full() && w.transactions() == 0);
    }

    #[test]
    fn default_key_limit_is_a_quarter_of_the_old_sublist() {
        // 128 MiB of 16 KiB pages, 37% old: 8192 * 37 / 100 / 4.
        assert_eq!(default_keys(128 << 20, 16384, 37), 757);
        assert_eq!(default_keys(1 << 20, 16384, 5), 64, "never below 64");
    }
}
