//! What changed between two windows of a fleet's digests: per class, the
//! time per execution and the executions per minute of the later window
//! against the earlier one, each with a 95% interval, and the classes new
//! in the later window. The minutes a rate is counted over are the
//! caller's (`pileup digest --from` counts host-minutes with rows).
//!
//! The interval comes from a bootstrap over the class's rows (one per host
//! and minute): the rows of each window are drawn again with replacement
//! and the ratio recomputed, 2,000 times; the interval is the 2.5th and
//! 97.5th percentiles. A change is settled when its interval leaves out 1;
//! the classes are ranked by the statement time a settled change adds to
//! the later window (its extra time per execution times its executions,
//! or its whole time for a new class).

use std::collections::HashMap;

use serde::Serialize;

/// One class's rows in a window: (executions, statement time) per host
/// and minute.
pub type Samples = HashMap<Box<[u8]>, Vec<(u64, f64)>>;

/// A ratio (later ÷ earlier) and its 95% interval.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Ratio {
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
}

impl Ratio {
    /// The interval leaves out 1.
    pub fn settled(&self) -> bool {
        self.low > 1.0 || self.high < 1.0
    }

    /// Whether there is an interval at all (enough host-minutes on both
    /// sides, [`MIN_ROWS`]).
    pub fn has_interval(&self) -> bool {
        self.low.is_finite() && self.high.is_finite()
    }
}

/// A class's executions and statement time in one window.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Side {
    pub executions: u64,
    pub time_s: f64,
}

impl Side {
    fn of(rows: &[(u64, f64)]) -> Side {
        let (executions, time) = totals(rows);
        Side { executions, time_s: (time * 1e6).round() / 1e6 }
    }
}

/// How one class changed.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub fingerprint: String,
    /// Executions and statement time in each window.
    pub before: Side,
    pub after: Side,
    /// Time per execution, later ÷ earlier (None for a new class or one
    /// gone).
    pub per_execution: Option<Ratio>,
    /// Executions per minute, later ÷ earlier.
    pub rate: Option<Ratio>,
    /// New in the later window.
    pub new: bool,
    /// Statement time the change adds to the later window, seconds (what
    /// it is ranked by; negative when it saves).
    pub added_s: f64,
}

/// Two windows compared.
#[derive(Clone, Debug, Serialize)]
pub struct Changes {
    /// The earlier window and the later one, [start, end) in Unix seconds.
    pub before: (i64, i64),
    pub after: (i64, i64),
    pub classes: Vec<Change>,
}

const ROUNDS: usize = 2000;

/// Host-minutes a window needs before a change of the class can be
/// settled: fewer give no interval.
pub const MIN_ROWS: usize = 5;

/// A small deterministic generator (splitmix64): the intervals are the
/// same on every run of the same data.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

