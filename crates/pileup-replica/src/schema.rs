//! Table definitions as the replica has them: columns in binlog order
//! (ordinal position) and every index with its columns, from
//! information_schema (which takes no table locks).

use crate::error::ReplicaError;

type Result<T> = std::result::Result<T, ReplicaError>;
use mysql::prelude::Queryable;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// `int unsigned`, `bigint unsigned`, ...
    pub unsigned: bool,
    /// information_schema DATA_TYPE: `int`, `varchar`, `timestamp`, ...
    pub data_type: String,
    /// The column admits NULL (information_schema IS_NULLABLE).
    pub nullable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub name: String,
    pub unique: bool,
    /// Columns (0-based positions in the table), in index order.
    pub columns: Vec<usize>,
}

impl Index {
    pub fn is_primary(&self) -> bool {
        self.name == "PRIMARY"
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub schema: String,
    pub name: String,
    pub columns: Vec<Column>,
    /// The primary key first (if any), then the other indexes by name.
    pub indexes: Vec<Index>,
}

impl Table {
    pub fn primary(&self) -> Option<&Index> {
        self.indexes.first().filter(|i| i.is_primary())
    }

    /// Columns that name exactly one entry of index `ix`: its own columns,
    /// and for a non-unique secondary index the primary key columns that
    /// InnoDB appends to every entry. Looking up only the index columns of
    /// a non-unique index would read every entry with that value, possibly
    /// many leaves, where the applier touches one.
    pub fn entry_columns(&self, ix: usize) -> Vec<usize> {
        let index = &self.indexes[ix];
        let mut cols = index.columns.clone();
        if !index.unique && !index.is_primary() {
            if let Some(pk) = self.primary() {
                cols.extend(pk.columns.iter().filter(|c| !index.columns.contains(c)));
            }
        }
        cols
    }

    /// Build from information_schema rows: columns as (ordinal, name,
    /// column_type, data_type); index parts as (index, non_unique,
    /// seq_in_index, column name).
    pub fn from_parts(
        schema: &str,
        name: &str,
        cols: &[(u32, String, String, String)],
        parts: &[(String, bool, u32, String)],
    ) -> Result<Table> {
        let mut columns: Vec<(u32, Column)> = cols
            .iter()
            .map(|(pos, n, column_type, data_type)| {
                (
                    *pos,
                    Column {
                        name: n.clone(),
                        unsigned: column_type.contains("unsigned"),
                        data_type: data_type.to_lowercase(),
                        nullable: false,
                    },
                )
            })
            .collect();
        columns.sort_by_key(|(p, _)| *p);
        let columns: Vec<Column> = columns.into_iter().map(|(_, c)| c).collect();
        if columns.is_empty() {
            return Err(ReplicaError::NoTable { schema: schema.into(), name: name.into() });
        }
        // Index name → (unique, [(position in the index, column)]).
        type Parts = (bool, Vec<(u32, usize)>);
        let mut by_index: std::collections::BTreeMap<&str, Parts> = Default::default();
        for (idx, non_unique, seq, col) in parts {
            let Some(pos) = columns.iter().position(|c| &c.name == col) else { continue };
            let e = by_index.entry(idx.as_str()).or_insert((!non_unique, vec![]));
            e.1.push((*seq, pos));
        }
        let mut indexes: Vec<Index> = by_index
            .into_iter()
            .map(|(n, (unique, mut cs))| {
                cs.sort();
                Index { name: n.to_string(), unique, columns: cs.into_iter().map(|(_, p)| p).collect() }
            })
            .collect();
        indexes.sort_by_key(|i| (!i.is_primary(), i.name.clone()));
        Ok(Table { schema: schema.into(), name: name.into(), columns, indexes })
    }

    /// Read a table's definition from the server.
    pub fn load(c: &mut mysql::Conn, schema: &str, name: &str) -> Result<Table> {
        let rows: Vec<(u32, String, String, String, String)> = c.exec(
            "SELECT ORDINAL_POSITION, COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, IS_NULLABLE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (schema, name),
        )
        .map_err(ReplicaError::sql("reading information_schema.COLUMNS"))?;
        let nullable: Vec<String> = rows.iter().filter(|r| r.4 == "YES").map(|r| r.1.clone()).collect();
        let cols: Vec<(u32, String, String, String)> =
            rows.into_iter().map(|(p, n, ct, dt, _)| (p, n, ct, dt)).collect();
        let parts: Vec<(String, i64, u32, String)> = c.exec(
            "SELECT INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (schema, name),
        )
        .map_err(ReplicaError::sql("reading information_schema.STATISTICS"))?;
        let parts: Vec<(String, bool, u32, String)> =
            parts.into_iter().map(|(i, nu, s, c)| (i, nu != 0, s, c)).collect();
        let mut t = Table::from_parts(schema, name, &cols, &parts)?;
        for col in t.columns.iter_mut() {
            col.nullable = nullable.contains(&col.name);
        }
        Ok(t)
    }
}
