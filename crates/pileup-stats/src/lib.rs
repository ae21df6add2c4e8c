//! `pileup-stats`: the one home of the statistics pileup's figures rest
//! on. This machine and the ones users run pileup on are noisy, so every
//! comparison is of medians, and a median is given with the interval that
//! holds it rather than alone.
//!
//! Written here rather than taken from a crate: the few functions needed
//! (a median that skips unreadable values, the order-statistic interval of
//! a median, the spread of a sample) are a page of code, where the
//! statistics crates bring distributions and matrices pileup does not use.

/// The finite values of `v`, sorted: a figure that could not be read (NaN)
/// or overflowed does not count.
pub fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    s
}

/// The median of the finite values of `v`; NaN when there are none.
pub fn median(v: &[f64]) -> f64 {
    median_of_sorted(&sorted(v))
}

/// The median of values already sorted (and finite).
fn median_of_sorted(s: &[f64]) -> f64 {
    let n = s.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The 0-based rank `k` such that `[s[k], s[n-1-k]]` of a sorted sample of
/// `n` covers its population's median with at least 95% probability,
/// whatever the distribution: the largest `k` with
/// `P(Binomial(n, 1/2) <= k) <= 2.5%`. `None` below 6 values, where no
/// such interval exists.
pub fn median_ci_rank(n: usize) -> Option<usize> {
    // Cumulative binomial probabilities, in f64: n stays small.
    let mut p = 0.5f64.powi(n as i32);
    let (mut cum, mut best) = (0.0, None);
    for k in 0..n {
        cum += p;
        if cum > 0.025 {
            break;
        }
        best = Some(k);
        p *= (n - k) as f64 / (k + 1) as f64;
    }
    best
}

/// A median with its distribution-free 95% interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Median {
    /// The median of the finite values (NaN when there are none).
    pub median: f64,
    /// The interval that holds the population's median with at least 95%
    /// probability (order statistics); `None` with fewer than 6 values.
    pub interval: Option<(f64, f64)>,
    /// How many finite values there were.
    pub n: usize,
}

impl Median {
    /// The median of `v` and its interval.
    pub fn of(v: &[f64]) -> Median {
        let s = sorted(v);
        let n = s.len();
        let interval = median_ci_rank(n).map(|k| (s[k], s[n - 1 - k]));
        Median { median: median_of_sorted(&s), interval, n }
    }

    /// Whether the whole interval lies above `x` (a difference settled in
    /// one direction); false without an interval.
    pub fn above(&self, x: f64) -> bool {
        self.interval.is_some_and(|(lo, _)| lo > x)
    }

    /// Whether the whole interval lies below `x`.
    pub fn below(&self, x: f64) -> bool {
        self.interval.is_some_and(|(_, hi)| hi < x)
    }
}

/// The least and greatest finite values of `v` (`None` when there are none):
/// the spread a report shows beside a median of a few rounds.
pub fn range(v: &[f64]) -> Option<(f64, f64)> {
    let s = sorted(v);
    Some((*s.first()?, *s.last()?))
}

/// Paired ratios `a[i] / b[i]` of two series measured side by side (round
/// by round, so each pair saw the same machine state); pairs with a zero
/// or unreadable denominator are left out.
pub fn paired_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).filter(|(_, y)| y.is_finite() && **y != 0.0).map(|(x, y)| x / y).filter(|r| r.is_finite()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_skip_what_could_not_be_read() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[f64::NAN, 5.0, f64::INFINITY]), 5.0);
        assert!(median(&[]).is_nan());
        assert!(median(&[f64::NAN]).is_nan());
    }

    #[test]
    fn the_median_interval_follows_the_binomial() {
        // Below 6 values no pair of order statistics covers 95%.
        assert_eq!(median_ci_rank(5), None);
        // n = 6: P(B <= 0) = 1/64 = 1.6% <= 2.5%: the extremes.
        assert_eq!(median_ci_rank(6), Some(0));
        // n = 10: P(B <= 1) = 11/1024 <= 2.5% < P(B <= 2) = 56/1024.
        assert_eq!(median_ci_rank(10), Some(1));
        // n = 9: P(B <= 1) = 10/512 = 2.0%, P(B <= 2) = 46/512 = 9%.
        assert_eq!(median_ci_rank(9), Some(1));
        // n = 20: the 6th from each end (k = 5), as tables give it.
        assert_eq!(median_ci_rank(20), Some(5));
        let m = Median::of(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        assert_eq!(m.median, 5.0);
        assert_eq!(m.interval, Some((2.0, 8.0)));
        assert!(m.above(1.5) && !m.above(2.0) && m.below(8.5) && !m.below(8.0));
        assert_eq!(Median::of(&[1.0, 2.0]).interval, None);
    }

    #[test]
    fn ranges_and_paired_ratios() {
        assert_eq!(range(&[2.0, f64::NAN, -1.0, 5.0]), Some((-1.0, 5.0)));
        assert_eq!(range(&[]), None);
        assert_eq!(paired_ratios(&[2.0, 3.0, 4.0], &[1.0, 0.0, 2.0]), vec![2.0, 2.0]);
    }
}
