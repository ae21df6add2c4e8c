//! Statement events → reads.
//!
//! MariaDB's default binlog_format is MIXED, so most writes reach a replica
//! as SQL text. A statement is turned into the reads its execution will do:
//!
//! * `UPDATE`/`DELETE … WHERE`: `SELECT <primary key and affected index
//!   columns> FROM t WHERE <the same condition>` reads the rows (their
//!   clustered leaves, through the index the WHERE uses); the values it
//!   returns name the secondary index entries the write will delete-mark,
//!   and for an UPDATE whose SET assigns a literal or `col = col ± literal`
//!   also the place of the new entry, which are then looked up like a row
//!   event's keys.
//! * `INSERT`/`REPLACE … VALUES`: the literal values are the keys: primary
//!   key, unique checks and the insert position in every index whose
//!   columns are all given.
//!
//! Parsing is done once per statement shape: the text is first reduced to a
//! fingerprint (literals replaced by `?`, the literals kept in order) by a
//! small lexer, and the fingerprint is parsed with `sqlparser` into a
//! [`Template`] cached under it. Uniform statements (one shape, new
//! literals) then cost a lexer pass and a hash lookup. The lexer is written
//! here because it must keep the literals' positions and values, which a
//! SQL parser's tokenizer does not hand back in a reusable form; it knows
//! MySQL's literal syntax only (strings with escapes and introducers,
//! numbers, hex and bit literals), everything else is copied.
//!
//! A statement predicted to be slow is skipped: one whose WHERE has no
//! equality or IN on the first column of any index (it would scan), a
//! multi-table statement, or a statement with subqueries.

use std::collections::HashMap;
use std::sync::Arc;

use sqlparser::ast::{
    AssignmentTarget, BinaryOperator, Expr, FromTable, SetExpr, Statement, TableFactor, TableObject, Value as SqlValue,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use pileup_replica::schema::Table;
use pileup_replica::statement::table_of;
pub use pileup_replica::statement::{fingerprint, Literal};

use super::row::{Key, KeyValue};

/// A literal as an index key value (an index on a float column is not
/// looked up by equality).
fn key_value(l: &Literal) -> Option<KeyValue> {
    Some(match l {
        Literal::Int(i) => KeyValue::Int(*i),
        Literal::UInt(u) => KeyValue::UInt(*u),
        Literal::Text(t) => KeyValue::Text(t.clone()),
        Literal::Null => KeyValue::Null,
        Literal::Double(_) => return None,
    })
}

/// Why a statement gave no reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StmtSkip {
    /// Not UPDATE/DELETE/INSERT/REPLACE (BEGIN, COMMIT, SET, DDL…).
    NotAWrite,
    /// The parser did not accept it.
    Unparsed,
    /// Multi-table, subqueries, INSERT … SELECT, no WHERE: predicted slow or
    /// not expressible as a read.
    Unsupported,
    /// The WHERE does not use an index: the read would scan.
    NotIndexed,
}

/// How a SET assignment computes the new value.
#[derive(Debug, Clone, PartialEq)]
enum SetValue {
    Param(usize),
    /// `col = col + ?` (true) or `col = col - ?` (false).
    Add(usize, bool),
    Null,
    Unknown,
}

/// One VALUES slot of an INSERT.
#[derive(Debug, Clone, PartialEq)]
enum Slot {
    Param(usize),
    Unknown,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// UPDATE (with assignments) or DELETE (none).
    Rows {
        delete: bool,
        where_sql: String,
        /// Literal numbers of the WHERE's placeholders, in order.
        where_params: Vec<usize>,
        limit: Option<u64>,
        /// Columns an equality or IN in the WHERE pins (lower case).
        eq_columns: Vec<String>,
        set: Vec<(String, SetValue)>,
    },
    Insert {
        columns: Vec<String>,
        rows: Vec<Vec<Slot>>,
    },
}

/// A parsed statement shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// (schema or None for the statement's default database, table).
    pub table: (Option<String>, String),
    kind: Kind,
}

fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(i) => Some(i.value.to_lowercase()),
        Expr::CompoundIdentifier(p) => p.last().map(|i| i.value.to_lowercase()),
        Expr::Nested(x) => column_name(x),
        _ => None,
    }
}

fn is_placeholder(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(v.value, SqlValue::Placeholder(_)))
}

