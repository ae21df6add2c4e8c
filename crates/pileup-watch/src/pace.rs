//! When the next poll starts: every `interval` while the server is quiet;
//! every [`FAST`] while something is moving (a trigger's condition holds
//! but has not fired, or the thread scan saw the threads stir), so a stall
//! is decided within a second of its onset; and at once when the scan
//! stirs, if the last poll began at least [`MIN_GAP`] ago. Polls never
//! overlap: the loop runs them one after another, and asks this module only
//! when the next may begin.
//!
//! Polls beyond the usual cadence are paid from a budget ([`BUDGET`], refilled
//! at one per [`REFILL_SECS`]), so a server whose threads stir all day
//! costs at most that many more polls, not four times as many.
//!
//! Time is the caller's monotonic seconds: every rule is tested without a
//! clock.

use std::time::Duration;

/// The poll interval while something is moving.
pub const FAST: Duration = Duration::from_millis(250);
/// The least time between the starts of two polls.
pub const MIN_GAP: Duration = Duration::from_millis(100);
/// After the scan stirs, polls stay fast this long.
pub const STIR_SECS: f64 = 2.0;
/// Extra polls in hand…
pub const BUDGET: f64 = 24.0;
/// …and one more every this many seconds.
pub const REFILL_SECS: f64 = 5.0;

#[derive(Debug, Clone)]
pub struct Pace {
    interval: f64,
    /// Fast until this time (the last stir plus [`STIR_SECS`]).
    stirred_until: f64,
    tokens: f64,
    refilled: f64,
    /// When the last poll started.
    last: Option<f64>,
}

impl Pace {
    pub fn new(interval: Duration) -> Pace {
        Pace { interval: interval.as_secs_f64(), stirred_until: f64::MIN, tokens: BUDGET, refilled: 0.0, last: None }
    }

    fn refill(&mut self, now: f64) {
        self.tokens = (self.tokens + (now - self.refilled).max(0.0) / REFILL_SECS).min(BUDGET);
        self.refilled = now;
    }

    /// A poll starts at `now`.
    pub fn started(&mut self, now: f64) {
        self.last = Some(now);
    }

    /// After the poll that started last, when the next starts: fast while
    /// `pending` (a trigger's condition holds and has not fired) or the
    /// scan stirred lately, budget allowing; else at the interval.
    pub fn next(&mut self, now: f64, pending: bool) -> f64 {
        let last = self.last.unwrap_or(now);
        let usual = last + self.interval;
        let fast = last + FAST.as_secs_f64();
        if fast >= usual || !(pending || now < self.stirred_until) {
            return usual;
        }
        self.refill(now);
        // A fast poll costs the share of a usual one it comes early by.
        let cost = (usual - fast) / self.interval;
        if self.tokens >= cost {
            self.tokens -= cost;
            fast
        } else {
            usual
        }
    }

    /// The scan stirred at `now`, with the next poll due at `due`: when it
    /// now starts (at once if the last began [`MIN_GAP`] ago, else then),
    /// budget allowing.
    pub fn stirred(&mut self, now: f64, due: f64) -> f64 {
        self.stirred_until = now + STIR_SECS;
        let Some(last) = self.last else { return due };
        let at = (last + MIN_GAP.as_secs_f64()).max(now);
        if at >= due {
            return due;
        }
        self.refill(now);
        let cost = (due - at) / self.interval;
        if self.tokens >= cost {
            self.tokens -= cost;
            at
        } else {
            due
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace() -> Pace {
        Pace::new(Duration::from_secs(1))
    }

    #[test]
    fn quiet_polls_keep_the_interval() {
        let mut p = pace();
        p.started(10.0);
        assert_eq!(p.next(10.01, false), 11.0);
        // An interval shorter than FAST is kept as it is.
        let mut p = Pace::new(Duration::from_millis(200));
        p.started(10.0);
        assert_eq!(p.next(10.01, true), 10.2);
    }

    #[test]
    fn a_condition_in_its_hold_polls_fast_until_decided() {
        let mut p = pace();
        p.started(10.0);
        assert_eq!(p.next(10.01, true), 10.25);
        p.started(10.25);
        assert_eq!(p.next(10.26, true), 10.5);
        p.started(10.5);
        assert_eq!(p.next(10.51, false), 11.5, "decided: back to the interval");
    }

    #[test]
    fn a_stir_brings_the_next_poll_forward_and_keeps_polls_fast_a_while() {
        let mut p = pace();
        p.started(10.0);
        let due = p.next(10.01, false);
        assert_eq!(due, 11.0);
        // Too soon after the last poll's start: at MIN_GAP.
        assert!((p.stirred(10.05, due) - 10.1).abs() < 1e-9);
        p.started(10.1);
        assert_eq!(p.next(10.11, false), 10.35, "still stirred");
        p.started(12.5);
        assert_eq!(p.next(12.51, false), 13.5, "the stir has passed");
        // A stir later in the interval: at once.
        assert_eq!(p.stirred(12.9, 13.5), 12.9);
    }

    #[test]
    fn fast_polls_are_paid_from_a_budget_that_refills() {
        let mut p = pace();
        let mut t = 0.0;
        let mut fast = 0;
        // Always pending: three extra polls a second until the budget is spent.
        while t < 60.0 {
            p.started(t);
            let n = p.next(t, true);
            if n - t < 0.5 {
                fast += 1;
            }
            t = n;
        }
        // 24 polls' worth in hand and 12 more refilled, at 3/4 of a poll each,
        // as 60 s at the interval (60 polls) cost nothing.
        let extra = fast as f64 * 0.75;
        assert!(extra <= BUDGET + 60.0 / REFILL_SECS + 1.0, "{fast} fast polls");
        assert!(fast >= 40, "{fast} fast polls");
        assert!(p.tokens < 0.75, "the budget was spent: {} left", p.tokens);
        // Spent, and nothing refilled yet: a stir waits for the usual poll.
        p.started(t);
        let due = p.next(t, false);
        (p.tokens, p.refilled) = (0.0, t + 0.01);
        assert_eq!(p.stirred(t + 0.01, due), due);
    }
}
