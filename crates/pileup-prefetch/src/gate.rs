//! Whether to warm now, and if not, why: decided from the relay log itself
//! ([`pileup_replica::backlog`]: the bytes and the primary time beyond the
//! applier), with `Seconds_Behind_Master` one signal among several. It is
//! NULL while the IO thread is stopped or the SQL thread has not started,
//! 0 when the clocks disagree while a backlog waits, and large after an idle
//! primary with nothing to apply; none of those decides alone.

use pileup_replica::backlog::Backlog;

/// What the prefetcher is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Warming ahead of a running applier.
    Warming,
    /// Warming ahead of an SQL thread that is not running: it will start
    /// where the warming starts (start the prefetcher first, then the SQL
    /// thread, and the first transactions are already warm).
    AheadOfStoppedApplier,
    Idle(Idle),
}

/// Why the prefetcher is idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// The relay log holds nothing beyond the applier.
    NothingAhead,
    /// The applier is `secs` behind, under `--min-lag`.
    UnderMinLag { secs: u64, min: u64 },
    /// The relay logs cannot be measured and the SQL thread is not running.
    SqlStopped,
    /// The relay logs cannot be measured and the replica reports no lag
    /// (`Seconds_Behind_Master` NULL or under `--min-lag`).
    NoLagReported,
}

impl State {
    /// A number per state for the counters (`state` gauge) and back.
    pub fn code(self) -> u64 {
        match self {
            State::Warming => 0,
            State::AheadOfStoppedApplier => 1,
            State::Idle(Idle::NothingAhead) => 2,
            State::Idle(Idle::UnderMinLag { .. }) => 3,
            State::Idle(Idle::SqlStopped) => 4,
            State::Idle(Idle::NoLagReported) => 5,
        }
    }

    /// The state a [`State::code`] stands for; `secs` and `min` fill in
    /// [`Idle::UnderMinLag`].
    pub fn from_code(code: u64, secs: u64, min: u64) -> State {
        match code {
            0 => State::Warming,
            1 => State::AheadOfStoppedApplier,
            3 => State::Idle(Idle::UnderMinLag { secs, min }),
            4 => State::Idle(Idle::SqlStopped),
            5 => State::Idle(Idle::NoLagReported),
            _ => State::Idle(Idle::NothingAhead),
        }
    }

    pub fn is_warming(self) -> bool {
        !matches!(self, State::Idle(_))
    }

    /// The state as a user reads it.
    pub fn describe(self) -> String {
        match self {
            State::Warming => "warming".into(),
            State::AheadOfStoppedApplier => "warming ahead of the SQL thread, which is not running".into(),
            State::Idle(Idle::NothingAhead) => "idle: the relay log holds nothing beyond the applier".into(),
            State::Idle(Idle::UnderMinLag { secs, min }) => {
                format!("idle: the applier is {secs} s behind, under --min-lag {min}")
            }
            State::Idle(Idle::SqlStopped) => {
                "idle: the SQL thread is not running and the relay logs cannot be read to measure the backlog".into()
            }
            State::Idle(Idle::NoLagReported) => {
                "idle: the replica reports no lag and the relay logs cannot be read to measure the backlog".into()
            }
        }
    }
}

/// Decide from the SQL thread's state, `Seconds_Behind_Master` (`sbm`) and
/// the backlog measured in the relay log.
pub fn decide(sql_running: bool, sbm: Option<u64>, backlog: &Backlog, min_lag: u64) -> State {
    match backlog.bytes {
        Some(0) => State::Idle(Idle::NothingAhead),
        Some(_) => {
            // The most any signal says: the relay log's primary time (needs
            // no clock agreement), the age of the applier's next event (a
            // burst written in a second can take minutes to apply), the
            // replica's own report.
            match behind_secs(sbm, backlog) {
                Some(secs) if secs < min_lag => State::Idle(Idle::UnderMinLag { secs, min: min_lag }),
                _ if sql_running => State::Warming,
                _ => State::AheadOfStoppedApplier,
            }
        }
        // Relay logs that cannot be measured: the replica's own report.
        None if !sql_running => State::Idle(Idle::SqlStopped),
        None if sbm.is_some_and(|l| l >= min_lag) => State::Warming,
        None => State::Idle(Idle::NoLagReported),
    }
}

