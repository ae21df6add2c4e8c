//! Skeletons: a statement with its plain numbers and strings marked, a
//! cheaper key than the fingerprint that implies it.

use crate::lex::{comment_end, is_word_byte, quoted_end, trim};

/// Marker bytes a skeleton puts for a number and for a string in single
/// and in double quotes (`X'1F'` is a literal, `X"1F"` a name and a
/// string).
const SKEL_NUMBER: u8 = 1;
const SKEL_STRING: u8 = 2;
const SKEL_DQ_STRING: u8 = 3;

/// The statement as written, with each plain number (digits, alone between
/// operators, spaces or parentheses) and each quoted string replaced by one
/// marker byte, into `out`. False, and `out` not to be used, for a
/// statement a skeleton cannot vouch for (one that already holds a marker
/// byte, `administrator command:`, `use db`).
///
/// Two statements with the same skeleton have the same
/// [`fingerprint`](crate::fingerprint): the tokenizer reads every byte a
/// skeleton keeps the same way, and reads each replaced span as one literal
/// of that extent whatever it holds (strings end where
/// [`fingerprint`](crate::fingerprint)'s strings end; comments and
/// backquoted names are kept whole; digits touching a name, a `.`, `@` or
/// an exponent are kept). So fingerprints, and anything derived from them,
/// can be kept by skeleton: finding one costs a scan, not a tokenization.
pub fn skeleton(sql: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let t = trim(sql);
    let starts_ci = |p: &[u8]| t.len() >= p.len() && t[..p.len()].eq_ignore_ascii_case(p);
    if starts_ci(b"administrator command:")
        || starts_ci(b"use ")
        || memchr::memchr3(SKEL_NUMBER, SKEL_STRING, SKEL_DQ_STRING, sql).is_some()
    {
        return false;
    }
    let n = sql.len();
    // Bytes from `kept` on are copied when the next marker is written.
    let (mut i, mut kept) = (0, 0);
    while i < n {
        match sql[i] {
            // Comments are kept whole; a `/` or `-` that starts none is a
            // byte like another.
            b'/' | b'#' | b'-' => i = comment_end(sql, i).unwrap_or(i + 1),
            q @ (b'\'' | b'"') => {
                out.extend_from_slice(&sql[kept..i]);
                out.push(if q == b'"' { SKEL_DQ_STRING } else { SKEL_STRING });
                i = quoted_end(sql, i);
                kept = i;
            }
            b'`' => i = quoted_end(sql, i),
            b'0'..=b'9' => {
                let alone_before = i == 0
                    || matches!(
                        sql[i - 1],
                        b' ' | b'\t'
                            | b'\n'
                            | b'\r'
                            | b'('
                            | b','
                            | b'='
                            | b'<'
                            | b'>'
                            | b'+'
                            | b'-'
                            | b'*'
                            | b'/'
                            | b'%'
                    );
                let mut j = i + 1;
                while j < n && sql[j].is_ascii_digit() {
                    j += 1;
                }
                let alone_after = j == n || !(is_word_byte(sql[j]) || sql[j] == b'.');
                if alone_before && alone_after {
                    out.extend_from_slice(&sql[kept..i]);
                    out.push(SKEL_NUMBER);
                    kept = j;
                }
                i = j;
            }
            c if is_word_byte(c) => {
                while i < n && is_word_byte(sql[i]) {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    out.extend_from_slice(&sql[kept..]);
    true
}
