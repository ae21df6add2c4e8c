//! Orders of classes: by what they cost, or by how badly they read.

use crate::attr::{A, F_FILESORT, F_FILESORT_ON_DISK, F_TMP_TABLE, F_TMP_TABLE_ON_DISK};
use crate::class::Class;

/// A ranking of classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    /// Total query time (the default).
    Time,
    /// Executions.
    Count,
    /// Rows examined per row returned or changed.
    Examined,
    /// Pages accessed per row returned or changed.
    Pages,
    /// Share of the time spent outside the engine (optimization), for
    /// classes where that time is large enough to be a plan's and holds no
    /// sort or temporary table.
    Optimizer,
    /// Sorts and temporary tables that went to disk.
    Spill,
    /// Time waiting for locks (table locks, and row locks where logged).
    Lock,
}

impl Rank {
    pub const ALL: &'static [(&'static str, Rank, &'static str)] = &[
        ("time", Rank::Time, "total query time"),
        ("count", Rank::Count, "executions"),
        ("examined", Rank::Examined, "rows examined per row returned or changed"),
        ("pages", Rank::Pages, "pages accessed per row returned or changed"),
        ("optimizer", Rank::Optimizer, "share of the time spent outside the engine (optimizer)"),
        ("spill", Rank::Spill, "sorts and temporary tables that went to disk"),
        ("lock", Rank::Lock, "time waiting for locks"),
    ];

    pub fn name(self) -> &'static str {
        Rank::ALL.iter().find(|r| r.1 == self).map_or("time", |r| r.0)
    }

    pub fn parse(s: &str) -> Option<Rank> {
        Rank::ALL.iter().find(|r| r.0 == s).map(|r| r.1)
    }

    /// What a class's score under this ranking reads beyond its count and
    /// statement time: attributes, and plan flags (indices of
    /// [`crate::attr::FLAGS`]).
    pub fn reads(self) -> (&'static [A], &'static [usize]) {
        match self {
            Rank::Time | Rank::Count => (&[], &[]),
            Rank::Examined => (&[A::RowsExamined, A::RowsSent, A::RowsAffected], &[]),
            Rank::Pages => (&[A::PagesAccessed, A::PagesDistinct, A::RowsSent, A::RowsAffected], &[]),
            Rank::Optimizer => (&[A::OptimizerTime, A::EngineTime], &[F_FILESORT, F_TMP_TABLE]),
            Rank::Spill => (&[A::TmpDiskTables, A::MergePasses], &[F_FILESORT_ON_DISK, F_TMP_TABLE_ON_DISK]),
            Rank::Lock => (&[A::LockTime, A::RowLockWait], &[]),
        }
    }
}

/// Rows a class returned or changed (at least one per execution, so a
/// statement that finds nothing still divides).
fn rows_out(c: &Class) -> f64 {
    (c.sum(A::RowsSent) + c.sum(A::RowsAffected)).max(c.count as f64)
}

/// Rows examined per row returned or changed; None when not logged.
pub fn examined_per_row(c: &Class) -> Option<f64> {
    c.stat(A::RowsExamined).map(|s| s.sum / rows_out(c))
}

/// Pages accessed (MariaDB) or distinct pages (Percona) per row returned
/// or changed.
pub fn pages_per_row(c: &Class) -> Option<f64> {
    c.stat(A::PagesAccessed).or(c.stat(A::PagesDistinct)).map(|s| s.sum / rows_out(c))
}

/// Below this mean time outside the engine, a class's optimizer share
/// measures its round trip and parsing, not a plan, and is not ranked.
pub const OPTIMIZER_FLOOR_S: f64 = 0.000_5;

/// Share of the statement time spent outside the engine, over the
/// statements that logged `Engine_time`.
pub fn optimizer_share(c: &Class) -> Option<f64> {
    let o = c.stat(A::OptimizerTime)?;
    let e = c.stat(A::EngineTime)?;
    let total = o.sum + e.sum;
    (total > 0.0).then(|| o.sum / total)
}

