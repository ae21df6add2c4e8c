//! The indexes a table has, and those worth a second look: indexes no
//! class of the log uses, and indexes another one makes redundant.

use std::collections::{BTreeMap, BTreeSet};

use mysql::prelude::Queryable;
use serde_json::Value;

use super::candidates;

/// An index of a table, as the server has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    pub name: String,
    pub unique: bool,
    /// Its columns, lowercase, in order.
    pub columns: Vec<String>,
}

/// A table: (database, name), lowercase as written.
pub type TableName = (String, String);

/// An index listed beside the advice, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IndexNote {
    /// `db.table`.
    pub table: String,
    pub index: String,
    pub columns: Vec<String>,
    pub why: String,
}

/// The indexes of `db.table` on the server `c` reaches.
pub fn indexes(c: &mut mysql::Conn, db: &str, table: &str) -> Result<Vec<Index>, String> {
    let rows: Vec<(String, i64, String)> = c
        .exec(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (db, table),
        )
        .map_err(|e| pileup_conn::plain(&e))?;
    let mut out: Vec<Index> = vec![];
    for (name, non_unique, column) in rows {
        match out.last_mut() {
            Some(ix) if ix.name == name => ix.columns.push(column.to_lowercase()),
            _ => out.push(Index { name, unique: non_unique == 0, columns: vec![column.to_lowercase()] }),
        }
    }
    Ok(out)
}

/// Indexes whose columns lead another index of the same table (or are
/// another's): every read they serve, the longer one serves too. A unique
/// index is kept: it is a constraint.
pub fn redundant(tables: &BTreeMap<TableName, Vec<Index>>) -> Vec<IndexNote> {
    let mut out = vec![];
    for ((db, table), ixs) in tables {
        for (i, a) in ixs.iter().enumerate() {
            if a.unique {
                continue;
            }
            let covering = ixs.iter().enumerate().find(|(j, b)| {
                *j != i
                    && b.columns.len() >= a.columns.len()
                    && b.columns[..a.columns.len()] == a.columns[..]
                    // Of two with the same columns, the second is the one listed.
                    && (b.columns.len() > a.columns.len() || b.unique || *j < i)
            });
            if let Some((_, b)) = covering {
                out.push(IndexNote {
                    table: format!("{db}.{table}"),
                    index: a.name.clone(),
                    columns: a.columns.clone(),
                    why: format!("{} ({}) leads with its columns", b.name, b.columns.join(", ")),
                });
            }
        }
    }
    out
}

/// The indexes each table's reads use in `plans` (`EXPLAIN FORMAT=JSON`
/// of statements, with the statement's text to read its aliases from): a
/// table's chosen key, its rowid filter and an index merge's keys.
pub fn used(plans: &[(String, String, Value)]) -> BTreeSet<(String, String, String)> {
    fn keys(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("key", Value::String(s)) => out.push(s.clone()),
                        _ => keys(x, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
            _ => {}
        }
    }
    fn tables(v: &Value, out: &mut Vec<(String, Vec<String>)>) {
        match v {
            Value::Object(m) => {
                if let Some(t) = m.get("table_name").and_then(Value::as_str) {
                    let mut k = vec![];
                    keys(v, &mut k);
                    out.push((t.to_string(), k));
                }
                m.values().for_each(|x| tables(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| tables(x, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    for (db, sql, plan) in plans {
        let reads = candidates::tables_read(sql).unwrap_or_default();
        let mut t = vec![];
        tables(plan, &mut t);
        for (known, ks) in t {
            let known = known.to_lowercase();
            let (tdb, table) = match reads.iter().find(|r| r.known == known) {
                Some(r) => (r.db.clone().unwrap_or_else(|| db.clone()), r.table.clone()),
                None => (db.clone(), known),
            };
            for k in ks {
                out.insert((tdb.clone(), table.clone(), k));
            }
        }
    }
    out
}

/// The non-unique indexes of `tables` that no plan in `used` reads.
pub fn unused(
    tables: &BTreeMap<TableName, Vec<Index>>,
    used: &BTreeSet<(String, String, String)>,
    explained: usize,
) -> Vec<IndexNote> {
    let mut out = vec![];
    for ((db, table), ixs) in tables {
        for ix in ixs.iter().filter(|ix| !ix.unique) {
            if !used.contains(&(db.clone(), table.clone(), ix.name.clone())) {
                out.push(IndexNote {
                    table: format!("{db}.{table}"),
                    index: ix.name.clone(),
                    columns: ix.columns.clone(),
                    why: format!(
                        "no plan of the {} explained uses it",
                        pileup_output::plural(explained, "statement of the log", "statements of the log")
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ix(name: &str, unique: bool, cols: &[&str]) -> Index {
        Index { name: name.into(), unique, columns: cols.iter().map(|c| c.to_string()).collect() }
    }

    #[test]
    fn a_prefix_of_another_index_is_redundant_and_a_unique_one_is_kept() {
        let mut t = BTreeMap::new();
        t.insert(
            ("d".to_string(), "t".to_string()),
            vec![
                ix("PRIMARY", true, &["id"]),
                ix("a", false, &["a"]),
                ix("a_b", false, &["a", "b"]),
                ix("b", false, &["b"]),
                ix("b2", false, &["b"]),
                ix("u", true, &["c"]),
                ix("c_d", false, &["c", "d"]),
            ],
        );
        let got: Vec<(String, String)> = redundant(&t).into_iter().map(|n| (n.index, n.why)).collect();
        assert_eq!(
            got,
            [
                ("a".to_string(), "a_b (a, b) leads with its columns".to_string()),
                ("b2".into(), "b (b) leads with its columns".into())
            ]
        );
    }

    #[test]
    fn an_index_no_plan_reads_is_unused_and_aliases_are_resolved() {
        let plan: Value = serde_json::from_str(
            r#"{"query_block": {"nested_loop": [
                {"table": {"table_name": "o", "access_type": "ref", "key": "cust"}},
                {"table": {"table_name": "i", "access_type": "ref", "key": "ord",
                  "rowid_filter": {"range": {"key": "sku"}}}}]}}"#,
        )
        .unwrap();
        let sql = "SELECT 1 FROM orders o JOIN shop.items i ON i.o = o.id WHERE o.c = 1";
        let u = used(&[("d".into(), sql.into(), plan)]);
        assert!(u.contains(&("d".into(), "orders".into(), "cust".into())));
        assert!(u.contains(&("shop".into(), "items".into(), "sku".into())));
        let mut t = BTreeMap::new();
        t.insert(("d".to_string(), "orders".to_string()), vec![ix("cust", false, &["c"]), ix("old", false, &["x"])]);
        let got: Vec<String> = unused(&t, &u, 1).into_iter().map(|n| n.index).collect();
        assert_eq!(got, ["old"]);
    }
}
