//! What an idle connection last ran, read from the server's memory.
//!
//! A MariaDB connection that sits idle (`Sleep`) shows no statement in the
//! processlist, yet the holder of a global read lock or a metadata lock is
//! usually such a connection, and what it last ran (`FLUSH TABLES WITH
//! READ LOCK`, an `UPDATE` in a transaction left open) is the answer a DBA
//! needs. Without performance_schema's history, the text is still in the
//! connection's memory: each statement's text is the first thing the
//! server copies into the connection's statement arena (the `THD`'s main
//! `MEM_ROOT`), whose first block is kept, not cleared, between
//! statements. So it stays there until the next statement overwrites it.
//!
//! Finding it on a stripped server takes only exported names:
//! * the connection's `THD` is the thread-local `THR_THD`, which the
//!   exported `_current_thd()` reads at a fixed offset from the thread
//!   pointer; the offset is decoded from that function's two instructions;
//! * the thread pointer (`fs_base`) is read while the thread is stopped for
//!   microseconds ([`pileup_engine::parts::thread_pointers`]);
//! * the `THD` is checked for the connection's id and OS thread id, both
//!   within it;
//! * the arena's block is the one a word of the `THD` points at whose
//!   header (next, bytes left, size) is sound and whose first bytes are a
//!   statement's text, ended by a NUL. A connection's first statement is
//!   not first in its block: what the login left in the arena comes before
//!   it (the arena is reset after each statement, not after the login), so
//!   when no block starts with a statement, the sound blocks are searched
//!   at each 8-byte boundary (where the arena's allocations begin) for the
//!   first text that is one.
//!
//! Everything else is read with `process_vm_readv`, without a stop. What
//! cannot be found is said, with why. One case cannot be told: a statement
//! too long for the arena's first block is copied to another, and the first
//! block then still holds the statement before it. Written by hand:
//! no crate reads a server's session state from outside.

use pileup_engine::parts::{read_mem, MapEntry};

/// What was found for one connection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LastStatement {
    /// Its last statement's text (at most [`MAX_TEXT`] bytes).
    Found(String),
    /// Not found, and why.
    Unknown(String),
}

/// Longest text kept.
pub const MAX_TEXT: usize = 4096;

/// How much of a `THD` is searched for its id and its arena.
const THD_WINDOW: usize = 64 * 1024;

/// A `MEM_ROOT` block's header: next, bytes left, size.
const BLOCK_HEADER: usize = 24;

/// The thread-pointer offset of `THR_THD`, from the machine code of
/// `_current_thd()`: `mov %fs:0x0,%rax` then `mov disp(%rax),%rax`.
pub fn decode_current_thd(code: &[u8]) -> Option<i64> {
    // mov %fs:0x0,%rax (with any data16 padding before it, as TLS
    // relaxation leaves): 64 48 8b 04 25 00 00 00 00.
    const FS0: [u8; 9] = [0x64, 0x48, 0x8b, 0x04, 0x25, 0, 0, 0, 0];
    let at = code.windows(FS0.len()).position(|w| w == FS0)? + FS0.len();
    // Then, with perhaps a pop of the frame pointer between: mov disp(%rax),%rax.
    let rest = &code[at..code.len().min(at + 8)];
    let rest = rest.strip_prefix(&[0x5d]).unwrap_or(rest);
    match rest {
        [0x48, 0x8b, 0x80, a, b, c, d, ..] => Some(i32::from_le_bytes([*a, *b, *c, *d]) as i64),
        [0x48, 0x8b, 0x40, d, ..] => Some(*d as i8 as i64),
        [0x48, 0x8b, 0x00, ..] => Some(0),
        _ => None,
    }
}

/// `_current_thd`'s decoded offset in the executable at `path`.
fn thd_offset(path: &str) -> Result<i64, String> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let f = std::fs::File::open(path).map_err(|e| format!("reading {path}: {e}"))?;
    // SAFETY: a read-only map of the server's executable, which is not
    // written while it runs.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| format!("reading {path}: {e}"))?;
    let file = object::File::parse(&*map).map_err(|e| format!("reading {path}: {e}"))?;
    let sym = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok("_current_thd"))
        .ok_or("the server does not export _current_thd (MariaDB does; this is another server)")?;
    let section = sym
        .section_index()
        .and_then(|i| file.section_by_index(i).ok())
        .ok_or("_current_thd has no code in the executable")?;
    let code = section.data_range(sym.address(), 32).ok().flatten().ok_or("_current_thd's code could not be read")?;
    decode_current_thd(code).ok_or_else(|| "_current_thd's code is not the thread-local read pileup knows".into())
}

