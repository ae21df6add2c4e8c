//! From an index key to the number of the leaf page that holds it, by
//! reading the index's upper levels from its tablespace file.
//!
//! A lookup through SQL descends the B-tree inside the server, latching each
//! level on the way down and holding the level above while the leaf is read
//! from disk, and costs the server a statement. Knowing the leaf's page
//! number instead, the prefetcher can ask InnoDB to read just that page
//! ([`crate::load`]), which latches nothing of the tree. (Measured in
//! docs/BENCHMARKS.md: a little faster than the SELECTs and less
//! server CPU; the applier's own latch waits stay as they were.)
//!
//! The upper levels are few (8 sysbench tables of 2.4 GB in all: about 150
//! root and level-1 pages over their 16 indexes) and change only when a
//! leaf splits or merges: they are read from the file with plain reads
//! and re-read when older than a few seconds. A pointer that is stale (a
//! split not yet written to the file) names the leaf's left neighbour: one
//! wasted read, and the applier reads its page itself.
//!
//! Written by hand: no crate reads InnoDB's page format. Only what a descent
//! needs is parsed — the page header, the record chain, and node-pointer
//! records whose fields are all fixed-width NOT NULL integers (then each
//! record's fields lie at its origin in order, followed by the child page
//! number, and nothing in the variable-length header has to be read). Other
//! indexes are left to the SQL lookups.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{PrefetchError, Result};

use crate::plan::KeyValue;
use pileup_replica::schema::Table;

const FIL_PAGE_OFFSET: usize = 4;
const FIL_PAGE_LSN: usize = 16;
const FIL_PAGE_TYPE: usize = 24;
/// FIL_PAGE_INDEX: a B-tree page.
const PAGE_TYPE_INDEX: u16 = 17855;
const PAGE_HEADER: usize = 38;
const PAGE_N_HEAP: usize = PAGE_HEADER + 4;
const PAGE_LEVEL: usize = PAGE_HEADER + 26;
const PAGE_INDEX_ID: usize = PAGE_HEADER + 28;
/// The infimum and supremum records' origins in a COMPACT-format page.
const INFIMUM: usize = 99;
const SUPREMUM: usize = 112;
const REC_STATUS_ORDINARY: u8 = 0;
const REC_STATUS_NODE_PTR: u8 = 1;
const REC_STATUS_INSTANT: u8 = 4;
/// Info bit of the first record of the leftmost page of each non-leaf level:
/// it stands for minus infinity whatever its fields hold.
const REC_INFO_MIN_REC: u8 = 0x10;

/// One node-pointer field: an integer column as InnoDB stores it (big-endian,
/// the sign bit flipped for signed types, so byte order is numeric order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntField {
    pub width: usize,
    pub signed: bool,
}

fn int_width(data_type: &str) -> Option<usize> {
    match data_type {
        "tinyint" => Some(1),
        "smallint" => Some(2),
        "mediumint" => Some(3),
        "int" | "integer" => Some(4),
        "bigint" => Some(8),
        _ => None,
    }
}

/// The fields of index `ix`'s node pointers, if its keys can be mapped to
/// pages: every field a NOT NULL integer. A node pointer holds the index's
/// columns and, for a secondary index (unique or not), the primary key
/// columns it lacks; for the primary key, its columns.
pub fn node_fields(t: &Table, ix: usize) -> Option<Vec<IntField>> {
    let pk = t.primary()?;
    let index = t.indexes.get(ix)?;
    let mut cols = index.columns.clone();
    if !index.is_primary() {
        cols.extend(pk.columns.iter().filter(|c| !index.columns.contains(c)));
    }
    cols.iter()
        .map(|&c| {
            let col = t.columns.get(c)?;
            (!col.nullable).then_some(())?;
            Some(IntField { width: int_width(&col.data_type)?, signed: !col.unsigned })
        })
        .collect()
}