/// Columns pinned by `col = ?`/`col IN (…)` at the top level of a WHERE;
/// None when the WHERE holds what this module does not read (subqueries).
fn eq_columns(e: &Expr, out: &mut Vec<String>) -> bool {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => eq_columns(left, out) && eq_columns(right, out),
        Expr::BinaryOp { left, op: BinaryOperator::Eq, right } => {
            if let (Some(c), true) = (column_name(left), is_placeholder(right)) {
                out.push(c);
            } else if let (Some(c), true) = (column_name(right), is_placeholder(left)) {
                out.push(c);
            }
            true
        }
        Expr::InList { expr, list, negated: false } if list.iter().all(is_placeholder) => {
            if let Some(c) = column_name(expr) {
                out.push(c);
            }
            true
        }
        Expr::Nested(x) => eq_columns(x, out),
        Expr::Subquery(_) | Expr::InSubquery { .. } | Expr::Exists { .. } => false,
        _ => !format!("{e}").to_ascii_uppercase().contains("SELECT"),
    }
}

fn set_value(col: &str, e: &Expr, pos: usize) -> SetValue {
    match e {
        _ if is_placeholder(e) => SetValue::Param(pos),
        Expr::BinaryOp { left, op, right } if column_name(left).as_deref() == Some(col) && is_placeholder(right) => {
            match op {
                BinaryOperator::Plus => SetValue::Add(pos, true),
                BinaryOperator::Minus => SetValue::Add(pos, false),
                _ => SetValue::Unknown,
            }
        }
        Expr::Nested(x) => set_value(col, x, pos),
        _ => SetValue::Unknown,
    }
}

fn placeholders(text: &str) -> usize {
    text.bytes().filter(|b| *b == b'?').count()
}

fn limit_value(e: &Option<Expr>) -> Option<u64> {
    match e {
        Some(Expr::Value(v)) => match &v.value {
            SqlValue::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

impl Template {
    /// Parse a fingerprint (see [`fingerprint`]).
    pub fn parse(fp: &str) -> Result<Template, StmtSkip> {
        let head = fp.trim_start().get(..7).unwrap_or("").to_ascii_uppercase();
        if !(head.starts_with("UPDATE")
            || head.starts_with("DELETE")
            || head.starts_with("INSERT")
            || head.starts_with("REPLACE"))
        {
            return Err(StmtSkip::NotAWrite);
        }
        let mut st = Parser::parse_sql(&MySqlDialect {}, fp).map_err(|_| StmtSkip::Unparsed)?;
        if st.len() != 1 {
            return Err(StmtSkip::Unsupported);
        }
        match st.remove(0) {
            Statement::Update(u) => {
                if !u.table.joins.is_empty() || u.from.is_some() {
                    return Err(StmtSkip::Unsupported);
                }
                let TableFactor::Table { name, .. } = &u.table.relation else { return Err(StmtSkip::Unsupported) };
                let table = table_of(name).ok_or(StmtSkip::Unsupported)?;
                let selection = u.selection.ok_or(StmtSkip::NotIndexed)?;
                let mut pos = 0;
                let mut set = vec![];
                for a in &u.assignments {
                    let AssignmentTarget::ColumnName(c) = &a.target else { return Err(StmtSkip::Unsupported) };
                    let col =
                        c.0.last()
                            .and_then(|p| p.as_ident())
                            .map(|i| i.value.to_lowercase())
                            .ok_or(StmtSkip::Unsupported)?;
                    let v = if matches!(&a.value, Expr::Value(v) if v.value == SqlValue::Null) {
                        SetValue::Null
                    } else {
                        set_value(&col, &a.value, pos)
                    };
                    pos += placeholders(&a.value.to_string());
                    set.push((col, v));
                }
                Self::rows(table, false, &selection, pos, limit_value(&u.limit), set)
            }
            Statement::Delete(d) => {
                if d.tables.len() > 1 || d.using.is_some() {
                    return Err(StmtSkip::Unsupported);
                }
                let from = match &d.from {
                    FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
                };
                if from.len() != 1 || !from[0].joins.is_empty() {
                    return Err(StmtSkip::Unsupported);
                }
                let TableFactor::Table { name, .. } = &from[0].relation else { return Err(StmtSkip::Unsupported) };
                let table = table_of(name).ok_or(StmtSkip::Unsupported)?;
                let selection = d.selection.ok_or(StmtSkip::NotIndexed)?;
                Self::rows(table, true, &selection, 0, limit_value(&d.limit), vec![])
            }
            Statement::Insert(ins) => {
                let TableObject::TableName(name) = &ins.table else { return Err(StmtSkip::Unsupported) };
                let table = table_of(name).ok_or(StmtSkip::Unsupported)?;
                let Some(src) = &ins.source else { return Err(StmtSkip::Unsupported) };
                let SetExpr::Values(values) = src.body.as_ref() else { return Err(StmtSkip::Unsupported) };
                let columns: Vec<String> = ins
                    .columns
                    .iter()
                    .filter_map(|c| c.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()))
                    .collect();
                let mut pos = 0;
                let mut rows = vec![];
                for r in &values.rows {
                    let mut slots = vec![];
                    for e in &r.content {
                        slots.push(if is_placeholder(e) { Slot::Param(pos) } else { Slot::Unknown });
                        pos += placeholders(&e.to_string());
                    }
                    rows.push(slots);
                }
                Ok(Template { table, kind: Kind::Insert { columns, rows } })
            }
            _ => Err(StmtSkip::NotAWrite),
        }
    }

    fn rows(
        table: (Option<String>, String),
        delete: bool,
        selection: &Expr,
        first: usize,
        limit: Option<u64>,
        set: Vec<(String, SetValue)>,
    ) -> Result<Template, StmtSkip> {
        let mut eq = vec![];
        if !eq_columns(selection, &mut eq) {
            return Err(StmtSkip::Unsupported);
        }
        let where_sql = selection.to_string();
        let where_params = (first..first + placeholders(&where_sql)).collect();
        Ok(Template { table, kind: Kind::Rows { delete, where_sql, where_params, limit, eq_columns: eq, set } })
    }
}

/// What a statement asks of the readers.
#[derive(Debug)]
pub enum Reads {
    /// Index keys known from the statement itself (INSERT).
    Keys(Vec<Key>),
    /// Rows to read, and from them further keys.
    Rows(RowsPlan),
}

/// Read these rows, then the index entries their values name.
#[derive(Debug)]
pub struct RowsPlan {
    pub table: Arc<Table>,
    pub sql: String,
    pub params: Vec<mysql::Value>,
    /// Table column of each selected column.
    selected: Vec<usize>,
    /// Secondary indexes whose entries change, with the new value of each
    /// of the table's columns where the statement sets one (UPDATE).
    follow: Vec<usize>,
    new_values: Vec<Option<NewValue>>,
}

#[derive(Debug, Clone)]
enum NewValue {
    Set(Literal),
    Add(Literal, bool),
    Unknown,
}

fn ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

fn col_pos(t: &Table, name: &str) -> Option<usize> {
    t.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name))
}