fn totals(rows: &[(u64, f64)]) -> (u64, f64) {
    rows.iter().fold((0, 0.0), |(c, t), r| (c + r.0, t + r.1))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The ratio of `stat` over `after` to `stat` over `before`, and its
/// bootstrap interval.
fn ratio(before: &[(u64, f64)], after: &[(u64, f64)], stat: impl Fn(&[(u64, f64)]) -> f64, rng: &mut Rng) -> Ratio {
    let point = stat(after) / stat(before);
    if before.len() < MIN_ROWS || after.len() < MIN_ROWS {
        return Ratio { ratio: point, low: f64::NAN, high: f64::NAN };
    }
    let mut draws = Vec::with_capacity(ROUNDS);
    let (mut a, mut b) = (Vec::with_capacity(after.len()), Vec::with_capacity(before.len()));
    for _ in 0..ROUNDS {
        a.clear();
        b.clear();
        a.extend((0..after.len()).map(|_| after[rng.below(after.len())]));
        b.extend((0..before.len()).map(|_| before[rng.below(before.len())]));
        let r = stat(&a) / stat(&b);
        if r.is_finite() {
            draws.push(r);
        }
    }
    draws.sort_by(f64::total_cmp);
    if draws.is_empty() {
        return Ratio { ratio: point, low: f64::NAN, high: f64::NAN };
    }
    Ratio { ratio: point, low: percentile(&draws, 0.025), high: percentile(&draws, 0.975) }
}

/// Every class of either window and how it changed, ranked: new classes
/// and settled changes by the time they add, then the rest (within noise)
/// by their later time. `minutes`: each window's length in minutes.
pub fn compare(before: &Samples, after: &Samples, minutes: (f64, f64)) -> Vec<Change> {
    let fps: std::collections::BTreeSet<&Box<[u8]>> = before.keys().chain(after.keys()).collect();
    let mut out = vec![];
    for fp in fps {
        // Rows in a fixed order and a generator seeded by the class: the
        // same data gives the same intervals, whatever order the files
        // arrived in.
        let sorted = |rows: Option<&Vec<(u64, f64)>>| {
            let mut v = rows.cloned().unwrap_or_default();
            v.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)));
            v
        };
        let (b, a) = (sorted(before.get(fp)), sorted(after.get(fp)));
        let (b, a) = (b.as_slice(), a.as_slice());
        let mut rng = Rng(pileup_sql::class_id(fp));
        let (tb, ta) = (Side::of(b), Side::of(a));
        let new = tb.executions == 0 && ta.executions > 0;
        let (per_execution, rate) = if tb.executions > 0 && ta.executions > 0 {
            let mean = |r: &[(u64, f64)]| {
                let (c, t) = totals(r);
                t / c as f64
            };
            let per_minute = |m: f64| move |r: &[(u64, f64)]| totals(r).0 as f64 / m;
            let per_ex = ratio(b, a, mean, &mut rng);
            // Executions per minute: the later window's rows against the
            // earlier's, each over its own length.
            let scale = minutes.0 / minutes.1;
            let r = ratio(b, a, per_minute(1.0), &mut rng);
            let rate = Ratio { ratio: r.ratio * scale, low: r.low * scale, high: r.high * scale };
            (Some(per_ex), Some(rate))
        } else {
            (None, None)
        };
        let added_s = match per_execution {
            _ if new => ta.time_s,
            Some(r) if r.settled() => ta.time_s - ta.time_s / r.ratio,
            _ => 0.0,
        };
        out.push(Change {
            fingerprint: String::from_utf8_lossy(fp).into_owned(),
            before: tb,
            after: ta,
            per_execution,
            rate,
            new,
            added_s,
        });
    }
    out.sort_by(|x, y| {
        let key = |c: &Change| (c.new || c.per_execution.is_some_and(|r| r.settled()), c.added_s, c.after.time_s);
        let (kx, ky) = (key(x), key(y));
        ky.0.cmp(&kx.0)
            .then(ky.1.total_cmp(&kx.1))
            .then(ky.2.total_cmp(&kx.2))
            .then_with(|| x.fingerprint.cmp(&y.fingerprint))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, count: u64, mean: f64, wobble: f64) -> Vec<(u64, f64)> {
        (0..n).map(|i| (count, count as f64 * mean * (1.0 + wobble * ((i % 7) as f64 - 3.0) / 3.0))).collect()
    }

    #[test]
    fn a_planted_slowdown_ranks_first_and_noise_stays_unsettled() {
        let mut before = Samples::new();
        let mut after = Samples::new();
        // Busy and steady.
        before.insert(b"select a".to_vec().into(), rows(600, 50, 0.002, 0.2));
        after.insert(b"select a".to_vec().into(), rows(600, 50, 0.002, 0.2));
        // 3x slower per execution.
        before.insert(b"select slow".to_vec().into(), rows(600, 5, 0.001, 0.3));
        after.insert(b"select slow".to_vec().into(), rows(600, 5, 0.003, 0.3));
        // New in the later window, small.
        after.insert(b"select new".to_vec().into(), rows(10, 1, 0.0001, 0.0));
        let c = compare(&before, &after, (60.0, 60.0));
        assert_eq!(c[0].fingerprint, "select slow");
        let r = c[0].per_execution.unwrap();
        assert!(r.low > 2.5 && r.high < 3.5 && (r.ratio - 3.0).abs() < 0.01, "{r:?}");
        assert!((c[0].added_s - 2.0 * 600.0 * 5.0 * 0.001).abs() < 0.5, "{}", c[0].added_s);
        assert_eq!((c[1].fingerprint.as_str(), c[1].new), ("select new", true));
        let steady = c.iter().find(|c| c.fingerprint == "select a").unwrap();
        assert!(!steady.per_execution.unwrap().settled(), "{:?}", steady.per_execution);
        assert_eq!(steady.added_s, 0.0);
        let rate = steady.rate.unwrap();
        assert!((rate.ratio - 1.0).abs() < 1e-9 && rate.low <= 1.0 && rate.high >= 1.0, "{rate:?}");
    }

    #[test]
    fn too_few_host_minutes_settle_nothing() {
        let before = Samples::from([(b"q".to_vec().into(), rows(4, 3, 0.01, 0.0))]);
        let after = Samples::from([(b"q".to_vec().into(), rows(4, 3, 0.05, 0.0))]);
        let c = compare(&before, &after, (10.0, 10.0));
        let r = c[0].per_execution.unwrap();
        assert!((r.ratio - 5.0).abs() < 1e-9 && !r.has_interval() && !r.settled(), "{r:?}");
        assert_eq!(c[0].added_s, 0.0);
    }

    #[test]
    fn the_same_data_gives_the_same_intervals_whatever_the_order_of_classes_and_rows() {
        let mut before = Samples::new();
        let mut after = Samples::new();
        for k in 0..20u64 {
            before.insert(format!("q{k}").into_bytes().into(), rows(50, 3 + k, 0.01, 0.5));
            after.insert(format!("q{k}").into_bytes().into(), rows(50, 3 + k, 0.012, 0.5));
        }
        let x = compare(&before, &after, (10.0, 10.0));
        // The same rows, each class's in reverse order, in maps built in
        // another order.
        let rev = |s: &Samples| -> Samples {
            let mut keys: Vec<_> = s.keys().cloned().collect();
            keys.reverse();
            keys.into_iter().map(|k| (k.clone(), s[&k].iter().rev().copied().collect())).collect()
        };
        let y = compare(&rev(&before), &rev(&after), (10.0, 10.0));
        for (a, b) in x.iter().zip(&y) {
            assert_eq!((&a.fingerprint, a.per_execution), (&b.fingerprint, b.per_execution));
        }
    }
}