/// How far behind the applier is: the most that the relay log's primary
/// time, the age of the applier's next event and the replica's report say
/// (None: none of them is known).
pub fn behind_secs(sbm: Option<u64>, backlog: &Backlog) -> Option<u64> {
    match backlog.bytes {
        Some(0) => Some(0),
        Some(_) => [backlog.secs.map(u64::from), backlog.age, sbm].into_iter().flatten().max(),
        None => sbm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backlog(bytes: Option<u64>, secs: Option<u32>) -> Backlog {
        Backlog { bytes, files: 1, secs, age: None }
    }

    #[test]
    fn a_backlog_is_worked_whatever_seconds_behind_master_says() {
        let b = backlog(Some(50 << 20), Some(120));
        assert_eq!(decide(true, None, &b, 1), State::Warming, "NULL: the IO thread is stopped");
        assert_eq!(decide(true, Some(0), &b, 1), State::Warming, "0: clock skew or parallel reporting");
        assert_eq!(decide(true, Some(5000), &b, 1), State::Warming);
        assert_eq!(decide(false, None, &b, 1), State::AheadOfStoppedApplier, "started before the SQL thread");
        let unmeasured = backlog(Some(1 << 20), None);
        assert_eq!(decide(true, None, &unmeasured, 1), State::Warming, "bytes wait, time unknown");
    }

    #[test]
    fn nothing_ahead_or_under_min_lag_is_idle_with_the_reason() {
        let none = backlog(Some(0), Some(0));
        assert_eq!(
            decide(true, Some(86_400), &none, 1),
            State::Idle(Idle::NothingAhead),
            "an idle primary's old event"
        );
        assert!(decide(true, None, &none, 1).describe().contains("holds nothing beyond the applier"));
        let small = backlog(Some(4000), Some(0));
        assert_eq!(decide(true, Some(0), &small, 1), State::Idle(Idle::UnderMinLag { secs: 0, min: 1 }));
        assert_eq!(decide(true, Some(0), &small, 0), State::Warming, "--min-lag 0 works any backlog");
        assert_eq!(
            decide(true, Some(30), &backlog(Some(4000), None), 60),
            State::Idle(Idle::UnderMinLag { secs: 30, min: 60 }),
            "no relay time: the replica's report"
        );
    }

    #[test]
    fn unmeasurable_relay_logs_fall_back_to_the_replicas_report() {
        let unknown = Backlog::default();
        assert_eq!(decide(true, Some(10), &unknown, 1), State::Warming);
        assert_eq!(decide(true, None, &unknown, 1), State::Idle(Idle::NoLagReported));
        assert_eq!(decide(false, None, &unknown, 1), State::Idle(Idle::SqlStopped));
        let codes: std::collections::HashSet<u64> = [
            State::Warming,
            State::AheadOfStoppedApplier,
            State::Idle(Idle::NothingAhead),
            State::Idle(Idle::UnderMinLag { secs: 0, min: 1 }),
            State::Idle(Idle::SqlStopped),
            State::Idle(Idle::NoLagReported),
        ]
        .iter()
        .map(|s| s.code())
        .collect();
        assert_eq!(codes.len(), 6, "every state its own code");
        for c in codes {
            assert_eq!(State::from_code(c, 0, 1).code(), c);
        }
    }

    #[test]
    fn a_burst_written_in_a_second_is_behind_by_its_age() {
        // 6,000 transactions the primary wrote within a second, waiting
        // for an applier that has been busy for 20 s.
        let burst = Backlog { bytes: Some(30 << 20), files: 1, secs: Some(0), age: Some(20) };
        assert_eq!(decide(true, None, &burst, 1), State::Warming);
        assert_eq!(behind_secs(None, &burst), Some(20));
        let fresh = Backlog { age: Some(0), ..burst };
        assert_eq!(decide(true, Some(0), &fresh, 1), State::Idle(Idle::UnderMinLag { secs: 0, min: 1 }));
    }

    #[test]
    fn behind_for_the_purge_hold() {
        assert_eq!(behind_secs(Some(0), &backlog(Some(10 << 20), Some(40))), Some(40));
        assert_eq!(behind_secs(Some(900), &backlog(Some(0), Some(0))), Some(0), "nothing ahead: caught up");
        assert_eq!(behind_secs(None, &backlog(Some(10), None)), None);
        assert_eq!(behind_secs(Some(3), &Backlog::default()), Some(3));
    }
}