/// Executions whose sort or temporary table went to disk.
pub fn spills(c: &Class) -> u64 {
    u64::from(c.flags[F_FILESORT_ON_DISK].1.max(c.flags[F_TMP_TABLE_ON_DISK].1)).max(c.sum(A::TmpDiskTables) as u64)
}

/// The score a class ranks by (higher first); None: not ranked by it.
pub fn score(c: &Class, r: Rank) -> Option<f64> {
    match r {
        Rank::Time => Some(c.sum(A::QueryTime)),
        Rank::Count => Some(c.count as f64),
        Rank::Examined => examined_per_row(c),
        Rank::Pages => pages_per_row(c),
        Rank::Optimizer => {
            let o = c.stat(A::OptimizerTime)?;
            // A sort or a temporary table is work outside the engine too.
            let sorts = c.flags[F_FILESORT].1 + c.flags[F_TMP_TABLE].1 > 0;
            (o.mean() >= OPTIMIZER_FLOOR_S && !sorts).then(|| optimizer_share(c)).flatten()
        }
        Rank::Spill => {
            let s = spills(c);
            (s > 0).then(|| s as f64 + c.sum(A::MergePasses) / 1e9)
        }
        Rank::Lock => Some(c.sum(A::LockTime) + c.sum(A::RowLockWait)),
    }
}

/// Indices of `classes` in the order of `r`: ranked classes first, highest
/// score first, ties by total time, then by fingerprint; unranked classes
/// after, by total time. Each class's key is computed once.
fn order_indices(classes: &[Class], r: Rank) -> Vec<usize> {
    let mut keys: Vec<(bool, f64, f64, usize)> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let s = score(c, r);
            (s.is_some(), s.unwrap_or(0.0), c.sum(A::QueryTime), i)
        })
        .collect();
    keys.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| b.1.total_cmp(&a.1))
            .then_with(|| b.2.total_cmp(&a.2))
            .then_with(|| classes[a.3].fingerprint.cmp(&classes[b.3].fingerprint))
    });
    keys.into_iter().map(|k| k.3).collect()
}

/// The classes in the order of `r` (see [`order_indices`]), without copying
/// them.
pub fn order(classes: &[Class], r: Rank) -> Vec<&Class> {
    order_indices(classes, r).into_iter().map(|i| &classes[i]).collect()
}

/// Sort classes in place in the order of `r`: the permutation is applied
/// cycle by cycle with swaps, so tens of thousands of classes are not
/// copied into new memory.
pub fn sort(classes: &mut [Class], r: Rank) {
    let mut from = order_indices(classes, r);
    for i in 0..from.len() {
        // Position j takes the class at from[j]; a visited position is
        // marked with usize::MAX.
        let mut j = i;
        while from[j] != usize::MAX {
            let k = std::mem::replace(&mut from[j], usize::MAX);
            if k == i {
                break;
            }
            classes.swap(j, k);
            j = k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::{Name, Summary};

    /// Sorting in place gives the order `order` gives, for permutations
    /// of every shape (fixed points, long cycles, ties broken by
    /// fingerprint).
    #[test]
    fn sorting_in_place_gives_the_ranked_order() {
        let mut seed = 5u64;
        for n in [0usize, 1, 2, 3, 10, 257] {
            let mut classes: Vec<Class> = (0..n)
                .map(|i| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let mut c = Class::new(format!("select {i}").into_bytes().into());
                    let t = [(A::QueryTime, ((seed >> 40) % 7) as f64)];
                    let sm = Summary { n: 1, sums: &t, flags: &[], db: b"d", last: None, sample: b"" };
                    c.add_summary(&sm, &mut |v| Name::from(v));
                    c
                })
                .collect();
            let want: Vec<Box<[u8]>> = order(&classes, Rank::Time).iter().map(|c| c.fingerprint.clone()).collect();
            sort(&mut classes, Rank::Time);
            let got: Vec<Box<[u8]>> = classes.iter().map(|c| c.fingerprint.clone()).collect();
            assert_eq!(got, want, "{n} classes");
        }
    }
}
