//! The variants tried: each index hint or `STRAIGHT_JOIN` the statement
//! carries removed (one at a time, and all of them); on a single table,
//! `FORCE INDEX` on the index chosen and on each other candidate, and each
//! other candidate ignored; on each table of a join, `FORCE INDEX` on each
//! candidate the plan did not choose (written on the statement without its
//! own hints); and two optimizer settings.

use super::plan::TableRead;

/// A variant: what it changes (as a user would write it), the session
/// settings it runs under, and its statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variant {
    pub change: String,
    pub setup: Vec<String>,
    pub sql: String,
}

/// A name in backquotes.
pub(super) fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// The variants of `sql`, whose plan reads `tables`.
pub fn variants_of(sql: &str, tables: &[TableRead]) -> Vec<Variant> {
    let mut out = vec![];
    let hints = pileup_sql::hints(sql);
    for h in &hints {
        out.push(Variant { change: format!("without {}", h.text), setup: vec![], sql: h.removed_from(sql) });
    }
    let bare = pileup_sql::without_hints(sql, &hints);
    if hints.len() > 1 {
        out.push(Variant { change: "without its hints".into(), setup: vec![], sql: bare.clone() });
    }
    let single = pileup_sql::single_table(bare.as_bytes());
    if let (Some(t), [(_, chosen, possible)]) = (&single, tables) {
        let with = |hint: &str| format!("{} {hint}{}", &bare[..t.hint_at], &bare[t.hint_at..]);
        let name = &bare[t.name.clone()];
        // FORCE INDEX on the index chosen first (the same plan without the
        // other indexes' dives), then on each other candidate, then each
        // other candidate ignored.
        let others: Vec<&String> = possible.iter().filter(|k| Some(*k) != chosen.as_ref()).take(4).collect();
        for k in chosen.iter().chain(others.iter().copied()) {
            let h = format!("FORCE INDEX ({})", ident(k));
            out.push(Variant { change: format!("FROM {name} {h}"), setup: vec![], sql: with(&h) });
        }
        for k in &others {
            let h = format!("IGNORE INDEX ({})", ident(k));
            out.push(Variant { change: format!("FROM {name} {h}"), setup: vec![], sql: with(&h) });
        }
    }
    if tables.len() > 1 {
        let refs = pileup_sql::table_refs(&bare);
        for (table, chosen, possible) in tables {
            let Some(r) = refs.iter().find(|r| &r.plan_name(&bare) == table) else { continue };
            let written = &bare[r.name.start..r.alias.as_ref().map_or(r.name.end, |a| a.end)];
            for k in possible.iter().filter(|k| Some(*k) != chosen.as_ref()).take(3) {
                let h = format!("FORCE INDEX ({})", ident(k));
                let sql = format!("{} {h}{}", &bare[..r.hint_at], &bare[r.hint_at..]);
                out.push(Variant { change: format!("{written} {h}"), setup: vec![], sql });
            }
        }
    }
    for (var, val) in [("eq_range_index_dive_limit", "10"), ("optimizer_switch", "'rowid_filter=off'")] {
        let set = format!("SET SESSION {var} = {val}");
        out.push(Variant { change: set.clone(), setup: vec![set], sql: sql.to_string() });
    }
    // One statement may come out of two variants (a hint removed that
    // FORCE INDEX puts back): the first is kept.
    let mut seen = std::collections::HashSet::new();
    out.retain(|v| seen.insert((v.setup.clone(), v.sql.clone())));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hinted_statement_is_tried_without_its_hint_and_with_the_others() {
        let sql = "SELECT COUNT(pad) FROM t FORCE INDEX (b) WHERE b > 101";
        let tables = vec![("t".to_string(), Some("b".to_string()), vec!["b".to_string(), "c".to_string()])];
        let v = variants_of(sql, &tables);
        let changes: Vec<&str> = v.iter().map(|v| v.change.as_str()).collect();
        assert_eq!(
            changes,
            [
                "without FORCE INDEX (b)",
                "FROM t FORCE INDEX (`b`)",
                "FROM t FORCE INDEX (`c`)",
                "FROM t IGNORE INDEX (`c`)",
                "SET SESSION eq_range_index_dive_limit = 10",
                "SET SESSION optimizer_switch = 'rowid_filter=off'",
            ]
        );
        assert_eq!(v[0].sql, "SELECT COUNT(pad) FROM t WHERE b > 101");
        assert_eq!(v[2].sql, "SELECT COUNT(pad) FROM t FORCE INDEX (`c`) WHERE b > 101");
        assert_eq!(v[4].sql, sql, "a setting runs the statement as logged");
        // A join: its hints removed one at a time and together.
        let j = "SELECT STRAIGHT_JOIN a.x FROM a FORCE INDEX (k) JOIN b ON a.id = b.id";
        let changes: Vec<String> = variants_of(j, &[]).into_iter().map(|v| v.change).collect();
        assert_eq!(&changes[..3], ["without STRAIGHT_JOIN", "without FORCE INDEX (k)", "without its hints"]);
        // Each table of a join: the candidates its plan did not choose.
        let j = "SELECT o.x FROM orders o JOIN items AS i ON i.o = o.id WHERE o.s = 1";
        let tables = vec![
            ("o".to_string(), Some("s".to_string()), vec!["s".to_string(), "t".to_string()]),
            ("i".to_string(), Some("o".to_string()), vec!["o".to_string(), "o2".to_string()]),
        ];
        let v = variants_of(j, &tables);
        let forced: Vec<(&str, &str)> =
            v.iter().filter(|v| v.change.contains("FORCE")).map(|v| (v.change.as_str(), v.sql.as_str())).collect();
        assert_eq!(
            forced,
            [
                (
                    "orders o FORCE INDEX (`t`)",
                    "SELECT o.x FROM orders o FORCE INDEX (`t`) JOIN items AS i ON i.o = o.id WHERE o.s = 1"
                ),
                (
                    "items AS i FORCE INDEX (`o2`)",
                    "SELECT o.x FROM orders o JOIN items AS i FORCE INDEX (`o2`) ON i.o = o.id WHERE o.s = 1"
                ),
            ]
        );
    }
}
