//! When a followed log's window of minutes is complete and can be shipped.
//!
//! A statement is logged when it ends, with the time it began: a window's
//! rows go on arriving after the window ends, as long as its longest
//! statement ran. A window is closed `grace` after its end, by the log's
//! own time (the latest statement read) while a log is read faster than it
//! is written, and by the clock once the reader has caught up with the
//! file's end. Rows that come for a window already closed are shipped as a
//! part of their own (`…-10m-2.parquet`), never replacing what was shipped
//! by the same run.
//!
//! A log is read from its start by every run: a window's file holds what
//! an earlier run shipped for it, its later parts too, and replaces them
//! ([`Window::replaces`]). performance_schema is read from the run's start
//! on: the window a run joins holds only the minutes after it, and is
//! shipped under a name of its own ([`Window::from`]) beside the file of
//! the run before.

use std::collections::{BTreeMap, HashMap};

use crate::aggregate::Minutes;
use crate::class::Class;

/// A window's minutes, ready to ship.
#[derive(Debug)]
pub struct Window {
    /// The window's start (Unix seconds).
    pub start: i64,
    /// 0 for the window's file; 1, 2 … for rows that came after it was
    /// closed.
    pub part: u32,
    /// Its minutes' classes, by minute.
    pub minutes: BTreeMap<i64, HashMap<Box<[u8]>, Class>>,
    /// The run began within this window, at this time (Unix seconds):
    /// what came before is another run's.
    pub from: Option<i64>,
    /// Part 0 of a window of an input read from its start: it holds the
    /// rows of every part an earlier run shipped for the window.
    pub replaces: bool,
}

/// Which windows are closed, and how many parts each has had.
#[derive(Debug)]
pub struct Closer {
    window: i64,
    grace: i64,
    /// The latest minute a statement was read for.
    latest: Option<i64>,
    /// Windows closed, with the parts they had: kept for the whole run (a
    /// few bytes a window), so that a part's name is never used twice.
    closed: BTreeMap<i64, u32>,
    /// When the run began, if its input holds only what came after
    /// ([`Closer::joined`]).
    joined: Option<i64>,
}

impl Closer {
    /// Windows of `window_minutes` (see [`super::layout::window_minutes`]),
    /// closed `grace_s` seconds after their end.
    pub fn new(window_minutes: u32, grace_s: i64) -> Closer {
        Closer {
            window: i64::from(super::layout::window_minutes(window_minutes)) * 60,
            grace: grace_s.max(0),
            latest: None,
            closed: BTreeMap::new(),
            joined: None,
        }
    }

    /// The input holds only what comes from `at` (Unix seconds) on
    /// (performance_schema's counters, read from the run's start): the
    /// window `at` falls in is shipped under a name of its own, and no
    /// window replaces what an earlier run shipped.
    pub fn joined(&mut self, at: i64) {
        self.joined = Some(at);
    }

    fn start_of(&self, minute: i64) -> i64 {
        minute - minute.rem_euclid(self.window)
    }

    /// Take the windows of `minutes` that are closed: those that ended
    /// `grace` before the latest statement read, or before `now` (Unix
    /// seconds) when `caught_up` (the reader is at the log's end), and
    /// every minute of a window closed earlier.
    pub fn take(&mut self, minutes: &mut Minutes, caught_up: bool, now: i64) -> Vec<Window> {
        if let Some((&last, _)) = minutes.by_minute.last_key_value() {
            // A statement stamped in the future (a session's SET timestamp)
            // moves the log's time no further than the clock.
            let last = last.min(now - now.rem_euclid(60));
            self.latest = Some(self.latest.map_or(last, |l| l.max(last)));
        }
        // Statements are stamped at the minute's start: the log has
        // reached at least the minute's end.
        let log_now = self.latest.map_or(i64::MIN, |l| l + 60);
        let clock = if caught_up { now } else { i64::MIN };
        self.take_until(minutes, log_now.max(clock).saturating_sub(self.grace))
    }

    /// Take every minute of windows that end by `horizon` or closed
    /// earlier.
    fn take_until(&mut self, minutes: &mut Minutes, horizon: i64) -> Vec<Window> {
        let due: Vec<i64> = minutes
            .by_minute
            .keys()
            .copied()
            .filter(|&m| {
                let start = self.start_of(m);
                start + self.window <= horizon || self.closed.contains_key(&start)
            })
            .collect();
        let mut out: BTreeMap<i64, Window> = BTreeMap::new();
        for m in due {
            let start = self.start_of(m);
            let classes = minutes.by_minute.remove(&m).expect("listed");
            let from = self.joined.filter(|&j| self.start_of(j) == start && j > start);
            let replaces = self.joined.is_none();
            let w =
                out.entry(start).or_insert_with(|| Window { start, part: 0, minutes: BTreeMap::new(), from, replaces });
            w.minutes.insert(m, classes);
        }
        for w in out.values_mut() {
            let parts = self.closed.entry(w.start).or_insert(0);
            w.part = *parts;
            w.replaces &= w.part == 0;
            *parts += 1;
        }
        out.into_values().collect()
    }