impl Template {
    /// The table this statement writes, given the statement's default database.
    pub fn table_name(&self, db: &str) -> (String, String) {
        (self.table.0.clone().unwrap_or_else(|| db.to_string()), self.table.1.clone())
    }

    /// Bind a template to its table definition and literals.
    pub fn reads(&self, t: &Arc<Table>, lits: &[Literal]) -> Result<Reads, StmtSkip> {
        match &self.kind {
            Kind::Insert { columns, rows } => {
                let cols: Vec<Option<usize>> = if columns.is_empty() {
                    (0..t.columns.len()).map(Some).collect()
                } else {
                    columns.iter().map(|c| col_pos(t, c)).collect()
                };
                let mut keys = vec![];
                for row in rows {
                    let mut vals: Vec<Option<KeyValue>> = vec![None; t.columns.len()];
                    for (slot, col) in row.iter().zip(&cols) {
                        if let (Some(c), Slot::Param(p)) = (col, slot) {
                            vals[*c] = lits.get(*p).and_then(key_value);
                        }
                    }
                    for ix in 0..t.indexes.len() {
                        let entry = t.entry_columns(ix);
                        if let Some(values) = entry.iter().map(|c| vals[*c].clone()).collect::<Option<Vec<_>>>() {
                            keys.push(Key { index: ix, values });
                        }
                    }
                }
                Ok(Reads::Keys(keys))
            }
            Kind::Rows { delete, where_sql, where_params, limit, eq_columns, set } => {
                let indexed = t.indexes.iter().any(|ix| {
                    ix.columns
                        .first()
                        .is_some_and(|c| eq_columns.iter().any(|e| t.columns[*c].name.eq_ignore_ascii_case(e)))
                });
                if !indexed {
                    return Err(StmtSkip::NotIndexed);
                }
                let mut new_values: Vec<Option<NewValue>> = vec![None; t.columns.len()];
                for (col, v) in set {
                    let Some(c) = col_pos(t, col) else { continue };
                    new_values[c] = Some(match v {
                        SetValue::Param(p) => lits.get(*p).cloned().map(NewValue::Set).unwrap_or(NewValue::Unknown),
                        SetValue::Add(p, plus) => {
                            lits.get(*p).cloned().map(|l| NewValue::Add(l, *plus)).unwrap_or(NewValue::Unknown)
                        }
                        SetValue::Null => NewValue::Set(Literal::Null),
                        SetValue::Unknown => NewValue::Unknown,
                    });
                }
                let follow: Vec<usize> = (0..t.indexes.len())
                    .filter(|&ix| {
                        !t.indexes[ix].is_primary()
                            && (*delete || t.entry_columns(ix).iter().any(|c| new_values[*c].is_some()))
                    })
                    .collect();
                let mut selected: Vec<usize> = t.primary().map(|p| p.columns.clone()).unwrap_or_default();
                for &ix in &follow {
                    for c in t.entry_columns(ix) {
                        if !selected.contains(&c) {
                            selected.push(c);
                        }
                    }
                }
                if selected.is_empty() {
                    selected.push(0);
                }
                let sql = format!(
                    "SELECT {} FROM {}.{} WHERE {} LIMIT {}",
                    selected.iter().map(|c| ident(&t.columns[*c].name)).collect::<Vec<_>>().join(", "),
                    ident(&t.schema),
                    ident(&t.name),
                    where_sql,
                    limit.unwrap_or(1000).min(1000)
                );
                let params = where_params
                    .iter()
                    .map(|p| lits.get(*p).map(Literal::param).unwrap_or(mysql::Value::NULL))
                    .collect();
                Ok(Reads::Rows(RowsPlan { table: t.clone(), sql, params, selected, follow, new_values }))
            }
        }
    }
}

