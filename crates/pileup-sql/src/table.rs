//! The one table of a single-table `SELECT`, and where an index hint goes.

use crate::lex::{find, is_word_byte, memchr_nl, quoted_end};

/// The one table of a single-table `SELECT … FROM t [AS a] …`: where its
/// name is and where an index hint goes (after the table and its alias).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleTable {
    /// The table as written (`t`, `` `t` ``, `db.t`).
    pub name: std::ops::Range<usize>,
    /// Where ` FORCE INDEX (k)` is inserted.
    pub hint_at: usize,
}

/// Words that end a table reference (after which no alias follows).
const AFTER_TABLE: &[&[u8]] = &[
    b"where",
    b"group",
    b"order",
    b"limit",
    b"having",
    b"join",
    b"left",
    b"right",
    b"inner",
    b"cross",
    b"straight_join",
    b"natural",
    b"use",
    b"force",
    b"ignore",
    b"union",
    b"for",
    b"lock",
    b"procedure",
    b"into",
    b"window",
    b"partition",
    b"outer",
    b"on",
    b"except",
    b"intersect",
    b"offset",
];

/// The table of a `SELECT` that reads exactly one table at its top level
/// (no join, no comma list, no index hint already, no subquery in FROM);
/// None otherwise.
pub fn single_table(sql: &[u8]) -> Option<SingleTable> {
    // Top-level words with their positions; strings, comments and
    // parenthesized parts skipped.
    let n = sql.len();
    let mut i = 0;
    let mut depth = 0u32;
    let mut words: Vec<(usize, usize)> = Vec::new();
    let mut from_at = None;
    while i < n {
        let c = sql[i];
        match c {
            b'\'' | b'"' => i = quoted_end(sql, i),
            b'/' if sql.get(i + 1) == Some(&b'*') => i = find(sql, i + 2, b"*/").map_or(n, |e| e + 2),
            b'#' => i = memchr_nl(sql, i),
            b'-' if sql.get(i + 1) == Some(&b'-') => i = memchr_nl(sql, i),
            b'(' => {
                depth += 1;
                i += 1;
            }
            b')' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'`' if depth == 0 => {
                let e = quoted_end(sql, i);
                words.push((i, e));
                i = e;
            }
            c if depth == 0 && (is_word_byte(c) || c == b'.' || c == b',') => {
                let s = i;
                if c == b',' || c == b'.' {
                    i += 1;
                } else {
                    while i < n && is_word_byte(sql[i]) {
                        i += 1;
                    }
                }
                if from_at.is_none() && sql[s..i].eq_ignore_ascii_case(b"from") {
                    from_at = Some(words.len());
                }
                words.push((s, i));
            }
            _ => i += 1,
        }
    }
    let first = words.first()?;
    if !sql[first.0..first.1].eq_ignore_ascii_case(b"select") {
        return None;
    }
    let f = from_at?;
    let w = |k: usize| words.get(k).map(|&(a, b)| &sql[a..b]);
    let is = |k: usize, word: &[u8]| w(k).is_some_and(|x| x.eq_ignore_ascii_case(word));
    // A subquery in FROM leaves no word right after it at this level.
    let mut k = f + 1;
    let name_start = words.get(k)?.0;
    if words[k].0 < words[f].1 || sql[words[f].1..name_start].contains(&b'(') {
        return None;
    }
    let mut name_end = words[k].1;
    k += 1;
    while is(k, b".") && w(k + 1).is_some() {
        name_end = words[k + 1].1;
        k += 2;
    }
    let mut hint_at = name_end;
    // Only whitespace between the name's parts.
    if sql[name_start..name_end].iter().any(|c| c.is_ascii_whitespace()) {
        return None;
    }
    let reserved = |x: &[u8]| AFTER_TABLE.iter().any(|r| x.eq_ignore_ascii_case(r));
    if is(k, b"as") {
        hint_at = words.get(k + 1)?.1;
        k += 2;
    } else if w(k).is_some_and(|x| x != b"," && !reserved(x)) {
        hint_at = words[k].1;
        k += 1;
    }
    match w(k) {
        None => {}
        Some(x) if x == b"," => return None,
        Some(x) => {
            let x = x.to_ascii_lowercase();
            if matches!(
                x.as_slice(),
                b"join"
                    | b"left"
                    | b"right"
                    | b"inner"
                    | b"cross"
                    | b"straight_join"
                    | b"natural"
                    | b"use"
                    | b"force"
                    | b"ignore"
            ) {
                return None;
            }
        }
    }
    Some(SingleTable { name: name_start..name_end, hint_at })
}
