//! The experiment: the statement and its variants timed in rounds, each
//! round running every variant still in question once beside the
//! statement, in an order that turns round by round. A variant's effect is
//! the median of its per-round ratios (the statement's time over the
//! variant's, in the same round: what the machine was doing then weighs on
//! both) with the order-statistic 95% interval of that median. A variant is
//! settled once its interval lies wholly above the gain asked for (it
//! wins), wholly below it (it cannot), or it runs three times as long as
//! the statement (it is slower); rounds go on while one is not settled and
//! the budget lasts.
//!
//! Pure: the rounds are fed in and the decisions read out, so that the
//! rules are tested with scripted timings.

use pileup_stats::{paired_ratios, Median};

/// What is asked of a variant before it is advised.
#[derive(Clone, Copy, Debug)]
pub struct Bar {
    /// The interval's lower bound must reach this ratio (1.10: 10% faster).
    pub ratio: f64,
    /// The median saving per execution must reach this, milliseconds.
    pub min_ms: f64,
    /// Rounds before anything is settled (an interval needs 6).
    pub min_rounds: usize,
    /// Rounds at most.
    pub max_rounds: usize,
}

/// Where a variant stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Still measured.
    Open,
    /// Its interval lies above the bar and it saves enough per execution.
    Faster,
    /// Its interval reaches below the bar, or it saves too little: no
    /// difference worth advising that the runs can tell from noise.
    WithinNoise,
    /// Three times as long as the statement, or its interval wholly below
    /// 1: slower.
    Slower,
}

/// The timings so far.
#[derive(Clone, Debug, Default)]
pub struct Experiment {
    /// The statement's time in each round, milliseconds.
    pub base: Vec<f64>,
    /// Each variant's time in each round (NaN: not run that round).
    pub arms: Vec<Vec<f64>>,
    /// Variants settled early (no longer run), and how.
    settled: Vec<Option<Standing>>,
}

impl Experiment {
    pub fn new(arms: usize) -> Experiment {
        Experiment { base: vec![], arms: vec![vec![]; arms], settled: vec![None; arms] }
    }

    /// The variants to run in the next round, in the order to run them
    /// (turned by one each round; the statement runs first).
    pub fn next_round(&self) -> Vec<usize> {
        let open: Vec<usize> = (0..self.arms.len()).filter(|&i| self.settled[i].is_none()).collect();
        if open.is_empty() {
            return open;
        }
        let k = self.base.len() % open.len();
        open[k..].iter().chain(&open[..k]).copied().collect()
    }

    /// Record a round: the statement's time and each variant's (`None`:
    /// not run).
    pub fn record(&mut self, base_ms: f64, arms: &[Option<f64>], bar: &Bar) {
        self.base.push(base_ms);
        for (i, t) in arms.iter().enumerate() {
            self.arms[i].push(t.unwrap_or(f64::NAN));
        }
        for i in 0..self.arms.len() {
            if self.settled[i].is_none() {
                let s = self.standing(i, bar);
                let early = s == Standing::Slower || (self.base.len() >= bar.min_rounds && s != Standing::Open);
                if early {
                    self.settled[i] = Some(s);
                }
            }
        }
    }

    /// A variant that can no longer be run (an error, other rows).
    pub fn drop_arm(&mut self, i: usize) {
        self.settled[i] = Some(Standing::WithinNoise);
    }

    /// Whether every variant is settled, or the rounds are spent.
    pub fn done(&self, bar: &Bar) -> bool {
        self.base.len() >= bar.max_rounds || self.settled.iter().all(Option::is_some)
    }

    /// The statement's time over the variant's, per round: its median and
    /// interval.
    pub fn ratio(&self, i: usize) -> Median {
        Median::of(&paired_ratios(&self.base, &self.arms[i]))
    }

    /// The variant's median time, and the statement's over the same rounds.
    pub fn medians(&self, i: usize) -> (f64, f64) {
        let (b, v): (Vec<f64>, Vec<f64>) =
            self.base.iter().zip(&self.arms[i]).filter(|(_, v)| v.is_finite()).map(|(b, v)| (*b, *v)).unzip();
        (pileup_stats::median(&b), pileup_stats::median(&v))
    }