/// The first word of a statement's text, upper-cased, past leading blanks
/// and comments.
fn first_word(text: &str) -> String {
    let mut t = text.trim_start();
    while let Some(rest) = t.strip_prefix("/*") {
        t = rest.split_once("*/").map_or("", |r| r.1).trim_start();
    }
    t.chars().take_while(|c| c.is_ascii_alphabetic()).collect::<String>().to_ascii_uppercase()
}

/// Statement verbs: a text that begins with one of these is a statement.
const VERBS: &[&str] = &[
    "ALTER",
    "ANALYZE",
    "BACKUP",
    "BEGIN",
    "BINLOG",
    "CALL",
    "CHANGE",
    "CHECK",
    "CHECKSUM",
    "COMMIT",
    "CREATE",
    "DEALLOCATE",
    "DELETE",
    "DESC",
    "DESCRIBE",
    "DO",
    "DROP",
    "EXECUTE",
    "EXPLAIN",
    "FLUSH",
    "GRANT",
    "HANDLER",
    "INSERT",
    "INSTALL",
    "KILL",
    "LOAD",
    "LOCK",
    "OPTIMIZE",
    "PREPARE",
    "PURGE",
    "RELEASE",
    "RENAME",
    "REPAIR",
    "REPLACE",
    "RESET",
    "REVOKE",
    "ROLLBACK",
    "SAVEPOINT",
    "SELECT",
    "SET",
    "SHOW",
    "START",
    "TABLE",
    "TRUNCATE",
    "UNINSTALL",
    "UNLOCK",
    "UPDATE",
    "USE",
    "VALUES",
    "WITH",
    "XA",
];

/// How much of a block is read and searched.
const BLOCK_READ: usize = 32 * 1024;

/// A `MEM_ROOT` block's size from its header (`block` read from the header
/// on), if the header is sound.
fn block_size(block: &[u8]) -> Option<usize> {
    let word = |i: usize| block.get(i..i + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    let (left, size) = (word(8)?, word(16)?);
    ((256..=(1 << 24)).contains(&size) && left <= size).then_some(size as usize)
}

/// The statement at the start of a `MEM_ROOT` block (`block` read from its
/// header on), if the header is sound and the text is a statement.
pub fn statement_in_block(block: &[u8]) -> Option<String> {
    let size = block_size(block)?;
    statement_at(&block[BLOCK_HEADER.min(block.len())..block.len().min(size)])
}

/// The first statement at an 8-byte boundary of a sound block, anywhere in
/// it: a connection's first statement, after what its login allocated.
/// Held to more than a text at the block's start, since arbitrary bytes
/// come before it: at least two words, the verb followed by a space, and
/// printable throughout.
pub fn statement_anywhere_in_block(block: &[u8]) -> Option<String> {
    let size = block_size(block)?;
    let data = &block[BLOCK_HEADER.min(block.len())..block.len().min(size)];
    (0..data.len()).step_by(8).find_map(|at| {
        let text = statement_at(&data[at..])?;
        let verb = first_word(&text).len();
        let printable = text.chars().all(|c| !c.is_control() || c == '\n' || c == ' ');
        let spaced = text.trim_start().as_bytes().get(verb).is_some_and(|c| *c == b' ' || *c == b'\n');
        (text.len() >= 8 && printable && spaced).then_some(text)
    })
}

/// A statement's text at the start of `data`, ended by a NUL.
fn statement_at(data: &[u8]) -> Option<String> {
    // Cheap first: the text begins with a letter, a blank or a comment.
    if !data.first().is_some_and(|c| c.is_ascii_alphabetic() || *c == b'/' || c.is_ascii_whitespace()) {
        return None;
    }
    let end = memchr_nul(&data[..data.len().min(MAX_TEXT + 1)])?;
    let text = std::str::from_utf8(&data[..end]).ok()?;
    let sound = text.len() >= 2 && text.chars().all(|c| !c.is_control() || c.is_whitespace());
    (sound && VERBS.contains(&first_word(text).as_str())).then(|| text.to_string())
}

fn memchr_nul(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == 0)
}

