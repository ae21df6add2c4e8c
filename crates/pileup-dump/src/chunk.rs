//! Chunks: a table with an integer primary key (or a NOT NULL unique key on
//! one integer column) is cut into ranges of that key holding about
//! `--chunk-rows` rows each, so one large table is dumped by every thread;
//! any other table is one chunk. Ranges are computed from the key's
//! minimum and maximum in the dump's snapshot and the table's row estimate.

use serde::{Deserialize, Serialize};

/// One range of the key, `[from, to)`; `None` ends are open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub from: Option<i128>,
    pub to: Option<i128>,
}

impl Range {
    pub const ALL: Range = Range { from: None, to: None };

    /// The WHERE condition on `col` (already quoted) for this range.
    pub fn condition(&self, col: &str) -> Option<String> {
        match (self.from, self.to) {
            (None, None) => None,
            (Some(a), None) => Some(format!("{col} >= {a}")),
            (None, Some(b)) => Some(format!("{col} < {b}")),
            (Some(a), Some(b)) => Some(format!("{col} >= {a} AND {col} < {b}")),
        }
    }
}

/// Cut `[min, max]` into about `rows / chunk_rows` ranges of equal key
/// width. The first range is open below and the last open above, so rows
/// outside the bounds seen (there are none in a snapshot) cannot be lost.
pub fn ranges(min: i128, max: i128, rows: u64, chunk_rows: u64) -> Vec<Range> {
    let n = rows.div_ceil(chunk_rows.max(1)).max(1) as i128;
    let width = max.saturating_sub(min).saturating_add(1).max(1);
    let n = n.min(width);
    if n <= 1 {
        return vec![Range::ALL];
    }
    let step = (width + n - 1) / n;
    let mut out = vec![];
    let mut from = None;
    let mut at = min;
    loop {
        at += step;
        if at > max {
            out.push(Range { from, to: None });
            break;
        }
        out.push(Range { from, to: Some(at) });
        from = Some(at);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_key_without_gaps_or_overlaps() {
        let r = ranges(1, 10_000, 10_000, 2_500);
        assert_eq!(r.len(), 4);
        assert_eq!(r[0], Range { from: None, to: Some(2501) });
        assert_eq!(r[3].to, None);
        for w in r.windows(2) {
            assert_eq!(w[0].to, w[1].from);
        }
        // Every key falls in exactly one range.
        for k in [-5i128, 1, 2500, 2501, 9999, 10_000, 20_000] {
            let hits = r.iter().filter(|x| x.from.is_none_or(|a| k >= a) && x.to.is_none_or(|b| k < b)).count();
            assert_eq!(hits, 1, "key {k}");
        }
    }

    #[test]
    fn small_tables_and_narrow_keys_are_one_chunk_or_few() {
        assert_eq!(ranges(1, 100, 100, 1000), vec![Range::ALL]);
        assert_eq!(ranges(5, 5, 1_000_000, 10), vec![Range::ALL]);
        assert_eq!(ranges(0, 2, 1_000_000, 10).len(), 3);
        assert_eq!(Range::ALL.condition("`id`"), None);
        assert_eq!(Range { from: Some(3), to: Some(9) }.condition("`id`").unwrap(), "`id` >= 3 AND `id` < 9");
    }
}
