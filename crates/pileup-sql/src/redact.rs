//! A statement with its data taken out: every literal (strings, numbers,
//! hex and bit strings) becomes `?` and comments are dropped (optimizer
//! hints `/*+ … */` and version comments `/*! … */` are kept: they are
//! code), while the rest keeps its case and spacing, so that the statement
//! still reads as it was written. Literals can be personal data; what is
//! left names tables, columns and the statement's shape.

use crate::lex::{comment_end, is_word_byte, number_end, quoted_end, word_end};

/// `sql` with its literals replaced by `?` and its comments dropped, cut
/// to at most `max` bytes (at a character boundary, ending with `…`).
pub fn redact(sql: &[u8], max: usize) -> String {
    let (out, cut) = scrub(sql, max);
    clip(&out, max, cut).trim().to_string()
}

/// `text` as a string of at most `max` bytes of it (at a character
/// boundary), ending with `…` when some of it was left out: past `max`, or
/// `cut` short before.
pub fn clip(text: &[u8], max: usize, cut: bool) -> String {
    let cut = cut || text.len() > max;
    let mut s = String::from_utf8_lossy(&text[..text.len().min(max)]).into_owned();
    if cut {
        // A multi-byte character cut in two shows as U+FFFD: drop it.
        while s.ends_with('\u{FFFD}') {
            s.pop();
        }
        s.push('…');
    }
    s
}

/// `sql` scrubbed, up to a little past `max` bytes, and whether that left
/// some of it out.
fn scrub(sql: &[u8], max: usize) -> (Vec<u8>, bool) {
    let mut out = Vec::with_capacity(sql.len().min(max + 4));
    let mut i = 0;
    while i < sql.len() && out.len() <= max {
        let c = sql[i];
        match c {
            b'\'' | b'"' => {
                // A string: `_utf8mb4'x'` and `N'x'` introducers were
                // copied as words; the string itself goes.
                out.push(b'?');
                let e = quoted_end(sql, i);
                if memchr::memchr(b'\\', &sql[i..e]).is_some() {
                    // Where it ends depends on the session's sql_mode
                    // (NO_BACKSLASH_ESCAPES) and on the character set (a
                    // GBK or SJIS character's second byte can be `\`):
                    // nothing after it is kept, so that no reading of it
                    // leaves a literal outside.
                    return (out, true);
                }
                i = e;
            }
            b'`' => {
                let e = quoted_end(sql, i);
                if sql[e - 1] != b'`' || e == i + 1 {
                    // Unterminated: what follows is not known to be a name.
                    return (out, true);
                }
                out.extend_from_slice(&sql[i..e]);
                i = e;
            }
            b'x' | b'X' | b'b' | b'B' if sql.get(i + 1) == Some(&b'\'') && (i == 0 || !is_word_byte(sql[i - 1])) => {
                out.push(b'?');
                i = quoted_end(sql, i + 1);
            }
            b'0'..=b'9' if i == 0 || !is_word_byte(sql[i - 1]) => {
                // A number, or a word that starts with digits (`1.5abc`,
                // or a name such as `123_x`): either may be data.
                out.push(b'?');
                i = number_end(sql, i).unwrap_or_else(|| word_end(sql, i));
                if i < sql.len() && is_word_byte(sql[i]) {
                    i = word_end(sql, i);
                }
            }
            b'/' if sql.get(i + 1) == Some(&b'*') && matches!(sql.get(i + 2), Some(b'+' | b'!')) => {
                // Hints and version comments: code, whose literals go too.
                let e = comment_end(sql, i).unwrap_or(sql.len());
                out.extend_from_slice(b"/*");
                out.push(sql[i + 2]);
                let inner = sql.get(i + 3..e.saturating_sub(2).max(i + 3)).unwrap_or(b"");
                out.extend_from_slice(&scrub(inner, max).0);
                out.extend_from_slice(b"*/");
                i = e;
            }
            _ => match comment_end(sql, i) {
                Some(e) => {
                    // One space where the comment was, so that the words on
                    // either side stay apart.
                    if out.last().is_some_and(|b: &u8| !b.is_ascii_whitespace()) {
                        out.push(b' ');
                    }
                    i = e;
                    while i < sql.len() && matches!(sql[i], b' ' | b'\t') && out.last() == Some(&b' ') {
                        i += 1;
                    }
                }
                None if is_word_byte(c) => {
                    let e = word_end(sql, i);
                    out.extend_from_slice(&sql[i..e]);
                    i = e;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            },
        }
    }
    let cut = out.len() > max || i < sql.len();
    (out, cut)
}

#[cfg(test)]
mod tests {
    use super::redact;

    fn r(s: &str) -> String {
        redact(s.as_bytes(), 1024)
    }

    #[test]
    fn literals_go_and_the_statement_keeps_its_shape() {
        assert_eq!(
            r("SELECT name FROM users WHERE email = 'ann@example.com' AND id IN (1, 2,3) LIMIT 10"),
            "SELECT name FROM users WHERE email = ? AND id IN (?, ?,?) LIMIT ?"
        );
        assert_eq!(
            r("UPDATE t2 SET v = -1.5e3, w = 0xFF, b = b'101' WHERE k = \"it\\'s\""),
            "UPDATE t2 SET v = -?, w = ?, b = ? WHERE k = ?…"
        );
        assert_eq!(r("INSERT INTO `t 1` (c1) VALUES (X'0A'), ('a''b')"), "INSERT INTO `t 1` (c1) VALUES (?), (?)");
        assert_eq!(
            r("SELECT * FROM t1 WHERE c2 = 3 -- user 42\n AND c3 = 'x'"),
            "SELECT * FROM t1 WHERE c2 = ? \n AND c3 = ?"
        );
        assert_eq!(r("SELECT /* note 'secret' */ 1"), "SELECT ?");
        assert_eq!(
            r("SELECT /*+ MAX_EXECUTION_TIME(1000) */ a FROM t"),
            "SELECT /*+ MAX_EXECUTION_TIME(?) */ a FROM t"
        );
        assert_eq!(r("SELECT _utf8mb4'x' COLLATE utf8mb4_bin"), "SELECT _utf8mb4? COLLATE utf8mb4_bin");
    }

    #[test]
    fn an_ambiguous_string_or_an_unterminated_name_ends_the_sample() {
        // With NO_BACKSLASH_ESCAPES the first string ends at `\'`: nothing
        // after a string holding a backslash is kept.
        assert_eq!(r("SELECT * FROM t WHERE a = 'C:\\' AND e = 'ann@example.com'"), "SELECT * FROM t WHERE a = ?…");
        assert_eq!(r("SELECT `unterminated FROM t WHERE e = 'x'"), "SELECT …");
        assert_eq!(r("SELECT 1.5abc, 123_x FROM t"), "SELECT ?.?, ? FROM t");
    }

    #[test]
    fn long_statements_are_cut_at_a_character_with_an_ellipsis() {
        let long = format!("SELECT {} FROM t", "é, ".repeat(100));
        let got = redact(long.as_bytes(), 21);
        assert!(got.ends_with('…') && got.len() <= 21 + '…'.len_utf8(), "{got}");
        assert!(!got.contains('\u{FFFD}'), "{got}");
        assert_eq!(redact(b"SELECT 'unterminated", 100), "SELECT ?");
    }
}