/// A key's values in node-pointer byte order (as many fields as it has: a
/// unique secondary index's key lacks the primary key). None if a value is
/// not an integer or does not fit its column.
pub fn encode(fields: &[IntField], values: &[KeyValue]) -> Option<Vec<u8>> {
    if values.len() > fields.len() || values.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.width).sum());
    for (f, v) in fields.iter().zip(values) {
        let bits = 8 * f.width as u32;
        let raw: u64 = match (v, f.signed) {
            (&KeyValue::Int(i), true) => {
                let (lo, hi) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
                if !(lo..=hi).contains(&(i as i128)) {
                    return None;
                }
                ((i as u64) ^ (1u64 << (bits - 1))) & (u64::MAX >> (64 - bits))
            }
            (&KeyValue::UInt(u), true) => {
                if u >= 1u64 << (bits - 1) {
                    return None;
                }
                u ^ (1u64 << (bits - 1))
            }
            (&KeyValue::Int(i), false) if i >= 0 => i as u64,
            (&KeyValue::UInt(u), false) => u,
            _ => return None,
        };
        if bits < 64 && raw >> bits != 0 {
            return None;
        }
        out.extend_from_slice(&raw.to_be_bytes()[8 - f.width..]);
    }
    Some(out)
}

/// Why a page could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageError {
    /// Not a B-tree page of this index (freed and reused, or another format).
    NotThisIndex,
    /// The header's LSN and the trailer's differ: read while being written.
    Torn,
    /// The record chain does not hold together.
    Corrupt(&'static str),
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PageError::NotThisIndex => write!(f, "not a page of this index"),
            PageError::Torn => write!(f, "torn page (read during a write)"),
            PageError::Corrupt(why) => write!(f, "bad page: {why}"),
        }
    }
}

/// A non-leaf page, decoded: its level and its node pointers in key order.
#[derive(Debug, Clone)]
pub struct Node {
    pub level: u16,
    klen: usize,
    keys: Vec<u8>,
    pub children: Vec<u32>,
    first_is_min: bool,
}

fn be16(p: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([p[at], p[at + 1]])
}

fn be32(p: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(p[at..at + 4].try_into().unwrap())
}

/// Check that `page` is a B-tree page of index `index_id`, whole; its level.
fn check(page: &[u8], index_id: u64) -> Result<u16, PageError> {
    let size = page.len();
    if size < 4096 || !size.is_power_of_two() {
        return Err(PageError::Corrupt("page size"));
    }
    if be16(page, FIL_PAGE_TYPE) != PAGE_TYPE_INDEX || be16(page, PAGE_N_HEAP) & 0x8000 == 0 {
        return Err(PageError::NotThisIndex);
    }
    if u64::from_be_bytes(page[PAGE_INDEX_ID..PAGE_INDEX_ID + 8].try_into().unwrap()) != index_id {
        return Err(PageError::NotThisIndex);
    }
    // The low 32 bits of the page LSN are repeated at the end: in the
    // last 4 bytes (classic checksums) or the 4 before them (full_crc32).
    let lsn_low = be32(page, FIL_PAGE_LSN + 4);
    if be32(page, size - 4) != lsn_low && be32(page, size - 8) != lsn_low {
        return Err(PageError::Torn);
    }
    Ok(be16(page, PAGE_LEVEL))
}

/// Follow a COMPACT page's record chain from the infimum to the supremum,
/// calling `f(n, origin)` for each user record, every one of which must
/// have status `status` and at least `min_len` bytes after its origin.
fn walk(page: &[u8], min_len: usize, status: u8, mut f: impl FnMut(usize, usize)) -> Result<(), PageError> {
    let mut n = 0;
    let size = page.len();
    let mut at = INFIMUM;
    for _ in 0..size / 5 {
        let next = (at as u16).wrapping_add(be16(page, at - 2)) as usize & (size - 1);
        if next == SUPREMUM {
            return Ok(());
        }
        if next < SUPREMUM + 5 || next + min_len > size {
            return Err(PageError::Corrupt("record pointer out of the page"));
        }
        at = next;
        match page[at - 3] & 7 {
            s if s == status => {
                f(n, at);
                n += 1;
            }
            // MariaDB's instant-ALTER metadata record, first on the leftmost leaf: not a row.
            REC_STATUS_INSTANT if status == REC_STATUS_ORDINARY && n == 0 => {}
            _ => return Err(PageError::Corrupt("a record of the wrong kind for the page's level")),
        }
    }
    Err(PageError::Corrupt("record chain does not end"))
}

