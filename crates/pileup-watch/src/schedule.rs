//! When captures may run: one at a time, a cooldown between them, a cap per
//! hour, none when the data directory's disk is nearly full; an early
//! capture (begun when a trigger's condition starts to hold, kept only if
//! the hold confirms it) at most once per [`EARLY_GAP`]; and each capture's
//! report rebuilt once the metrics after the stall are in.
//!
//! Time is given by the caller (monotonic seconds for the policy, the
//! poll's Unix time for the rebuilds), so the rules are tested without a
//! server or a clock.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

/// At most one early capture per this long: a metric or a pile-up that
/// flickers costs a stack sample or two a second (a dropped early capture
/// stops sampling), and a stall that begins just after a dropped one still
/// has its first stack within a second.
pub const EARLY_GAP: Duration = Duration::from_secs(1);

/// The capture policy's limits.
#[derive(Debug, Clone)]
pub struct Limits {
    pub cooldown: Duration,
    pub max_per_hour: usize,
    /// Free bytes the data directory must keep.
    pub min_free_bytes: u64,
    /// The data directory, as the disk guard names it.
    pub data_dir: String,
}

/// The schedule's state. `T` is what an early capture is confirmed or
/// dropped through (the watcher's channel to its capture thread).
#[derive(Debug)]
pub struct Scheduler<T> {
    limits: Limits,
    /// When the last capture counted started.
    last: Option<f64>,
    /// Captures counted in the last hour.
    recent: VecDeque<f64>,
    /// A capture is running.
    running: bool,
    /// The early capture running, for trigger number `.0`.
    early: Option<(usize, T)>,
    last_early: Option<f64>,
    /// Reports to rebuild: (due at Unix time, capture directory).
    rebuilds: Vec<(f64, PathBuf)>,
}

impl<T> Scheduler<T> {
    pub fn new(limits: Limits) -> Self {
        Scheduler {
            limits,
            last: None,
            recent: VecDeque::new(),
            running: false,
            early: None,
            last_early: None,
            rebuilds: vec![],
        }
    }

    /// Why no capture may start at `now`, if so (`free`: the data
    /// directory's free bytes, when known).
    pub fn refused(&mut self, now: f64, free: Option<u64>) -> Option<String> {
        while self.recent.front().is_some_and(|t| now - t > 3600.0) {
            self.recent.pop_front();
        }
        let l = &self.limits;
        if self.running {
            Some("a capture is already running".into())
        } else if self.last.is_some_and(|t| now - t < l.cooldown.as_secs_f64()) {
            Some(format!("cooldown ({}s)", l.cooldown.as_secs()))
        } else if self.recent.len() >= l.max_per_hour {
            Some(format!("{} captures in the last hour (--max-captures-per-hour)", l.max_per_hour))
        } else if free.is_some_and(|f| f < l.min_free_bytes) {
            Some(format!("less than {} MiB free in {}", l.min_free_bytes >> 20, l.data_dir))
        } else {
            None
        }
    }

    /// May an early capture start at `now`?
    pub fn may_start_early(&mut self, now: f64, free: Option<u64>) -> bool {
        self.early.is_none()
            && self.refused(now, free).is_none()
            && self.last_early.is_none_or(|t| now - t >= EARLY_GAP.as_secs_f64())
    }

    /// A capture started at `now` (counted against the cooldown and cap).
    pub fn started(&mut self, now: f64) {
        self.running = true;
        self.count(now);
    }

    /// An early capture started for trigger `i` (counted once confirmed).
    pub fn started_early(&mut self, i: usize, now: f64, confirm: T) {
        self.running = true;
        self.early = Some((i, confirm));
        self.last_early = Some(now);
    }

    /// The trigger the running early capture is for.
    pub fn early_trigger(&self) -> Option<usize> {
        self.early.as_ref().map(|e| e.0)
    }

    /// Another condition began at `now` after the running early capture
    /// had gathered (`gathered` says so of its handle): that evidence is of
    /// what came before, so the capture gathers again, spaced like a new
    /// early capture. It stays the same trigger's to keep or drop. Returns
    /// its handle when it may.
    pub fn retake_early(&mut self, now: f64, gathered: impl Fn(&T) -> bool) -> Option<&T> {
        if self.last_early.is_some_and(|t| now - t < EARLY_GAP.as_secs_f64()) {
            return None;
        }
        let e = self.early.as_ref().filter(|e| gathered(&e.1))?;
        self.last_early = Some(now);
        Some(&e.1)
    }

    /// The early capture's condition cleared: it becomes trigger `to`'s (or
    /// the scan's) to keep or drop when that one's condition holds, or is
    /// dropped (see [`Scheduler::drop_early`]) and its handle returned.
    pub fn release_early(&mut self, to: Option<usize>) -> Option<T> {
        match (to, self.early.as_mut()) {
            (Some(i), Some(e)) => {
                e.0 = i;
                None
            }
            _ => self.drop_early(),
        }
    }

    /// The early capture is confirmed at `now` (the hold passed, or another
    /// trigger fired: it is this stall's evidence); returns its handle.
    pub fn confirm_early(&mut self, now: f64) -> Option<T> {
        let (_, t) = self.early.take()?;
        self.count(now);
        Some(t)
    }