/// Is this word, read at `at` of a `THD`, the value `v`?
fn has_word(thd: &[u8], v: u64, width: usize) -> bool {
    thd.chunks_exact(width).any(|c| match width {
        8 => u64::from_le_bytes(c.try_into().unwrap()) == v,
        _ => u64::from(u32::from_le_bytes(c.try_into().unwrap())) == v,
    })
}

/// Whether `addr` is in a writable anonymous mapping (the heap, an arena).
fn in_heap(maps: &[MapEntry], addr: u64) -> bool {
    pileup_engine::parts::find_map(maps, addr).is_some_and(|m| m.perms.starts_with("rw") && !m.path.starts_with('/'))
}

/// The last statement of each connection (connection id, OS thread id) of
/// the MariaDB server `pid`. Each thread is stopped only to read its
/// thread pointer, at most `max_stop`. An error when none can be read
/// (not MariaDB, not x86_64, no permission), with why.
pub fn last_statements(
    pid: i32,
    conns: &[(u64, i32)],
    max_stop: std::time::Duration,
) -> Result<Vec<(u64, LastStatement)>, String> {
    let offset = thd_offset(&format!("/proc/{pid}/exe"))?;
    let maps = pileup_engine::parts::read_maps(pid).map_err(|e| e.to_string())?;
    let tids: Vec<i32> = conns.iter().map(|c| c.1).collect();
    let tps = pileup_engine::parts::thread_pointers(pid, &tids, max_stop).map_err(|e| e.to_string())?;
    Ok(conns
        .iter()
        .map(|&(id, tid)| {
            let tp = tps.iter().find(|t| t.0 == tid).and_then(|t| t.1);
            let found = match tp {
                None => LastStatement::Unknown("its thread could not be stopped briefly to find its memory".into()),
                Some(tp) => read_one(pid, &maps, tp, offset, id, tid),
            };
            (id, found)
        })
        .collect())
}

