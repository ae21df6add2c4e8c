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
    /// A B-tree over whole columns: the only kind compared with candidates
    /// and with other indexes (a FULLTEXT or SPATIAL index, or one on a
    /// column's prefix, serves other reads).
    pub plain: bool,
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
    type Part = (String, i64, String, String, Option<u64>);
    let rows: Vec<Part> = c
        .exec(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME, INDEX_TYPE, SUB_PART FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (db, table),
        )
        .map_err(|e| pileup_conn::plain(&e))?;
    let mut out: Vec<Index> = vec![];
    for (name, non_unique, column, kind, sub_part) in rows {
        let plain = kind.eq_ignore_ascii_case("BTREE") && sub_part.is_none();
        match out.last_mut() {
            Some(ix) if ix.name == name => {
                ix.columns.push(column.to_lowercase());
                ix.plain &= plain;
            }
            _ => out.push(Index { name, unique: non_unique == 0, columns: vec![column.to_lowercase()], plain }),
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
            if a.unique || !a.plain {
                continue;
            }
            let covering = ixs.iter().enumerate().find(|(j, b)| {
                *j != i
                    && b.plain
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

/// A table as statements and plans are matched against it: (database,
/// table), lowercase.
pub type Key = (String, String);

/// Does the fingerprint `fp` (lowercase) name `table` as a word?
pub fn names(fp: &str, table: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    fp.match_indices(table).any(|(i, _)| {
        !fp[..i].chars().next_back().is_some_and(ident) && !fp[i + table.len()..].chars().next().is_some_and(ident)
    })
}

/// The indexes one plan (`EXPLAIN FORMAT=JSON` of `sql`, run in `db`)
/// reads on each table: a table's chosen key, its rowid filter and an index
/// merge's keys. The second value says whether a table of the plan could
/// not be told from its name (an alias the parser could not read, a
/// derived table): then what it reads is unknown.
pub fn plan_reads(db: &str, sql: &str, plan: &Value, known: &BTreeSet<Key>) -> (Vec<(Key, String)>, bool) {
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
    let reads = candidates::tables_read(sql).unwrap_or_default();
    let mut t = vec![];
    tables(plan, &mut t);
    let (mut out, mut unresolved) = (vec![], false);
    for (name, ks) in t {
        let name = name.to_lowercase();
        let key = match reads.iter().find(|r| r.known == name) {
            Some(r) => (r.db.clone().unwrap_or_else(|| db.to_string()).to_lowercase(), r.table.to_lowercase()),
            None => {
                // Not a name the parse gave: a table of ours by its name,
                // or something the plan made (an alias, a derived table).
                let key = (db.to_lowercase(), name);
                unresolved |= !known.contains(&key);
                key
            }
        };
        out.extend(ks.into_iter().map(|k| (key.clone(), k)));
    }
    (out, unresolved)
}

/// The non-unique indexes of `tables` that no plan in `used` reads, for
/// each table whose statements were all explained (`explained` of them
/// name it; a table in `incomplete` is left out).
pub fn unused(
    tables: &BTreeMap<TableName, Vec<Index>>,
    used: &BTreeSet<(Key, String)>,
    explained: &BTreeMap<Key, usize>,
    incomplete: &BTreeSet<Key>,
) -> Vec<IndexNote> {
    let mut out = vec![];
    for ((db, table), ixs) in tables {
        let key = (db.to_lowercase(), table.to_lowercase());
        let n = explained.get(&key).copied().unwrap_or(0);
        if incomplete.contains(&key) || n == 0 {
            continue;
        }
        for ix in ixs.iter().filter(|ix| !ix.unique) {
            if !used.contains(&(key.clone(), ix.name.clone())) {
                out.push(IndexNote {
                    table: format!("{db}.{table}"),
                    index: ix.name.clone(),
                    columns: ix.columns.clone(),
                    why: format!(
                        "no plan of the {} naming the table uses it",
                        pileup_output::plural(n, "statement of the log", "statements of the log")
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
        Index { name: name.into(), unique, columns: cols.iter().map(|c| c.to_string()).collect(), plain: true }
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
                Index { plain: false, ..ix("ft_a", false, &["a"]) },
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
        let known: BTreeSet<Key> =
            [("d".to_string(), "orders".to_string()), ("shop".into(), "items".into())].into_iter().collect();
        let sql = "SELECT 1 FROM Orders o JOIN shop.items i ON i.o = o.id WHERE o.c = 1";
        let (reads, unresolved) = plan_reads("D", sql, &plan, &known);
        assert!(!unresolved);
        let used: BTreeSet<(Key, String)> = reads.into_iter().collect();
        assert!(used.contains(&(("d".into(), "orders".into()), "cust".into())));
        assert!(used.contains(&(("shop".into(), "items".into()), "sku".into())));
        let mut t = BTreeMap::new();
        t.insert(
            ("D".to_string(), "Orders".to_string()),
            vec![ix("cust", false, &["c"]), ix("old", false, &["x"]), ix("u", true, &["y"])],
        );
        let explained = [(("d".to_string(), "orders".to_string()), 1)].into_iter().collect();
        let got: Vec<String> = unused(&t, &used, &explained, &BTreeSet::new()).into_iter().map(|n| n.index).collect();
        assert_eq!(got, ["old"]);
        // A table whose statements were not all read lists nothing.
        let incomplete = [("d".to_string(), "orders".to_string())].into_iter().collect();
        assert!(unused(&t, &used, &explained, &incomplete).is_empty());
        // An alias the plan names that no parse resolves: unknown.
        let upd: Value =
            serde_json::from_str(r#"{"query_block": {"table": {"update": 1, "table_name": "a", "key": "k"}}}"#)
                .unwrap();
        assert!(plan_reads("d", "UPDATE orders a SET x = 1 WHERE a.k = 2", &upd, &known).1);
        assert!(names("update orders a set x = ?", "orders") && !names("select * from orders2", "orders"));
    }
}