fn from_mysql(v: &mysql::Value) -> Option<KeyValue> {
    Some(match v {
        mysql::Value::NULL => KeyValue::Null,
        mysql::Value::Int(i) => KeyValue::Int(*i),
        mysql::Value::UInt(u) => KeyValue::UInt(*u),
        mysql::Value::Bytes(b) => KeyValue::Text(b.clone()),
        mysql::Value::Date(y, mo, d, h, mi, s, us) => {
            let mut t = format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}");
            if *us > 0 {
                t.push_str(&format!(".{us:06}"));
            }
            KeyValue::Text(t.into_bytes())
        }
        mysql::Value::Time(neg, d, h, mi, s, us) => {
            let hours = *d * 24 + u32::from(*h);
            let mut t = format!("{}{hours:02}:{mi:02}:{s:02}", if *neg { "-" } else { "" });
            if *us > 0 {
                t.push_str(&format!(".{us:06}"));
            }
            KeyValue::Text(t.into_bytes())
        }
        mysql::Value::Float(_) | mysql::Value::Double(_) => return None,
    })
}

fn apply(old: &KeyValue, nv: &NewValue) -> Option<KeyValue> {
    match nv {
        NewValue::Set(l) => key_value(l),
        NewValue::Add(l, plus) => {
            let d = match l {
                Literal::Int(i) => *i as i128,
                Literal::UInt(u) => *u as i128,
                _ => return None,
            };
            let d = if *plus { d } else { -d };
            match old {
                KeyValue::Int(i) => i64::try_from(*i as i128 + d).ok().map(KeyValue::Int),
                KeyValue::UInt(u) => u64::try_from(*u as i128 + d).ok().map(KeyValue::UInt),
                _ => None,
            }
        }
        NewValue::Unknown => None,
    }
}

impl RowsPlan {
    /// Keys this plan will read for one row (for the window's accounting).
    pub fn expected_keys(&self) -> u64 {
        1 + 2 * self.follow.len() as u64
    }

    /// The index entries one selected row names: each followed index's
    /// current entry and, where the statement's new values are known, the
    /// place of its new entry.
    pub fn keys_from_row(&self, row: &[mysql::Value], out: &mut Vec<Key>) {
        let mut current: Vec<Option<KeyValue>> = vec![None; self.table.columns.len()];
        for (v, c) in row.iter().zip(&self.selected) {
            current[*c] = from_mysql(v);
        }
        for &ix in &self.follow {
            let entry = self.table.entry_columns(ix);
            let Some(old) = entry.iter().map(|c| current[*c].clone()).collect::<Option<Vec<_>>>() else { continue };
            let new: Option<Vec<KeyValue>> = entry
                .iter()
                .zip(&old)
                .map(|(c, o)| match &self.new_values[*c] {
                    None => Some(o.clone()),
                    Some(nv) => apply(o, nv),
                })
                .collect();
            if let Some(new) = new {
                if new != old {
                    out.push(Key { index: ix, values: new });
                }
            }
            out.push(Key { index: ix, values: old });
        }
    }
}