fn read_one(pid: i32, maps: &[MapEntry], tp: u64, offset: i64, id: u64, tid: i32) -> LastStatement {
    let unknown = |why: &str| LastStatement::Unknown(why.to_string());
    let mut w = [0u8; 8];
    if read_mem(pid, tp.wrapping_add_signed(offset), &mut w) != 8 {
        return unknown("its thread-local THD pointer could not be read");
    }
    let thd_at = u64::from_le_bytes(w);
    if thd_at == 0 || !in_heap(maps, thd_at) {
        return unknown("its thread has no THD (not serving a connection now)");
    }
    let mut thd = vec![0u8; THD_WINDOW];
    let n = read_mem(pid, thd_at, &mut thd);
    thd.truncate(n - n % 8);
    if !(has_word(&thd, id, 8) && has_word(&thd, tid as u64, 4)) {
        return unknown("the THD found does not hold this connection's id and thread id");
    }
    let mut tried = std::collections::HashSet::new();
    // The sound blocks the THD points at, read whole (up to BLOCK_READ).
    let mut blocks = vec![];
    for c in thd.chunks_exact(8) {
        let p = u64::from_le_bytes(c.try_into().unwrap());
        if p % 8 != 0 || !in_heap(maps, p) || !tried.insert(p) {
            continue;
        }
        let mut header = [0u8; BLOCK_HEADER];
        let Some(size) = (read_mem(pid, p, &mut header) == BLOCK_HEADER).then(|| block_size(&header)).flatten() else {
            continue;
        };
        let mut block = vec![0u8; size.min(BLOCK_READ)];
        let got = read_mem(pid, p, &mut block);
        block.truncate(got);
        if let Some(text) = statement_in_block(&block) {
            return LastStatement::Found(text);
        }
        blocks.push(block);
    }
    if let Some(text) = blocks.iter().find_map(|b| statement_anywhere_in_block(b)) {
        return LastStatement::Found(text);
    }
    unknown("no statement text was left in its statement arena (the text of a connection's first statement, and of one longer than the arena's first block, is often kept in a block freed when the statement ends)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_local_offset_is_decoded_from_current_thd() {
        // MariaDB 10.11 on x86_64: push %rbp; mov %rsp,%rbp; data16×3 mov
        // %fs:0,%rax; pop %rbp; mov -0x68(%rax),%rax; ret.
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0x66, 0x66, 0x66, 0x64, 0x48, 0x8b, 0x04, 0x25, 0, 0, 0, 0, 0x5d, 0x48, 0x8b, 0x80,
            0x98, 0xff, 0xff, 0xff, 0xc3,
        ];
        assert_eq!(decode_current_thd(&code), Some(-0x68));
        let short = [0x64, 0x48, 0x8b, 0x04, 0x25, 0, 0, 0, 0, 0x48, 0x8b, 0x40, 0xf8, 0xc3];
        assert_eq!(decode_current_thd(&short), Some(-8));
        // A call to __tls_get_addr (a dynamic TLS model) is not this.
        assert_eq!(decode_current_thd(&[0x55, 0x48, 0x89, 0xe5, 0xe8, 1, 2, 3, 4]), None);
    }

    fn block(left: u64, size: u64, text: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 8];
        b.extend(left.to_le_bytes());
        b.extend(size.to_le_bytes());
        b.extend(text);
        b.resize(BLOCK_HEADER + 200, 0xa5);
        b
    }

    #[test]
    fn a_statement_is_read_from_a_sound_block_only() {
        let b = block(0x7fc8, 0x7fe0, b"FLUSH TABLES WITH READ LOCK\0\0il\xff");
        assert_eq!(statement_in_block(&b).as_deref(), Some("FLUSH TABLES WITH READ LOCK"));
        let b = block(100, 4096, b"/* app */ update t set a = 1 where id = 7\0");
        assert_eq!(statement_in_block(&b).as_deref(), Some("/* app */ update t set a = 1 where id = 7"));
        // Not a statement, not ended, or an unsound header.
        assert_eq!(statement_in_block(&block(100, 4096, b"root\0")), None);
        assert_eq!(statement_in_block(&block(100, 4096, &[b'S'; 300])), None);
        assert_eq!(statement_in_block(&block(5000, 4096, b"SELECT 1\0")), None);
        assert_eq!(statement_in_block(&block(10, 64, b"SELECT 1\0")), None);
        assert_eq!(statement_in_block(&block(100, 4096, b"SELECT \x01\x02\0")), None);
        assert_eq!(statement_in_block(&[0u8; 10]), None);
    }

    #[test]
    fn a_first_statement_is_found_after_what_the_login_left() {
        // The login's allocations first (a user, a host, binary words),
        // then the statement at an 8-byte boundary.
        let mut text = b"root\0\0\0\0localhost\0\0\0\0\0\0\0".to_vec();
        text.extend([0x10, 0x22, 0x7f, 0, 0, 0, 0, 0]);
        assert_eq!(text.len() % 8, 0);
        text.extend(b"FLUSH TABLES WITH READ LOCK\0db\0");
        let b = block(0x7fc8, 0x7fe0, &text);
        assert_eq!(statement_in_block(&b), None, "not at the start");
        assert_eq!(statement_anywhere_in_block(&b).as_deref(), Some("FLUSH TABLES WITH READ LOCK"));
        // Only at the arena's boundaries: a verb inside other text is not one.
        let b = block(0x7fc8, 0x7fe0, b"xxSELECT 1\0");
        assert_eq!(statement_anywhere_in_block(&b), None);
        // Bytes that only begin like a statement are not one.
        let b = block(0x7fc8, 0x7fe0, b"\x01\x02\x03\x04\x05\x06\x07\x08Xa\t$!w\0");
        assert_eq!(statement_anywhere_in_block(&b), None);
        let b = block(0x7fc8, 0x7fe0, b"\x01\x02\x03\x04\x05\x06\x07\x08SET\0");
        assert_eq!(statement_anywhere_in_block(&b), None);
        // An unsound header is never searched.
        assert_eq!(statement_anywhere_in_block(&block(5000, 4096, &text)), None);
    }

    #[test]
    fn thd_words_match_at_their_width() {
        let mut thd = vec![0u8; 64];
        thd[16..24].copy_from_slice(&42u64.to_le_bytes());
        thd[36..40].copy_from_slice(&25943u32.to_le_bytes());
        assert!(has_word(&thd, 42, 8) && has_word(&thd, 25943, 4));
        assert!(!has_word(&thd, 25943, 8) && !has_word(&thd, 43, 8));
    }
}