    /// The early capture's condition cleared: it is dropped (it still runs
    /// until it has gathered, then [`Scheduler::finished`]).
    pub fn drop_early(&mut self) -> Option<T> {
        self.early.take().map(|e| e.1)
    }

    /// The running capture ended (written, failed or dropped).
    pub fn finished(&mut self) {
        self.running = false;
    }

    pub fn running(&self) -> bool {
        self.running
    }

    fn count(&mut self, now: f64) {
        self.last = Some(now);
        self.recent.push_back(now);
    }

    /// Rebuild `dir`'s report at Unix time `due`.
    pub fn rebuild_at(&mut self, due: f64, dir: PathBuf) {
        self.rebuilds.push((due, dir));
    }

    /// The reports due at Unix time `unix` (all of them when `None`).
    pub fn rebuilds_due(&mut self, unix: Option<f64>) -> Vec<PathBuf> {
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.rebuilds).into_iter().partition(|(at, _)| unix.is_none_or(|u| u >= *at));
        self.rebuilds = later;
        due.into_iter().map(|(_, d)| d).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched() -> Scheduler<&'static str> {
        Scheduler::new(Limits {
            cooldown: Duration::from_secs(60),
            max_per_hour: 3,
            min_free_bytes: 100 << 20,
            data_dir: "/var/lib/pileup".into(),
        })
    }

    #[test]
    fn one_at_a_time_then_cooldown_then_the_hourly_cap() {
        let mut s = sched();
        assert_eq!(s.refused(0.0, Some(1 << 30)), None);
        s.started(0.0);
        assert_eq!(s.refused(1.0, None).as_deref(), Some("a capture is already running"));
        s.finished();
        assert_eq!(s.refused(30.0, None).as_deref(), Some("cooldown (60s)"));
        assert_eq!(s.refused(60.0, None), None);
        s.started(60.0);
        s.finished();
        s.started(120.0);
        s.finished();
        assert_eq!(s.refused(200.0, None).as_deref(), Some("3 captures in the last hour (--max-captures-per-hour)"));
        assert_eq!(s.refused(3601.0, None), None, "the first capture left the hour");
        assert_eq!(
            s.refused(3601.0, Some(1 << 20)).as_deref(),
            Some("less than 100 MiB free in /var/lib/pileup"),
            "a nearly full disk"
        );
    }

    #[test]
    fn early_captures_count_only_once_confirmed_and_are_spaced() {
        let mut s = sched();
        let gap = EARLY_GAP.as_secs_f64();
        assert!(s.may_start_early(0.0, None));
        s.started_early(2, 0.0, "confirm-2");
        assert_eq!(s.early_trigger(), Some(2));
        assert!(!s.may_start_early(gap * 0.5, None), "one at a time");
        assert_eq!(s.drop_early(), Some("confirm-2"));
        s.finished();
        assert_eq!(s.refused(gap * 0.75, None), None, "a dropped early capture does not start the cooldown");
        assert!(!s.may_start_early(gap * 0.75, None), "but the next early capture waits for the gap");
        assert!(s.may_start_early(gap, None));
        s.started_early(0, gap, "confirm-0");
        assert_eq!(s.confirm_early(gap + 2.0), Some("confirm-0"));
        assert_eq!(s.early_trigger(), None);
        s.finished();
        assert_eq!(s.refused(gap + 3.0, None).as_deref(), Some("cooldown (60s)"), "a confirmed one counts");
    }

    #[test]
    fn an_early_capture_that_has_gathered_is_retaken_for_a_new_condition() {
        let mut s = sched();
        let gap = EARLY_GAP.as_secs_f64();
        assert!(s.retake_early(0.0, |_| true).is_none(), "none running");
        s.started_early(0, 0.0, "early");
        assert!(s.retake_early(gap * 2.0, |_| false).is_none(), "still gathering: it sees the new condition");
        assert!(s.retake_early(gap * 0.5, |_| true).is_none(), "spaced like new early captures");
        assert_eq!(s.retake_early(gap * 2.0, |_| true), Some(&"early"));
        assert_eq!(s.early_trigger(), Some(0), "still its first trigger's to keep or drop");
        assert_eq!(s.release_early(Some(3)), None);
        assert_eq!(s.early_trigger(), Some(3), "handed on when its condition clears and another holds");
        assert!(s.retake_early(gap * 2.5, |_| true).is_none(), "spaced from the retake too");
        assert_eq!(s.confirm_early(gap * 3.0), Some("early"));
        s.finished();
        s.started_early(1, gap * 70.0, "next");
        assert_eq!(s.release_early(None), Some("next"), "dropped when no other condition holds");
        assert_eq!(s.early_trigger(), None);
    }

    #[test]
    fn reports_are_rebuilt_when_due() {
        let mut s = sched();
        s.rebuild_at(100.0, "a".into());
        s.rebuild_at(200.0, "b".into());
        assert!(s.rebuilds_due(Some(99.0)).is_empty());
        assert_eq!(s.rebuilds_due(Some(150.0)), vec![PathBuf::from("a")]);
        assert!(s.rebuilds_due(Some(150.0)).is_empty(), "rebuilt once");
        assert_eq!(s.rebuilds_due(None), vec![PathBuf::from("b")], "all that remain, at exit");
    }
}
