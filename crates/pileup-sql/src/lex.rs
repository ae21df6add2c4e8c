//! Byte-level scanning every reader of statements shares: which bytes make
//! words, where quoted strings, numbers and comments end.

/// Whether `c` can be part of a word (identifier or keyword).
pub(crate) fn is_word_byte(c: u8) -> bool {
    // A table: this is asked of every byte of every identifier.
    const WORD: [bool; 256] = {
        let mut t = [false; 256];
        let mut c = 0;
        while c < 256 {
            let b = c as u8;
            t[c] = b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
            c += 1;
        }
        t
    };
    WORD[usize::from(c)]
}

/// The end of the word (identifier or keyword bytes) that starts at `i`.
pub(crate) fn word_end(sql: &[u8], i: usize) -> usize {
    let mut e = i;
    while e < sql.len() && is_word_byte(sql[e]) {
        e += 1;
    }
    e
}

/// The end of a quoted string or identifier that starts at `i` (its quote),
/// past the closing quote: backslash escapes (not in backquotes) and
/// doubled quotes are inside it. Unterminated: the end of the text.
pub(crate) fn quoted_end(sql: &[u8], i: usize) -> usize {
    let q = sql[i];
    let mut j = i + 1;
    loop {
        // Strings are most of the bytes of many statements: jump to the
        // next quote or backslash.
        let next = if q == b'`' { memchr::memchr(q, &sql[j..]) } else { memchr::memchr2(q, b'\\', &sql[j..]) };
        let Some(p) = next else { return sql.len() };
        j += p;
        if sql[j] == b'\\' {
            j += 2;
            if j >= sql.len() {
                return sql.len();
            }
            continue;
        }
        if sql.get(j + 1) == Some(&q) {
            j += 2;
            continue;
        }
        return j + 1;
    }
}

/// The end of a number starting at `i`, or None when the digits start an
/// identifier (`1abc`, `123_x`).
pub(crate) fn number_end(sql: &[u8], i: usize) -> Option<usize> {
    let n = sql.len();
    let mut j = i;
    if sql[j] == b'0' && matches!(sql.get(j + 1), Some(b'x' | b'X' | b'b' | b'B')) {
        let hex = matches!(sql[j + 1], b'x' | b'X');
        let mut k = j + 2;
        while k < n && (if hex { sql[k].is_ascii_hexdigit() } else { sql[k] == b'0' || sql[k] == b'1' }) {
            k += 1;
        }
        if k > j + 2 && (k >= n || !is_word_byte(sql[k])) {
            return Some(k);
        }
    }
    while j < n && sql[j].is_ascii_digit() {
        j += 1;
    }
    if j < n && sql[j] == b'.' {
        j += 1;
        while j < n && sql[j].is_ascii_digit() {
            j += 1;
        }
    }
    if j < n && matches!(sql[j], b'e' | b'E') {
        let mut k = j + 1;
        if k < n && matches!(sql[k], b'+' | b'-') {
            k += 1;
        }
        if k < n && sql[k].is_ascii_digit() {
            while k < n && sql[k].is_ascii_digit() {
                k += 1;
            }
            j = k;
        }
    }
    if j < n && is_word_byte(sql[j]) {
        return None;
    }
    Some(j)
}

/// `s` without its leading and trailing ASCII whitespace.
pub(crate) fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(s.len());
    let end = s.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &s[start..end]
}

/// Where a comment that starts at `i` ends (`/* */`, `#` and `-- ` to the
/// line's end), or None when no comment starts there. The tokenizer and
/// skeletons skip the same comments.
#[inline]
pub(crate) fn comment_end(sql: &[u8], i: usize) -> Option<usize> {
    match sql[i] {
        b'/' if sql.get(i + 1) == Some(&b'*') => Some(find(sql, i + 2, b"*/").map_or(sql.len(), |e| e + 2)),
        b'#' => Some(memchr_nl(sql, i)),
        b'-' if sql.get(i + 1) == Some(&b'-') && sql.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()) => {
            Some(memchr_nl(sql, i))
        }
        _ => None,
    }
}

/// The next newline at or after `from`, or the end of `s`.
pub(crate) fn memchr_nl(s: &[u8], from: usize) -> usize {
    s[from..].iter().position(|&c| c == b'\n').map_or(s.len(), |p| from + p)
}

/// Where `needle` next occurs in `hay` at or after `from`.
pub(crate) fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}