/// The keys (the first `klen` bytes of each record: the index's own fields
/// when they are fixed-width and NOT NULL) of the user records on a leaf
/// page of index `index_id`, in order. For checking a mapping against the
/// file, and for tests.
pub fn leaf_keys(page: &[u8], index_id: u64, klen: usize) -> Result<Vec<Vec<u8>>, PageError> {
    if check(page, index_id)? != 0 {
        return Err(PageError::Corrupt("not a leaf page"));
    }
    let mut keys = vec![];
    walk(page, klen, REC_STATUS_ORDINARY, |_, at| keys.push(page[at..at + klen].to_vec()))?;
    Ok(keys)
}

impl Node {
    /// Decode page `page` (the whole page, `page.len()` bytes) as a
    /// non-leaf page of index `index_id` whose node pointers hold `klen`
    /// bytes of key. A leaf page (level 0) decodes to no children.
    pub fn parse(page: &[u8], index_id: u64, klen: usize) -> Result<Node, PageError> {
        let level = check(page, index_id)?;
        let mut node = Node { level, klen, keys: vec![], children: vec![], first_is_min: false };
        if level == 0 {
            return Ok(node);
        }
        walk(page, klen + 4, REC_STATUS_NODE_PTR, |n, at| {
            if n == 0 && page[at - 5] & REC_INFO_MIN_REC != 0 {
                node.first_is_min = true;
            }
            node.keys.extend_from_slice(&page[at..at + klen]);
            node.children.push(be32(page, at + klen));
        })?;
        Ok(node)
    }

    fn key(&self, i: usize) -> &[u8] {
        &self.keys[i * self.klen..(i + 1) * self.klen]
    }

    /// The child to descend into for `key` (a whole node-pointer key, or a
    /// prefix of one: then the child where the first entry with that prefix
    /// may be). None on an empty page.
    pub fn child_for(&self, key: &[u8]) -> Option<u32> {
        if self.children.is_empty() {
            return None;
        }
        let full = key.len() >= self.klen;
        let below = |i: usize| {
            if i == 0 && self.first_is_min {
                return true;
            }
            let k = &self.key(i)[..key.len().min(self.klen)];
            if full {
                k <= key
            } else {
                k < key
            }
        };
        // Records are in key order: the last one at or below the key.
        let (mut lo, mut hi) = (0, self.children.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if below(mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(self.children[lo.saturating_sub(1)])
    }
}

/// Where an index lives, from the server's data dictionary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexLocation {
    pub index_id: u64,
    pub space: u32,
    pub root: u32,
    pub file: PathBuf,
}

impl IndexLocation {
    /// Look index `index` of `schema.table` up in InnoDB's dictionary
    /// (information_schema, no locks taken). None when InnoDB does not know
    /// it (another engine), or its format is one the map does not read
    /// (compressed rows, or the system tablespace's older formats).
    pub fn find(
        c: &mut mysql::Conn,
        datadir: &Path,
        schema: &str,
        table: &str,
        index: &str,
    ) -> Result<Option<IndexLocation>> {
        use mysql::prelude::Queryable;
        let row: Option<(u64, u32, u32, String, String)> = c.exec_first(
            "SELECT i.INDEX_ID, i.SPACE, i.PAGE_NO, t.NAME, t.ROW_FORMAT FROM information_schema.INNODB_SYS_INDEXES i \
             JOIN information_schema.INNODB_SYS_TABLES t ON t.TABLE_ID = i.TABLE_ID WHERE t.NAME = CONCAT(?, '/', ?) AND i.NAME = ?",
            (schema, table, index),
        )?;
        let Some((index_id, space, root, name, row_format)) = row else { return Ok(None) };
        if space == 0 || !matches!(row_format.as_str(), "Dynamic" | "Compact") {
            return Ok(None);
        }
        let path: Option<String> = c
            .exec_first("SELECT FILENAME FROM information_schema.INNODB_SYS_TABLESPACES WHERE SPACE = ?", (space,))
            .ok()
            .flatten();
        let file = match path {
            Some(p) => datadir.join(p),
            None => datadir.join(format!("{name}.ibd")),
        };
        Ok(Some(IndexLocation { index_id, space, root, file }))
    }
}

/// The upper levels of one index, cached from its file.
pub struct Tree {
    pub loc: IndexLocation,
    fields: Vec<IntField>,
    klen: usize,
    file: File,
    page_size: usize,
    nodes: HashMap<u32, (Instant, Node)>,
    max_age: Duration,
    buf: Vec<u8>,
    /// Non-leaf pages read from the file so far.
    pub pages_read: u64,
}

impl Tree {
    pub fn open(loc: IndexLocation, fields: Vec<IntField>, page_size: usize, max_age: Duration) -> Result<Tree> {
        let file = File::open(&loc.file).map_err(|source| PrefetchError::Io {
            what: "pileup needs read access to the server's data files to read the index's upper levels: opening",
            path: loc.file.clone(),
            source,
        })?;
        // Random single-page reads: no read-ahead into the page cache.
        // SAFETY: a plain advisory call on a descriptor this function owns.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
        }
        let klen = fields.iter().map(|f| f.width).sum();
        Ok(Tree {
            loc,
            fields,
            klen,
            file,
            page_size,
            nodes: HashMap::new(),
            max_age,
            buf: vec![0; page_size],
            pages_read: 0,
        })
    }

