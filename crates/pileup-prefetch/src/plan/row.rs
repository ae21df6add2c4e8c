//! From a row change to the index entries the applier will touch.
//!
//! Applying a row event, InnoDB finds the row by its primary key (the
//! clustered index leaf holds the whole row) and then changes every
//! secondary index entry whose columns changed: it deletes the old entry and
//! inserts the new one. An INSERT checks every unique index and inserts into
//! every index. Each of those is a B-tree leaf that, on a data set larger
//! than memory, is a page read the single applier waits for. The plan lists
//! them as keys: (index, values of its columns). Looking each key up through
//! its own index alone (the query selects only that index's columns) reads
//! exactly that leaf and nothing more.

use std::collections::HashSet;

use pileup_binlog::value::Value;
use pileup_binlog::RowsKind;

use pileup_replica::schema::Table;

/// A column value in a key, owned (the event buffer moves on).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyValue {
    Null,
    Int(i64),
    UInt(u64),
    /// Strings, decimals and DATE/TIME/DATETIME as the server prints them.
    Text(Vec<u8>),
    /// A TIMESTAMP column: seconds since the epoch (looked up with FROM_UNIXTIME).
    Epoch(u32, u32),
}

/// One index entry to warm.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// Position in [`Table::indexes`].
    pub index: usize,
    pub values: Vec<KeyValue>,
}

/// Why a row gave no (or fewer) keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skip {
    /// The image lacks an index column (`binlog_row_image=MINIMAL` or NOBLOB).
    ColumnNotInImage,
    /// A FLOAT/DOUBLE key column: equality lookups on it are not reliable.
    FloatKey,
    /// The event has more columns than the table: DDL not yet seen.
    SchemaMismatch,
}

fn key_value(v: &Value, unsigned: bool) -> Result<KeyValue, Skip> {
    Ok(match *v {
        Value::Null => KeyValue::Null,
        Value::Int(i, _) if unsigned => KeyValue::UInt(v.as_u64().unwrap_or(i as u64)),
        Value::Int(i, _) => KeyValue::Int(i),
        Value::UInt(u) => KeyValue::UInt(u),
        Value::Bytes(b) | Value::Json(b) => KeyValue::Text(b.to_vec()),
        Value::Timestamp { secs, micros, .. } => KeyValue::Epoch(secs, micros),
        Value::Year(_) | Value::Bit(_) | Value::Enum(_) | Value::Set(_) => KeyValue::UInt(v.as_u64().unwrap_or(0)),
        Value::Float(_) | Value::Double(_) => return Err(Skip::FloatKey),
        ref other => KeyValue::Text(other.to_string().into_bytes()),
    })
}

/// The key of index `ix` in a row image, if the image has all its columns.
fn key_of(t: &Table, ix: usize, img: &[Option<Value>]) -> Result<Key, Skip> {
    let cols = t.entry_columns(ix);
    let mut values = Vec::with_capacity(cols.len());
    for &c in &cols {
        let v = img.get(c).ok_or(Skip::SchemaMismatch)?.as_ref().ok_or(Skip::ColumnNotInImage)?;
        values.push(key_value(v, t.columns[c].unsigned)?);
    }
    Ok(Key { index: ix, values })
}

/// Did any column of index `ix` change between the images?
fn changed(t: &Table, ix: usize, before: &[Option<Value>], after: &[Option<Value>]) -> bool {
    t.indexes[ix].columns.iter().any(|&c| match (before.get(c), after.get(c)) {
        (Some(Some(a)), Some(Some(b))) => a != b,
        // Not in the after image: unchanged (MINIMAL images list what changed).
        (_, Some(None)) | (_, None) => false,
        _ => true,
    })
}

/// The index entries one row change touches. Keys are appended to `out`;
/// skipped lookups are reported in `skipped` (the rest of the row's keys
/// are still planned).
pub fn plan_row(
    t: &Table,
    kind: RowsKind,
    before: &[Option<Value>],
    after: &[Option<Value>],
    out: &mut Vec<Key>,
    skipped: &mut Vec<Skip>,
) {
    let width = before.len().max(after.len());
    if width > t.columns.len() {
        skipped.push(Skip::SchemaMismatch);
        return;
    }
    let mut push = |r: Result<Key, Skip>| match r {
        Ok(k) => out.push(k),
        Err(s) => skipped.push(s),
    };
    let pk = t.primary().map(|_| 0usize);
    match kind {
        RowsKind::Delete => {
            // The row itself, and every secondary entry that goes away.
            for ix in 0..t.indexes.len() {
                push(key_of(t, ix, before));
            }
        }
        RowsKind::Update => {
            if let Some(p) = pk {
                push(key_of(t, p, before));
            }
            for ix in 0..t.indexes.len() {
                if !changed(t, ix, before, after) {
                    continue;
                }
                // The old entry is deleted, the new one inserted where it sorts.
                if Some(ix) != pk {
                    push(key_of(t, ix, before));
                }
                push(key_of(t, ix, after));
            }
        }
        RowsKind::Insert => {
            // Unique checks and the leaves the new entries go into.
            for ix in 0..t.indexes.len() {
                push(key_of(t, ix, after));
            }
        }
    }
}

/// Keys already issued recently: the same hot row updated a hundred times
/// needs warming once.
pub struct Recent {
    set: HashSet<Key>,
    order: std::collections::VecDeque<Key>,
    cap: usize,
}

impl Recent {
    /// Remembers up to `cap` keys. Memory grows with the keys actually
    /// issued, not with `cap`: the window is the user's number
    /// (`--window-keys 1000000000` must not allocate for a billion keys).
    pub fn new(cap: usize) -> Recent {
        Recent { set: HashSet::new(), order: Default::default(), cap: cap.max(1) }
    }

