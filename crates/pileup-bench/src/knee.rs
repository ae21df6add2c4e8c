//! Reading a curve: where it bends (the knee), what shape it has, and
//! where the machine, not the server, is the limit. Pure functions of the
//! measured points.

use serde::{Deserialize, Serialize};

/// A curve's shape, from its medians.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Still rising at the most threads measured (within 5% of its best there).
    Rising,
    /// Reaches its best, then holds within 20% of it.
    Plateau,
    /// Falls to between half and 80% of its best.
    Declining,
    /// Falls below half of its best: more threads, much less work.
    Collapsing,
}

impl Shape {
    pub fn describe(self) -> &'static str {
        match self {
            Shape::Rising => "still rising at the most threads measured",
            Shape::Plateau => "flat past its knee",
            Shape::Declining => "declining past its knee",
            Shape::Collapsing => "collapsing past its knee",
        }
    }
}

/// The index of the knee among `points` (threads, median), sorted by
/// threads: the fewest threads whose median reaches 95% of the best.
/// Past it, threads buy less than 5% more. A curve has a knee only where
/// it bends: none while it still rises at the most threads measured, and
/// none on fewer than two points.
pub fn knee(points: &[(u32, f64)]) -> Option<usize> {
    let best = points.iter().map(|p| p.1).filter(|v| v.is_finite()).fold(f64::NAN, f64::max);
    if !best.is_finite() || best <= 0.0 || points.len() < 2 || shape(points) == Some(Shape::Rising) {
        return None;
    }
    points.iter().position(|p| p.1 >= 0.95 * best)
}

/// The shape of `points` (threads, median), sorted by threads.
pub fn shape(points: &[(u32, f64)]) -> Option<Shape> {
    let best = points.iter().map(|p| p.1).filter(|v| v.is_finite()).fold(f64::NAN, f64::max);
    let last = points.last()?.1;
    if !best.is_finite() || best <= 0.0 || !last.is_finite() {
        return None;
    }
    let r = last / best;
    Some(if r >= 0.95 && points.len() > 1 && points[points.len() - 2].1 < last * 0.95 {
        Shape::Rising
    } else if r >= 0.8 {
        Shape::Plateau
    } else if r >= 0.5 {
        Shape::Declining
    } else {
        Shape::Collapsing
    })
}

/// Whether a window was bound by the machine's CPUs: the server and the
/// driver together used at least 85% of every core.
pub fn cpu_bound(server_cpu_s: Option<f64>, driver_cpu_s: f64, seconds: f64, cores: usize) -> bool {
    match server_cpu_s {
        Some(s) if seconds > 0.0 => (s + driver_cpu_s) / seconds >= 0.85 * cores as f64,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published hot-row curve: 20k/s at 1 thread, 14k at 10, 3k at
    /// 50, 639 at 100, 266 at 140.
    const HOT_ROW_2011: [(u32, f64); 5] = [(1, 20000.0), (10, 14000.0), (50, 3000.0), (100, 639.0), (140, 266.0)];

    #[test]
    fn a_collapse_has_its_knee_at_the_start() {
        assert_eq!(knee(&HOT_ROW_2011), Some(0));
        assert_eq!(shape(&HOT_ROW_2011), Some(Shape::Collapsing));
    }

    #[test]
    fn a_curve_that_saturates_has_its_knee_where_it_flattens() {
        let p = [(1, 10000.0), (10, 40000.0), (50, 41000.0), (100, 40500.0), (200, 39000.0)];
        assert_eq!(knee(&p), Some(1));
        assert_eq!(shape(&p), Some(Shape::Plateau));
    }

    #[test]
    fn a_rising_curve_has_no_knee() {
        let p = [(1, 1000.0), (2, 1900.0), (4, 3700.0)];
        assert_eq!(knee(&p), None);
        assert_eq!(shape(&p), Some(Shape::Rising));
        assert_eq!(knee(&[(8, 5000.0)]), None, "one point cannot bend");
    }

    #[test]
    fn today_s_hot_row_is_flat() {
        // 10-19k/s from 1 to 200 threads, as measured on MariaDB 10.11.
        let p = [(1, 10200.0), (10, 18800.0), (50, 16500.0), (100, 15900.0), (200, 15400.0)];
        assert_eq!(knee(&p), Some(1));
        assert_eq!(shape(&p), Some(Shape::Plateau));
    }

    #[test]
    fn a_decline_is_told_from_a_collapse() {
        let p = [(1, 100.0), (10, 300.0), (100, 200.0)];
        assert_eq!(shape(&p), Some(Shape::Declining));
    }

    #[test]
    fn nothing_measured_has_no_knee() {
        assert_eq!(knee(&[]), None);
        assert_eq!(knee(&[(1, 0.0)]), None);
        assert_eq!(shape(&[(1, f64::NAN)]), None);
    }

    #[test]
    fn cpu_bound_needs_both_cores_busy() {
        assert!(cpu_bound(Some(15.0), 2.5, 10.0, 2));
        assert!(!cpu_bound(Some(8.0), 1.0, 10.0, 2));
        assert!(!cpu_bound(None, 20.0, 10.0, 2), "unknown without the server's CPU");
    }
}