    /// Every window left, at the end of the input.
    pub fn rest(&mut self, minutes: &mut Minutes) -> Vec<Window> {
        self.take_until(minutes, i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minutes(at: &[i64]) -> Minutes {
        let mut m = Minutes::default();
        for &t in at {
            let c = Class::new(b"select ?".to_vec().into());
            m.by_minute.entry(t).or_default().insert(c.fingerprint.clone(), c);
        }
        m
    }

    const T: i64 = 1_796_011_200; // 04:00

    #[test]
    fn a_window_closes_by_the_log_s_time_while_it_is_read_faster_than_written() {
        let mut c = Closer::new(10, 120);
        // 04:00 … 04:10 read from history: the clock is far ahead, but the
        // reader is not caught up, so only the log's time counts.
        let mut m = minutes(&[T, T + 300, T + 600]);
        assert!(c.take(&mut m, false, T + 86_400).is_empty());
        // 04:11 read: the log is at 04:12, two minutes after 04:00-04:10 ended.
        m.by_minute.extend(minutes(&[T + 660]).by_minute);
        let w = c.take(&mut m, false, T + 86_400);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].start, w[0].part), (T, 0));
        assert_eq!(w[0].minutes.keys().copied().collect::<Vec<_>>(), vec![T, T + 300]);
        assert_eq!(m.by_minute.keys().copied().collect::<Vec<_>>(), vec![T + 600, T + 660]);
    }

    #[test]
    fn a_caught_up_reader_closes_by_the_clock_and_late_rows_make_a_part() {
        let mut c = Closer::new(10, 120);
        let mut m = minutes(&[T + 60]);
        assert!(c.take(&mut m, true, T + 600 + 119).is_empty());
        let w = c.take(&mut m, true, T + 600 + 120);
        assert_eq!((w.len(), w[0].start, w[0].part), (1, T, 0));
        // A long statement that began at 04:05 is logged at 04:13: its
        // window's second part, at once.
        let mut late = minutes(&[T + 300]);
        let w = c.take(&mut late, true, T + 780);
        assert_eq!((w.len(), w[0].start, w[0].part), (1, T, 1));
        assert!(late.by_minute.is_empty());
    }

    #[test]
    fn a_statement_stamped_in_the_future_closes_nothing_early_and_old_windows_keep_their_parts() {
        let mut c = Closer::new(10, 120);
        let now = T + 300;
        let mut m = minutes(&[T, T + 365 * 86_400]);
        // The future minute is not a reason to close 04:00-04:10.
        let w = c.take(&mut m, true, now);
        assert!(w.iter().all(|w| w.start != T), "{w:?}");
        // A window closed long ago gets a new part, never part 0 again.
        let mut c = Closer::new(10, 0);
        let mut m = minutes(&[T]);
        assert_eq!(c.take(&mut m, true, T + 600)[0].part, 0);
        let mut late = minutes(&[T]);
        assert_eq!(c.take(&mut late, true, T + 10 * 86_400)[0].part, 1);
    }

    #[test]
    fn a_read_log_s_first_part_replaces_and_a_joined_window_is_named_by_its_start() {
        let mut c = Closer::new(10, 0);
        let w = c.take(&mut minutes(&[T]), true, T + 600);
        assert!(w[0].replaces && w[0].from.is_none());
        let w = c.take(&mut minutes(&[T]), true, T + 700);
        assert!(!w[0].replaces && w[0].part == 1);
        // performance_schema from 04:25:30 on: 04:20-04:30 is this run's
        // from then; 04:30-04:40 is whole, but replaces nothing.
        let mut c = Closer::new(10, 0);
        c.joined(T + 1530);
        let w = c.take(&mut minutes(&[T + 1500, T + 1800]), true, T + 2400);
        let got: Vec<_> = w.iter().map(|w| (w.start - T, w.from.map(|f| f - T), w.replaces)).collect();
        assert_eq!(got, vec![(1200, Some(1530), false), (1800, None, false)]);
        // A run that joins at a window's start holds all of it.
        let mut c = Closer::new(10, 0);
        c.joined(T + 1800);
        assert_eq!(c.take(&mut minutes(&[T + 1800]), true, T + 2400)[0].from, None);
    }

    #[test]
    fn the_end_of_the_input_closes_every_window() {
        let mut c = Closer::new(10, 120);
        let mut m = minutes(&[T, T + 600, T + 1200]);
        let w = c.rest(&mut m);
        assert_eq!(w.iter().map(|w| (w.start - T, w.part)).collect::<Vec<_>>(), vec![(0, 0), (600, 0), (1200, 0)]);
        assert!(m.by_minute.is_empty());
    }
}
