//! Keys to statements: batched lookups that read an index's leaves and
//! nothing else.
//!
//! `SELECT <index columns> FROM t FORCE INDEX (<index>) WHERE <keys>`: the
//! select list is the index's own columns, so the lookup is index-only (a
//! secondary index entry holds the primary key too); for the primary key
//! this reads the clustered leaf, which is the row. Plain SELECTs in
//! autocommit are consistent reads: they take no row locks and never make
//! the applier wait.

use crate::plan::{Key, KeyValue};
use pileup_replica::schema::Table;

fn ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// The statement for up to `keys.len()` keys of one index, and its
/// parameters in order. Keys must all belong to `index`.
pub fn lookup(t: &Table, index: usize, keys: &[&Key]) -> (String, Vec<mysql::Value>) {
    let ix = &t.indexes[index];
    let cols: Vec<String> = t.entry_columns(index).iter().map(|&c| ident(&t.columns[c].name)).collect();
    let mut params = Vec::with_capacity(keys.len() * cols.len());
    let mut conds: Vec<String> = Vec::with_capacity(keys.len());
    let placeholder = |v: &KeyValue| if matches!(v, KeyValue::Epoch(..)) { "FROM_UNIXTIME(?)" } else { "?" };
    if cols.len() == 1 && keys.iter().all(|k| k.values[0] != KeyValue::Null) {
        let list: Vec<&str> = keys.iter().map(|k| placeholder(&k.values[0])).collect();
        conds.push(format!("{} IN ({})", cols[0], list.join(", ")));
        params.extend(keys.iter().map(|k| param(&k.values[0])));
    } else {
        for k in keys {
            let parts: Vec<String> =
                cols.iter()
                    .zip(&k.values)
                    .map(|(c, v)| {
                        if *v == KeyValue::Null {
                            format!("{c} IS NULL")
                        } else {
                            format!("{c} = {}", placeholder(v))
                        }
                    })
                    .collect();
            conds.push(format!("({})", parts.join(" AND ")));
            params.extend(k.values.iter().filter(|v| **v != KeyValue::Null).map(param));
        }
    }
    let sql = format!(
        "SELECT {} FROM {}.{} FORCE INDEX ({}) WHERE {}",
        cols.join(", "),
        ident(&t.schema),
        ident(&t.name),
        ident(&ix.name),
        conds.join(" OR ")
    );
    (sql, params)
}

fn param(v: &KeyValue) -> mysql::Value {
    match v {
        KeyValue::Null => mysql::Value::NULL,
        KeyValue::Int(i) => mysql::Value::Int(*i),
        KeyValue::UInt(u) => mysql::Value::UInt(*u),
        KeyValue::Text(b) => mysql::Value::Bytes(b.clone()),
        KeyValue::Epoch(s, us) => {
            mysql::Value::Bytes(if *us > 0 { format!("{s}.{us:06}") } else { s.to_string() }.into_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let cols = vec![
            (1, "id".to_string(), "int(11)".to_string(), "int".to_string()),
            (2, "a".into(), "varchar(10)".into(), "varchar".into()),
            (3, "ts".into(), "timestamp".into(), "timestamp".into()),
        ];
        let parts = vec![
            ("PRIMARY".to_string(), false, 1, "id".to_string()),
            ("a_ts".into(), false, 1, "a".into()),
            ("a_ts".into(), false, 2, "ts".into()),
        ];
        Table::from_parts("d", "t`x", &cols, &parts).unwrap()
    }

    #[test]
    fn single_column_keys_become_one_in_list() {
        let t = table();
        let (a, b) =
            (Key { index: 0, values: vec![KeyValue::Int(1)] }, Key { index: 0, values: vec![KeyValue::Int(2)] });
        let (sql, p) = lookup(&t, 0, &[&a, &b]);
        assert_eq!(sql, "SELECT `id` FROM `d`.`t``x` FORCE INDEX (`PRIMARY`) WHERE `id` IN (?, ?)");
        assert_eq!(p, vec![mysql::Value::Int(1), mysql::Value::Int(2)]);
    }

    #[test]
    fn composite_keys_nulls_and_timestamps() {
        let t = table();
        let a = Key { index: 1, values: vec![KeyValue::Text(b"x".to_vec()), KeyValue::Epoch(10, 0)] };
        let b = Key { index: 1, values: vec![KeyValue::Null, KeyValue::Epoch(11, 500)] };
        let (sql, p) = lookup(&t, 1, &[&a, &b]);
        assert_eq!(sql, "SELECT `a`, `ts` FROM `d`.`t``x` FORCE INDEX (`a_ts`) WHERE (`a` = ? AND `ts` = FROM_UNIXTIME(?)) OR (`a` IS NULL AND `ts` = FROM_UNIXTIME(?))");
        assert_eq!(p.len(), 3);
        assert_eq!(p[2], mysql::Value::Bytes(b"11.000500".to_vec()));
    }
}