    pub fn fields(&self) -> &[IntField] {
        &self.fields
    }

    fn node(&mut self, page: u32) -> Result<&Node> {
        let fresh = self.nodes.get(&page).is_some_and(|(t, _)| t.elapsed() < self.max_age);
        if !fresh {
            let mut last = PageError::Torn;
            let mut got = None;
            // A torn read is a page being written: once more is enough.
            for _ in 0..2 {
                self.file.read_exact_at(&mut self.buf, page as u64 * self.page_size as u64).map_err(|source| {
                    PrefetchError::Io { what: "reading a page of", path: self.loc.file.clone(), source }
                })?;
                self.pages_read += 1;
                if be32(&self.buf, FIL_PAGE_OFFSET) != page {
                    last = PageError::Corrupt("page number in the header differs");
                    continue;
                }
                match Node::parse(&self.buf, self.loc.index_id, self.klen) {
                    Ok(n) => {
                        got = Some(n);
                        break;
                    }
                    Err(e) => last = e,
                }
            }
            match got {
                Some(n) => {
                    self.nodes.insert(page, (Instant::now(), n));
                }
                None => {
                    self.nodes.remove(&page);
                    return Err(PrefetchError::Page(format!("page {page} of {}: {last}", self.loc.file.display())));
                }
            }
        }
        Ok(&self.nodes[&page].1)
    }

    /// The leaf page that holds `key` (encoded with [`encode`]).
    pub fn leaf(&mut self, key: &[u8]) -> Result<u32> {
        let mut page = self.loc.root;
        for _ in 0..32 {
            let node = self.node(page)?;
            if node.level == 0 {
                return Ok(page);
            }
            let child =
                node.child_for(key).ok_or_else(|| PrefetchError::Page(format!("empty non-leaf page {page}")))?;
            if node.level == 1 {
                return Ok(child);
            }
            page = child;
        }
        Err(PrefetchError::Page(format!("no leaf after 32 levels in {}", self.loc.file.display())))
    }