    /// True if the key is new (and remembers it).
    pub fn insert(&mut self, k: &Key) -> bool {
        if self.set.contains(k) {
            return false;
        }
        if self.order.len() >= self.cap {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        self.set.insert(k.clone());
        self.order.push_back(k.clone());
        true
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pileup_replica::schema::Table;

    /// sysbench's table: id PK, k with a secondary index, c, pad.
    pub(crate) fn sbtest() -> Table {
        let cols = vec![
            (1, "id".to_string(), "int(11)".to_string(), "int".to_string()),
            (2, "k".into(), "int(11)".into(), "int".into()),
            (3, "c".into(), "char(120)".into(), "char".into()),
            (4, "pad".into(), "char(60)".into(), "char".into()),
        ];
        let parts = vec![("PRIMARY".to_string(), false, 1, "id".to_string()), ("k_1".into(), true, 1, "k".into())];
        Table::from_parts("sbtest", "sbtest1", &cols, &parts).unwrap()
    }

    fn row<'a>(id: i64, k: i64, c: &'a [u8]) -> Vec<Option<Value<'a>>> {
        vec![Some(Value::Int(id, 4)), Some(Value::Int(k, 4)), Some(Value::Bytes(c)), Some(Value::Bytes(b"p"))]
    }

    fn plan(kind: RowsKind, b: &[Option<Value>], a: &[Option<Value>]) -> (Vec<Key>, Vec<Skip>) {
        let (mut out, mut sk) = (vec![], vec![]);
        plan_row(&sbtest(), kind, b, a, &mut out, &mut sk);
        (out, sk)
    }

    fn k(index: usize, v: i64) -> Key {
        Key { index, values: vec![KeyValue::Int(v)] }
    }

    /// An entry of the non-unique k_1 index: (k, id).
    fn kk(v: i64, id: i64) -> Key {
        Key { index: 1, values: vec![KeyValue::Int(v), KeyValue::Int(id)] }
    }

    #[test]
    fn schema_orders_primary_first() {
        let t = sbtest();
        assert_eq!(t.primary().unwrap().columns, vec![0]);
        assert_eq!(t.indexes[1].name, "k_1");
        assert!(!t.indexes[1].unique);
    }

    #[test]
    fn update_of_a_non_key_column_reads_only_the_row() {
        let (b, a) = (row(5, 7, b"old"), row(5, 7, b"new"));
        assert_eq!(plan(RowsKind::Update, &b, &a), (vec![k(0, 5)], vec![]));
    }

    #[test]
    fn update_of_an_indexed_column_reads_old_and_new_entries() {
        let (b, a) = (row(5, 7, b"c"), row(5, 8, b"c"));
        assert_eq!(plan(RowsKind::Update, &b, &a).0, vec![k(0, 5), kk(7, 5), kk(8, 5)]);
    }

    #[test]
    fn primary_key_change_reads_both_places() {
        let (b, a) = (row(5, 7, b"c"), row(6, 7, b"c"));
        assert_eq!(plan(RowsKind::Update, &b, &a).0, vec![k(0, 5), k(0, 6)]);
    }

    #[test]
    fn delete_and_insert_touch_every_index() {
        assert_eq!(plan(RowsKind::Delete, &row(9, 3, b"x"), &[]).0, vec![k(0, 9), kk(3, 9)]);
        assert_eq!(plan(RowsKind::Insert, &[], &row(9, 3, b"x")).0, vec![k(0, 9), kk(3, 9)]);
    }

    #[test]
    fn minimal_images_skip_what_they_lack() {
        // binlog_row_image=MINIMAL: the before image holds the PK only.
        let b = vec![Some(Value::Int(5, 4)), None, None, None];
        let a = vec![None, Some(Value::Int(8, 4)), None, None];
        let (keys, skipped) = plan(RowsKind::Update, &b, &a);
        assert_eq!(keys, vec![k(0, 5)]);
        assert_eq!(
            skipped,
            vec![Skip::ColumnNotInImage, Skip::ColumnNotInImage],
            "the old k entry is unknown, the new one lacks the id"
        );
        // More columns than the table: DDL the prefetcher has not seen yet.
        let mut wide = row(1, 1, b"c");
        wide.push(Some(Value::Int(0, 4)));
        assert_eq!(plan(RowsKind::Insert, &[], &wide), (vec![], vec![Skip::SchemaMismatch]));
    }

    #[test]
    fn unsigned_columns_and_recent_keys() {
        let cols = vec![(1, "id".to_string(), "bigint(20) unsigned".to_string(), "bigint".to_string())];
        let t = Table::from_parts("d", "t", &cols, &[("PRIMARY".into(), false, 1, "id".into())]).unwrap();
        let (mut out, mut sk) = (vec![], vec![]);
        plan_row(&t, RowsKind::Delete, &[Some(Value::Int(-1, 8))], &[], &mut out, &mut sk);
        assert_eq!(out[0].values, vec![KeyValue::UInt(u64::MAX)]);
        let mut r = Recent::new(2);
        assert!(r.insert(&k(0, 1)) && !r.insert(&k(0, 1)));
        assert!(r.insert(&k(0, 2)) && r.insert(&k(0, 3)));
        assert!(r.insert(&k(0, 1)), "forgotten once the window moved on");
        // The window is the user's number: no allocation for it up front.
        let mut huge = Recent::new(usize::MAX);
        assert!(huge.insert(&k(0, 1)) && !huge.insert(&k(0, 1)));
    }
}