    /// Where variant `i` stands now.
    pub fn standing(&self, i: usize, bar: &Bar) -> Standing {
        let (base, var) = self.medians(i);
        let runs = self.arms[i].iter().filter(|t| t.is_finite()).count();
        if runs >= 1 && var > 3.0 * base {
            return Standing::Slower;
        }
        let r = self.ratio(i);
        match r.interval {
            None => Standing::Open,
            Some((_, hi)) if hi < 1.0 => Standing::Slower,
            Some((lo, _)) if lo >= bar.ratio && base - var >= bar.min_ms => Standing::Faster,
            Some((_, hi)) if hi < bar.ratio || base - var < bar.min_ms => Standing::WithinNoise,
            Some(_) => Standing::Open,
        }
    }

    /// The final standing: as settled, else as the rounds left it (an
    /// interval still across the bar is within noise).
    pub fn verdict(&self, i: usize, bar: &Bar) -> Standing {
        match self.settled[i] {
            Some(s) => s,
            None => match self.standing(i, bar) {
                Standing::Open => Standing::WithinNoise,
                s => s,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BAR: Bar = Bar { ratio: 1.10, min_ms: 0.5, min_rounds: 6, max_rounds: 40 };

    /// A noisy time around `ms`: ±`spread` in a fixed pattern.
    fn around(ms: f64, spread: f64, round: usize) -> f64 {
        const W: [f64; 7] = [0.0, 0.9, -0.7, 0.4, -1.0, 0.6, -0.3];
        ms * (1.0 + spread * W[round % W.len()])
    }

    fn run(e: &mut Experiment, base: f64, arms: &[f64], spread: f64) -> usize {
        let mut rounds = 0;
        while !e.done(&BAR) {
            let r = e.base.len();
            let order = e.next_round();
            let mut t = vec![None; arms.len()];
            for i in order {
                t[i] = Some(around(arms[i], spread, r + i + 1));
            }
            e.record(around(base, spread, r), &t, &BAR);
            rounds += 1;
        }
        rounds
    }

    #[test]
    fn a_clear_gain_settles_as_faster_and_noise_never_does() {
        // 117 ms against 20 ms: settled at the first interval.
        let mut e = Experiment::new(2);
        let rounds = run(&mut e, 117.0, &[20.0, 117.0], 0.15);
        assert_eq!(e.verdict(0, &BAR), Standing::Faster);
        assert_eq!(e.verdict(1, &BAR), Standing::WithinNoise);
        assert!(rounds <= 12, "{rounds} rounds");
        let r = e.ratio(0);
        assert!(r.interval.unwrap().0 > 4.0 && r.median > 5.0, "{r:?}");
    }

    #[test]
    fn a_sub_millisecond_statement_is_never_advised_whatever_its_ratio() {
        // 0.05 ms against 0.03 ms: a ratio of 1.7 but 0.02 ms saved.
        let mut e = Experiment::new(1);
        run(&mut e, 0.05, &[0.03], 0.2);
        assert_eq!(e.verdict(0, &BAR), Standing::WithinNoise);
    }

    #[test]
    fn a_gain_inside_the_noise_is_within_noise_and_a_slow_variant_is_dropped_at_once() {
        // 5% faster with ±30% noise: the interval spans the bar.
        let mut e = Experiment::new(2);
        run(&mut e, 50.0, &[47.5, 400.0], 0.3);
        assert_eq!(e.verdict(0, &BAR), Standing::WithinNoise);
        assert_eq!(e.verdict(1, &BAR), Standing::Slower);
        assert_eq!(e.arms[1].iter().filter(|t| t.is_finite()).count(), 1, "run once");
    }

    #[test]
    fn rounds_turn_the_order_and_stop_at_the_cap() {
        let mut e = Experiment::new(3);
        assert_eq!(e.next_round(), [0, 1, 2]);
        e.record(1.0, &[Some(1.0), Some(1.0), Some(1.0)], &BAR);
        assert_eq!(e.next_round(), [1, 2, 0]);
        // Nothing settles before its minimum rounds: the cap ends it, and
        // what is still open is within noise.
        let cap = Bar { min_rounds: 20, max_rounds: 8, ..BAR };
        while !e.done(&cap) {
            e.record(10.0, &[Some(10.0), Some(10.0), Some(10.0)], &cap);
        }
        assert_eq!(e.base.len(), 8);
        assert!((0..3).all(|i| e.verdict(i, &cap) == Standing::WithinNoise));
    }
}