/// Fingerprint → template, bounded. Templates that failed are cached too
/// (as their reason), so a stream of unsupported statements is cheap.
#[derive(Default)]
pub struct Templates {
    map: HashMap<(String, String), Result<Arc<Template>, StmtSkip>>,
    pub hits: u64,
    pub parsed: u64,
}

impl Templates {
    pub const MAX: usize = 20_000;

    /// The template of a statement (default database `db`), and its literals in `lits`.
    pub fn get(&mut self, db: &str, sql: &[u8], lits: &mut Vec<Literal>) -> Result<Arc<Template>, StmtSkip> {
        let fp = fingerprint(sql, lits);
        let key = (db.to_string(), fp);
        if let Some(t) = self.map.get(&key) {
            self.hits += 1;
            return t.clone();
        }
        if self.map.len() >= Self::MAX {
            self.map.clear();
        }
        self.parsed += 1;
        let t = Template::parse(&key.1).map(Arc::new);
        self.map.insert(key, t.clone());
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(sql: &str) -> (String, Vec<Literal>) {
        let mut l = vec![];
        let fp = fingerprint(sql.as_bytes(), &mut l);
        (fp, l)
    }

    fn sbtest() -> Arc<Table> {
        Arc::new(crate::plan::row::tests::sbtest())
    }

    #[test]
    fn fingerprints_keep_shape_and_take_literals() {
        let (fp, l) = lits("UPDATE sbtest1 SET k=k+1 WHERE id=5012");
        assert_eq!(fp, "UPDATE sbtest1 SET k=k+? WHERE id=?");
        assert_eq!(l, vec![Literal::Int(1), Literal::Int(5012)]);
        let (fp, l) = lits("insert into t1 (a,b) values (-3, 'it''s \\n'), (_latin1'x' , X'4142') /* c */ LIMIT 10");
        assert_eq!(fp, "insert into t1 (a,b) values (?, ?), (? , ?) LIMIT 10");
        assert_eq!(
            l,
            vec![
                Literal::Int(-3),
                Literal::Text(b"it's \n".to_vec()),
                Literal::Text(b"x".to_vec()),
                Literal::Text(b"AB".to_vec())
            ]
        );
        let (fp, l) =
            lits("DELETE FROM `t 2` WHERE c = 'a' COLLATE 'latin1_bin' AND d IN (1.50, 2e3, NULL) LIMIT 5, 10");
        assert_eq!(fp, "DELETE FROM `t 2` WHERE c = ? COLLATE 'latin1_bin' AND d IN (?, ?, ?) LIMIT 5, 10");
        assert_eq!(
            l,
            vec![Literal::Text(b"a".to_vec()), Literal::Text(b"1.50".to_vec()), Literal::Double(2000.0), Literal::Null]
        );
        // Uniform statements share one fingerprint.
        assert_eq!(lits("UPDATE sbtest1 SET k=k+1 WHERE id=7").0, lits("UPDATE  sbtest1 SET k=k+1 WHERE id=123456").0);
        // A subtraction stays an operator.
        assert_eq!(
            lits("UPDATE t SET k=k-1 WHERE id=-2"),
            ("UPDATE t SET k=k-? WHERE id=?".to_string(), vec![Literal::Int(1), Literal::Int(-2)])
        );
    }

    #[test]
    fn update_reads_the_row_then_old_and_new_index_entries() {
        let t = sbtest();
        let mut l = vec![];
        let mut cache = Templates::default();
        let tpl = cache.get("sbtest", b"UPDATE sbtest1 SET k=k+1 WHERE id=5012", &mut l).unwrap();
        assert_eq!(tpl.table_name("sbtest"), ("sbtest".into(), "sbtest1".into()));
        let Reads::Rows(p) = tpl.reads(&t, &l).unwrap() else { panic!() };
        assert_eq!(p.sql, "SELECT `id`, `k` FROM `sbtest`.`sbtest1` WHERE id = ? LIMIT 1000");
        assert_eq!(p.params, vec![mysql::Value::Int(5012)]);
        let mut keys = vec![];
        p.keys_from_row(&[mysql::Value::Int(5012), mysql::Value::Int(499)], &mut keys);
        // k_1 is not unique: an entry is (k, id).
        let entry = |k: i64| Key { index: 1, values: vec![KeyValue::Int(k), KeyValue::Int(5012)] };
        assert_eq!(keys, vec![entry(500), entry(499)]);
        // The second statement of the same shape is a cache hit.
        cache.get("sbtest", b"UPDATE sbtest1 SET k=k+1 WHERE id=7", &mut l).unwrap();
        assert_eq!((cache.parsed, cache.hits), (1, 1));
        assert_eq!(l, vec![Literal::Int(1), Literal::Int(7)]);
    }

    #[test]
    fn update_of_a_non_indexed_column_reads_only_the_row() {
        let t = sbtest();
        let mut l = vec![];
        let tpl = Templates::default().get("sbtest", b"UPDATE sbtest1 SET c='abc' WHERE id IN (3, 4)", &mut l).unwrap();
        let Reads::Rows(p) = tpl.reads(&t, &l).unwrap() else { panic!() };
        assert_eq!(p.sql, "SELECT `id` FROM `sbtest`.`sbtest1` WHERE id IN (?, ?) LIMIT 1000");
        assert_eq!(p.params, vec![mysql::Value::Int(3), mysql::Value::Int(4)]);
    }

    #[test]
    fn delete_follows_every_secondary_index() {
        let t = sbtest();
        let mut l = vec![];
        let tpl = Templates::default()
            .get("x", b"DELETE FROM sbtest.sbtest1 WHERE k = 10 AND c = 'q' LIMIT 2", &mut l)
            .unwrap();
        let Reads::Rows(p) = tpl.reads(&t, &l).unwrap() else { panic!() };
        assert_eq!(p.sql, "SELECT `id`, `k` FROM `sbtest`.`sbtest1` WHERE k = ? AND c = ? LIMIT 2");
        let mut keys = vec![];
        p.keys_from_row(&[mysql::Value::Int(1), mysql::Value::Int(10)], &mut keys);
        assert_eq!(keys, vec![Key { index: 1, values: vec![KeyValue::Int(10), KeyValue::Int(1)] }]);
    }

    #[test]
    fn insert_values_are_the_keys() {
        let t = sbtest();
        let mut l = vec![];
        let tpl = Templates::default()
            .get("sbtest", b"INSERT INTO sbtest1 (id, k, c, pad) VALUES (7, 8, 'c', 'p'), (9, NOW(), 'c', 'p')", &mut l)
            .unwrap();
        let Reads::Keys(keys) = tpl.reads(&t, &l).unwrap() else { panic!() };
        // Row 2's k is an expression: only its primary key is known.
        assert_eq!(
            keys,
            vec![
                Key { index: 0, values: vec![KeyValue::Int(7)] },
                Key { index: 1, values: vec![KeyValue::Int(8), KeyValue::Int(7)] },
                Key { index: 0, values: vec![KeyValue::Int(9)] },
            ]
        );
    }

    #[test]
    fn slow_or_unreadable_statements_are_skipped_with_a_reason() {
        let t = sbtest();
        let mut c = Templates::default();
        let mut l = vec![];
        let tpl = c.get("sbtest", b"UPDATE sbtest1 SET k=0 WHERE c LIKE 'a%'", &mut l).unwrap();
        assert_eq!(tpl.reads(&t, &l).unwrap_err(), StmtSkip::NotIndexed);
        assert_eq!(c.get("sbtest", b"UPDATE sbtest1 SET k=0", &mut l).unwrap_err(), StmtSkip::NotIndexed);
        assert_eq!(
            c.get("sbtest", b"DELETE FROM sbtest1 WHERE id IN (SELECT id FROM t2)", &mut l).unwrap_err(),
            StmtSkip::Unsupported
        );
        assert_eq!(
            c.get("sbtest", b"INSERT INTO sbtest1 SELECT * FROM t2", &mut l).unwrap_err(),
            StmtSkip::Unsupported
        );
        assert_eq!(c.get("sbtest", b"BEGIN", &mut l).unwrap_err(), StmtSkip::NotAWrite);
        assert_eq!(c.get("sbtest", b"UPDATE ((( garbage", &mut l).unwrap_err(), StmtSkip::Unparsed);
    }
}
