//! Stalls: stretches in which the applier had work but its position stood
//! still.
//!
//! An I/O-bound replica does not apply at an even pace: it runs at memory
//! speed through transactions whose pages are cached, then stands still for
//! hundreds of milliseconds — the page cleaner's flush batch holds the pages
//! it must change, the buffer pool has no free page, a latch convoy forms.
//! Averages hide that; the position read after every sample shows it. A
//! pure function of the sampled positions, so it is tested offline.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::classify::Category;

/// What the stalls of a sampling period add up to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stalls {
    /// A stretch counts from this long on.
    pub threshold_ms: u64,
    pub count: usize,
    /// Time inside stalls (each measured from the first to the last sample
    /// that saw its position: a lower bound).
    pub seconds: f64,
    pub longest_ms: u64,
    /// What the applier threads were doing during stalls: samples by category.
    pub by_category: BTreeMap<Category, u64>,
}

impl Stalls {
    pub fn share(&self, cat: Category) -> f64 {
        let n: u64 = self.by_category.values().sum();
        100.0 * *self.by_category.get(&cat).unwrap_or(&0) as f64 / n.max(1) as f64
    }
}

/// Index ranges (first, last sample, inclusive) over which the position
/// was the same known value for at least `min_secs`, and the applier was
/// not mostly idle (`idle[k]`: every applier thread waited for the relay
/// log at sample `k`; a caught-up replica stands still for good reason).
/// `times` are seconds since the start, one per sample, like `positions`.
pub fn find<P: PartialEq>(times: &[f64], positions: &[Option<P>], idle: &[bool], min_secs: f64) -> Vec<(usize, usize)> {
    let n = times.len().min(positions.len()).min(idle.len());
    let mut out = vec![];
    let mut a = 0;
    while a < n {
        let Some(p) = &positions[a] else {
            a += 1;
            continue;
        };
        let mut b = a;
        while b + 1 < n && positions[b + 1].as_ref() == Some(p) {
            b += 1;
        }
        let idle_samples = idle[a..=b].iter().filter(|x| **x).count();
        if times[b] - times[a] >= min_secs && idle_samples * 2 <= b - a + 1 {
            out.push((a, b));
        }
        a = b + 1;
    }
    out
}

/// Sum the stalls up: `cats[k]` are the categories of the applier thread
/// samples taken at sample `k`.
pub fn summarize(times: &[f64], ranges: &[(usize, usize)], cats: &[Vec<Category>], threshold_ms: u64) -> Stalls {
    let mut s = Stalls { threshold_ms, count: ranges.len(), ..Default::default() };
    for &(a, b) in ranges {
        let d = times[b] - times[a];
        s.seconds += d;
        s.longest_ms = s.longest_ms.max((d * 1000.0).round() as u64);
        for c in cats.get(a..=b).into_iter().flatten().flatten() {
            *s.by_category.entry(*c).or_default() += 1;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(n: usize, step: f64) -> Vec<f64> {
        (0..n).map(|i| i as f64 * step).collect()
    }

    #[test]
    fn a_position_held_long_enough_is_a_stall() {
        // 50 ms samples: moving, then held for 6 samples (250 ms), moving,
        // held for 3 (100 ms), then unknown twice.
        let pos = [
            Some(1),
            Some(2),
            Some(3),
            Some(3),
            Some(3),
            Some(3),
            Some(3),
            Some(3),
            Some(4),
            Some(5),
            Some(5),
            Some(5),
            None,
            None,
        ];
        let t = times(pos.len(), 0.05);
        let idle = vec![false; pos.len()];
        assert_eq!(find(&t, &pos, &idle, 0.2), vec![(2, 7)]);
        assert_eq!(find(&t, &pos, &idle, 0.1), vec![(2, 7), (9, 11)]);
        assert_eq!(find(&t, &pos, &idle, 0.3), vec![], "250 ms is under a 300 ms threshold");
        // Unknown positions never make a stall, however many in a row.
        assert_eq!(find(&t, &[None::<u32>; 14], &idle, 0.0), vec![]);
    }

    #[test]
    fn a_caught_up_applier_is_not_stalled() {
        let pos = [Some(7); 10];
        let t = times(10, 0.05);
        let mut idle = vec![true; 10];
        assert_eq!(find(&t, &pos, &idle, 0.2), vec![], "waiting for the relay log the whole time");
        for x in idle.iter_mut().take(6) {
            *x = false;
        }
        assert_eq!(find(&t, &pos, &idle, 0.2), vec![(0, 9)], "busy for most of it");
    }

    #[test]
    fn summary_adds_time_and_what_the_applier_did() {
        let t = times(12, 0.05);
        let mut cats = vec![vec![Category::Cpu]; 12];
        for c in cats.iter_mut().take(8).skip(2) {
            *c = vec![Category::LatchWait];
        }
        cats[5] = vec![Category::PageRead];
        let s = summarize(&t, &[(2, 7), (9, 11)], &cats, 100);
        assert_eq!(s.count, 2);
        assert!((s.seconds - 0.35).abs() < 1e-9, "{}", s.seconds);
        assert_eq!(s.longest_ms, 250);
        assert_eq!(s.by_category[&Category::LatchWait], 5);
        assert_eq!(s.by_category[&Category::PageRead], 1);
        assert_eq!(s.by_category[&Category::Cpu], 3);
        assert!((s.share(Category::LatchWait) - 100.0 * 5.0 / 9.0).abs() < 1e-9);
    }
}