    /// Forget every cached page (after DDL, or when the root moved).
    pub fn forget(&mut self) {
        self.nodes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: usize = 16384;

    /// A non-leaf page as InnoDB lays it out, with node pointers of 4-byte
    /// signed keys. `records` in the order to chain them.
    fn page(index_id: u64, level: u16, records: &[(i32, u32)], min_first: bool) -> Vec<u8> {
        let mut p = vec![0u8; P];
        p[FIL_PAGE_TYPE..FIL_PAGE_TYPE + 2].copy_from_slice(&PAGE_TYPE_INDEX.to_be_bytes());
        p[FIL_PAGE_LSN + 4..FIL_PAGE_LSN + 8].copy_from_slice(&0xABCD_1234u32.to_be_bytes());
        p[P - 8..P - 4].copy_from_slice(&0xABCD_1234u32.to_be_bytes());
        p[PAGE_N_HEAP..PAGE_N_HEAP + 2].copy_from_slice(&(0x8000u16 | (2 + records.len() as u16)).to_be_bytes());
        p[PAGE_LEVEL..PAGE_LEVEL + 2].copy_from_slice(&level.to_be_bytes());
        p[PAGE_INDEX_ID..PAGE_INDEX_ID + 8].copy_from_slice(&index_id.to_be_bytes());
        // Records from offset 120 on, 5 header bytes + 4 key + 4 child each,
        // placed in reverse so the chain has to follow the pointers.
        let origins: Vec<usize> = (0..records.len()).map(|i| 120 + 5 + (records.len() - 1 - i) * 13).collect();
        let mut prev = INFIMUM;
        for (i, (&(k, child), &o)) in records.iter().zip(&origins).enumerate() {
            let rel = (o as u16).wrapping_sub(prev as u16);
            p[prev - 2..prev].copy_from_slice(&rel.to_be_bytes());
            p[o - 3] = REC_STATUS_NODE_PTR;
            if i == 0 && min_first {
                p[o - 5] |= REC_INFO_MIN_REC;
            }
            p[o..o + 4].copy_from_slice(&((k as u32) ^ 0x8000_0000).to_be_bytes());
            p[o + 4..o + 8].copy_from_slice(&child.to_be_bytes());
            prev = o;
        }
        let rel = (SUPREMUM as u16).wrapping_sub(prev as u16);
        p[prev - 2..prev].copy_from_slice(&rel.to_be_bytes());
        p
    }

    const INT: IntField = IntField { width: 4, signed: true };

    fn enc(v: i64) -> Vec<u8> {
        encode(&[INT], &[KeyValue::Int(v)]).unwrap()
    }

    #[test]
    fn integers_encode_in_innodb_byte_order() {
        assert_eq!(enc(1), vec![0x80, 0, 0, 1]);
        assert_eq!(enc(-1), vec![0x7f, 0xff, 0xff, 0xff]);
        assert!(enc(-5) < enc(3) && enc(3) < enc(300));
        let u8f = IntField { width: 1, signed: false };
        assert_eq!(encode(&[u8f], &[KeyValue::UInt(200)]), Some(vec![200]));
        assert_eq!(encode(&[u8f], &[KeyValue::UInt(256)]), None, "does not fit a TINYINT UNSIGNED");
        assert_eq!(encode(&[INT], &[KeyValue::Int(1 << 31)]), None, "does not fit an INT");
        assert_eq!(encode(&[IntField { width: 8, signed: true }], &[KeyValue::Int(i64::MIN)]), Some(vec![0; 8]));
        assert_eq!(encode(&[INT], &[KeyValue::Text(b"1".to_vec())]), None);
        assert_eq!(encode(&[INT, INT], &[KeyValue::Int(7)]).map(|v| v.len()), Some(4), "a prefix");
    }

    #[test]
    fn descends_to_the_last_pointer_at_or_below_the_key() {
        let p = page(42, 1, &[(i32::MIN, 100), (10, 101), (20, 102), (30, 103)], true);
        let n = Node::parse(&p, 42, 4).unwrap();
        assert_eq!(n.level, 1);
        assert_eq!(n.children, vec![100, 101, 102, 103]);
        assert_eq!(n.child_for(&enc(-1000)), Some(100), "below everything: the minimum record's child");
        assert_eq!(n.child_for(&enc(10)), Some(101), "equal to a pointer: that child");
        assert_eq!(n.child_for(&enc(19)), Some(101));
        assert_eq!(n.child_for(&enc(1_000_000)), Some(103));
        // Not the leftmost page: the first record is a real key, and a key
        // below it still goes to the first child (the parent sent it here).
        let p = page(42, 1, &[(50, 7), (60, 8)], false);
        let n = Node::parse(&p, 42, 4).unwrap();
        assert_eq!(n.child_for(&enc(40)), Some(7));
        assert_eq!(n.child_for(&enc(60)), Some(8));
    }

    #[test]
    fn prefix_keys_go_where_the_first_entry_with_the_prefix_may_be() {
        // Pointers of (k, id) with the same k = 5 on both sides of a split.
        let fields = [INT, INT];
        let prefix = encode(&fields, &[KeyValue::Int(5)]).unwrap();
        assert_eq!(prefix.len(), 4);
        let wide = Node {
            level: 1,
            klen: 8,
            keys: [
                encode(&fields, &[KeyValue::Int(1), KeyValue::Int(1)]).unwrap(),
                encode(&fields, &[KeyValue::Int(5), KeyValue::Int(3)]).unwrap(),
            ]
            .concat(),
            children: vec![1, 2],
            first_is_min: false,
        };
        assert_eq!(
            wide.child_for(&prefix),
            Some(1),
            "(5, 1) would sort before (5, 3): the entry may be in the left child"
        );
        assert_eq!(
            wide.child_for(&encode(&fields, &[KeyValue::Int(5), KeyValue::Int(4)]).unwrap()),
            Some(2),
            "a whole key: exact"
        );
    }

    #[test]
    fn rejects_other_pages_torn_pages_and_broken_chains() {
        let p = page(42, 1, &[(1, 1)], true);
        assert_eq!(Node::parse(&p, 43, 4).unwrap_err(), PageError::NotThisIndex);
        let mut torn = p.clone();
        torn[P - 8..P - 4].copy_from_slice(&[0, 0, 0, 9]);
        assert_eq!(Node::parse(&torn, 42, 4).unwrap_err(), PageError::Torn);
        let mut loop_ = p.clone();
        // The record points at itself.
        let first = (INFIMUM as u16).wrapping_add(be16(&p, INFIMUM - 2)) as usize;
        loop_[first - 2..first].copy_from_slice(&0u16.to_be_bytes());
        assert!(matches!(Node::parse(&loop_, 42, 4), Err(PageError::Corrupt(_))));
        let mut leafish = p.clone();
        leafish[first - 3] = 0;
        assert!(matches!(Node::parse(&leafish, 42, 4), Err(PageError::Corrupt(_))));
        let mut wild = p;
        wild[INFIMUM - 2..INFIMUM].copy_from_slice(&0x3ff0u16.to_be_bytes());
        assert!(matches!(Node::parse(&wild, 42, 4), Err(PageError::Corrupt(_))));
        assert!(Node::parse(&vec![0u8; P], 42, 4).is_err());
    }

    #[test]
    fn which_indexes_map_to_pages() {
        let cols = vec![
            (1, "id".to_string(), "int(11)".to_string(), "int".to_string()),
            (2, "k".into(), "bigint(20) unsigned".into(), "bigint".into()),
            (3, "c".into(), "char(120)".into(), "char".into()),
            (4, "n".into(), "int(11)".into(), "int".into()),
        ];
        let parts = vec![
            ("PRIMARY".to_string(), false, 1, "id".to_string()),
            ("k_1".into(), true, 1, "k".into()),
            ("c_1".into(), true, 1, "c".into()),
            ("n_1".into(), true, 1, "n".into()),
        ];
        let mut t = Table::from_parts("d", "t", &cols, &parts).unwrap();
        t.columns[3].nullable = true;
        let ix = |name: &str| t.indexes.iter().position(|i| i.name == name).unwrap();
        assert_eq!(node_fields(&t, 0), Some(vec![INT]));
        assert_eq!(
            node_fields(&t, ix("k_1")),
            Some(vec![IntField { width: 8, signed: false }, INT]),
            "a secondary entry ends with the primary key"
        );
        assert_eq!(node_fields(&t, ix("c_1")), None, "strings compare by collation");
        assert_eq!(node_fields(&t, ix("n_1")), None, "a nullable column");
    }
}
