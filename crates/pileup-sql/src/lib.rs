//! Statement classes: a statement reduced to the shape every execution of it
//! shares, the key pileup groups statements by.
//!
//! [`fingerprint`] folds what varies between executions of one statement:
//! literals (strings, numbers, hex and bit values, `NULL`, `TRUE`/`FALSE`,
//! `?` placeholders) become `?`; `IN (...)` lists of literals and the rows
//! of `VALUES (...), (...)` become `(?+)` (rows holding more than literals:
//! those of the first row's shape after it are dropped); `LIMIT n, m` and `LIMIT n OFFSET
//! m` become `limit ?`; comments, `ASC` and case are dropped; tokens are
//! spaced one way whatever the source's whitespace. Identifiers keep their
//! digits (`sbtest1` and `sbtest2` are different tables, so different
//! classes).
//!
//! Written here rather than taken from a SQL parser: it runs on every
//! statement of a slow log (millions a second), it must take whatever a
//! server logged — statements no parser knows, truncated ones, binary
//! bytes — and never fail, and it must not allocate per token. A parser's
//! tokenizer does all three of those things the other way.

#![forbid(unsafe_code)]

/// A statement class's identifier: a stable 64-bit hash of its fingerprint
/// (the same on every machine and in every version of pileup), printed as
/// 16 hex digits.
pub fn class_id(fingerprint: &[u8]) -> u64 {
    // FNV-1a: stable by definition, and class ids are computed once per
    // class, not per statement, so its speed does not matter.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in fingerprint {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Kind of the last token written, for spacing and folding decisions.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Start,
    Word,
    Lit,
    Open,
    Close,
    Comma,
    Dot,
    Op,
}

/// A list being watched for collapse: `IN (` or `VALUES (` seen.
#[derive(Clone, Copy)]
struct List {
    /// Where the output stood before the list's first `(`.
    mark: usize,
    depth: u32,
    /// Only literals, commas and parentheses so far.
    only_lits: bool,
    /// `VALUES`: rows may follow one another after a comma.
    rows: bool,
}

/// The rows of a `VALUES` list, watched so that rows repeating the first
/// one's shape are dropped (`VALUES (?, now()), (?, now())` is one class
/// whatever the number of rows). Lists of literals only collapse whole,
/// through [`List`].
#[derive(Clone, Copy)]
struct Rows {
    depth: u32,
    /// The first row in the output: its `(` to past its `)`.
    first: Option<(usize, usize)>,
    /// The current row's `(`.
    open: usize,
    /// The comma before the current row.
    comma: usize,
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
    prev: Kind,
    rows: Option<Rows>,
    /// The last word written, lowercased (first 16 bytes).
    word: [u8; 16],
    word_len: usize,
    /// The word before it.
    word2: [u8; 16],
    word2_len: usize,
    list: Option<List>,
    /// A `,` or `OFFSET` after `LIMIT ?`: the next literal is dropped.
    limit_tail: bool,
}

const SPACE_BEFORE_PAREN: &[&[u8]] = &[
    b"in",
    b"values",
    b"value",
    b"and",
    b"or",
    b"not",
    b"exists",
    b"from",
    b"join",
    b"on",
    b"where",
    b"as",
    b"select",
    b"any",
    b"all",
    b"some",
    b"using",
    b"union",
    b"when",
    b"then",
    b"else",
    b"set",
    b"by",
    b"having",
    b"is",
    b"like",
    b"between",
    b"return",
    b"xor",
    b"case",
    b"distinct",
    b"lateral",
];

/// Words after which `-5` is a negative number, not a subtraction.
const BEFORE_UNARY: &[&[u8]] = &[
    b"select",
    b"where",
    b"and",
    b"or",
    b"not",
    b"by",
    b"then",
    b"else",
    b"when",
    b"between",
    b"like",
    b"interval",
    b"return",
    b"limit",
    b"values",
    b"value",
    b"set",
    b"case",
    b"having",
    b"on",
    b"in",
    b"is",
    b"xor",
];

impl Writer<'_> {
    fn last_word(&self) -> &[u8] {
        &self.word[..self.word_len]
    }

    fn space_before(&self, k: Kind) -> bool {
        match (self.prev, k) {
            (Kind::Start, _) | (_, Kind::Comma | Kind::Close | Kind::Dot) | (Kind::Open | Kind::Dot, _) => false,
            (Kind::Word, Kind::Open) => SPACE_BEFORE_PAREN.contains(&self.last_word()),
            _ => true,
        }
    }

    /// Write one token of kind `k` (its bytes already lowercased by the
    /// caller where that applies), after the list and LIMIT rules.
    fn token(&mut self, k: Kind, text: &[u8]) {
        if self.limit_tail {
            self.limit_tail = false;
            if k == Kind::Lit {
                return;
            }
        }
        if let Some(mut l) = self.list {
            let keep = match k {
                Kind::Lit => true,
                Kind::Open => {
                    l.depth += 1;
                    true
                }
                Kind::Close if l.depth > 0 => {
                    l.depth -= 1;
                    true
                }
                Kind::Comma => true,
                _ => false,
            };
            if keep {
                self.list = Some(l);
                self.put(k, text);
                if k == Kind::Close && l.depth == 0 && !l.rows {
                    self.end_list();
                }
                return;
            }
            if l.depth == 0 {
                // After a VALUES list's rows: collapse them, then go on.
                self.end_list();
            } else {
                self.list = None;
            }
        }
        if k == Kind::Open && matches!(self.last_word(), b"in" | b"values" | b"value") && self.prev == Kind::Word {
            let rows = self.last_word() != b"in";
            self.list = Some(List { mark: self.out.len(), depth: 1, only_lits: true, rows });
            if rows {
                self.rows = Some(Rows { depth: 0, first: None, open: 0, comma: 0 });
            }
            self.put(k, text);
            return;
        }
        self.put(k, text);
    }

    /// The list watched ends: literals only collapse to ` (?+)`.
    fn end_list(&mut self) {
        if let Some(l) = self.list.take() {
            if l.only_lits && l.depth == 0 {
                self.rows = None;
                let trailing_comma = self.prev == Kind::Comma;
                self.out.truncate(l.mark);
                self.out.extend_from_slice(b" (?+)");
                self.prev = Kind::Close;
                if trailing_comma {
                    self.out.push(b',');
                    self.prev = Kind::Comma;
                }
            }
        }
    }

    fn put(&mut self, k: Kind, text: &[u8]) {
        if self.space_before(k) {
            self.out.push(b' ');
        }
        self.out.extend_from_slice(text);
        if let Some(mut r) = self.rows {
            match k {
                Kind::Open => {
                    if r.depth == 0 {
                        r.open = self.out.len() - 1;
                    }
                    r.depth += 1;
                }
                Kind::Close if r.depth > 0 => {
                    r.depth -= 1;
                    if r.depth == 0 {
                        match r.first {
                            None => r.first = Some((r.open, self.out.len())),
                            Some((a, b)) if r.comma > 0 && self.out[r.open..] == self.out[a..b] => {
                                // The same shape as the first row: dropped
                                // with its comma.
                                self.out.truncate(r.comma);
                            }
                            Some(_) => {}
                        }
                    }
                }
                Kind::Comma if r.depth == 0 => r.comma = self.out.len() - 1,
                _ if r.depth == 0 => {
                    self.rows = None;
                    return self.note_word(k, text);
                }
                _ => {}
            }
            self.rows = Some(r);
        }
        self.note_word(k, text);
    }

    fn note_word(&mut self, k: Kind, text: &[u8]) {
        if k == Kind::Word {
            self.word2 = self.word;
            self.word2_len = self.word_len;
            let n = text.len().min(16);
            self.word[..n].copy_from_slice(&text[..n]);
            self.word_len = n;
        } else if k != Kind::Lit {
            self.word_len = 0;
        }
        self.prev = k;
    }

    fn finish(&mut self) {
        if self.list.is_some_and(|l| l.rows) {
            self.end_list();
        }
        self.list = None;
    }
}

fn is_word_byte(c: u8) -> bool {
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

/// A word being read, lowercased: on the stack for all but very long ones.
type WordBuf = smallvec::SmallVec<[u8; 64]>;

/// The end of a quoted string or identifier that starts at `i` (its quote),
/// past the closing quote: backslash escapes (not in backquotes) and
/// doubled quotes are inside it. Unterminated: the end of the text.
fn quoted_end(sql: &[u8], i: usize) -> usize {
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
fn number_end(sql: &[u8], i: usize) -> Option<usize> {
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

/// A statement's class as text, as `pileup digest` groups statements: its
/// fingerprint, for tools that name the statement a thread ran.
pub fn statement_class(sql: &str) -> String {
    let mut out = Vec::with_capacity(sql.len());
    fingerprint(sql.as_bytes(), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Reduce `sql` to its class's fingerprint, written to `out` (cleared
/// first). Never fails; any bytes are accepted.
pub fn fingerprint(sql: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let sql = trim(sql);
    if let Some(rest) = sql.strip_prefix(b"administrator command: ") {
        out.extend_from_slice(b"administrator command: ");
        out.extend_from_slice(trim(rest.strip_suffix(b";").unwrap_or(rest)));
        return;
    }
    if sql.len() > 4 && sql[..4].eq_ignore_ascii_case(b"use ") && !sql[4..].iter().any(|c| c.is_ascii_whitespace()) {
        out.extend_from_slice(b"use ?");
        return;
    }
    let mut w = Writer {
        out,
        prev: Kind::Start,
        rows: None,
        word: [0; 16],
        word_len: 0,
        word2: [0; 16],
        word2_len: 0,
        list: None,
        limit_tail: false,
    };
    let mut word = WordBuf::new();
    let mut i = 0;
    while i < sql.len() {
        i = step(sql, i, &mut w, &mut word);
    }
    w.finish();
}

/// Write the token of `sql` that starts at `i` (or skip a comment or
/// space); returns where the next one starts.
#[inline(always)]
fn step(sql: &[u8], i: usize, w: &mut Writer, word: &mut WordBuf) -> usize {
    if let Some(end) = comment_end(sql, i) {
        return end;
    }
    let lit = |w: &mut Writer, end: usize| {
        w.token(Kind::Lit, b"?");
        end
    };
    match sql[i] {
        b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => i + 1,
        b'\'' | b'"' => lit(w, quoted_end(sql, i)),
        b'`' => backquoted(sql, i, w, word),
        b'?' => lit(w, i + 1),
        b'0'..=b'9' => match number_end(sql, i) {
            Some(end) => lit(w, end),
            None => read_word(sql, i, word, w),
        },
        b'.' if sql.get(i + 1).is_some_and(u8::is_ascii_digit) && w.prev != Kind::Word && w.prev != Kind::Close => {
            lit(w, number_end(sql, i).unwrap_or(i + 1))
        }
        b'-' | b'+' if signed_number_follows(sql, i, w) => match number_end(sql, i + 1) {
            Some(end) => lit(w, end),
            None => {
                w.token(Kind::Op, &sql[i..i + 1]);
                i + 1
            }
        },
        c if is_word_byte(c) || c == b'@' => read_word(sql, i, word, w),
        b'(' => open_paren(sql, i, w),
        b')' => {
            w.token(Kind::Close, b")");
            i + 1
        }
        b',' => {
            if w.out.ends_with(b"limit ?") {
                w.limit_tail = true;
            } else {
                w.token(Kind::Comma, b",");
            }
            i + 1
        }
        b'.' => {
            w.token(Kind::Dot, b".");
            i + 1
        }
        b';' if trim(&sql[i + 1..]).is_empty() => sql.len(),
        _ => {
            let len = [b"<=>".as_slice(), b"->>", b"<=", b">=", b"<>", b"!=", b":=", b"||", b"&&", b"<<", b">>", b"->"]
                .iter()
                .find(|op| sql[i..].starts_with(op))
                .map_or(1, |op| op.len());
            w.token(Kind::Op, &sql[i..i + len]);
            i + len
        }
    }
}

/// A name in backquotes: lowercased, and without its quotes when it needs
/// none.
#[inline]
fn backquoted(sql: &[u8], i: usize, w: &mut Writer, word: &mut WordBuf) -> usize {
    let end = quoted_end(sql, i);
    let inner = &sql[i + 1..end.saturating_sub(1).max(i + 1)];
    word.clear();
    if !inner.is_empty() && inner.iter().all(|&c| is_word_byte(c)) {
        word.extend(inner.iter().map(u8::to_ascii_lowercase));
    } else {
        word.extend(sql[i..end].iter().map(u8::to_ascii_lowercase));
    }
    w.token(Kind::Word, word);
    end
}

/// Whether the sign at `i` starts a signed number (after an operator, an
/// opening parenthesis, a comma or a keyword such as `BY`), not a binary
/// operator.
#[inline]
fn signed_number_follows(sql: &[u8], i: usize, w: &Writer) -> bool {
    (matches!(w.prev, Kind::Start | Kind::Op | Kind::Open | Kind::Comma)
        || w.prev == Kind::Word && BEFORE_UNARY.contains(&w.last_word()))
        && sql
            .get(i + 1)
            .is_some_and(|d| d.is_ascii_digit() || *d == b'.' && sql.get(i + 2).is_some_and(u8::is_ascii_digit))
}

/// An opening parenthesis; a list of literals after IN or VALUES is
/// skipped in one tight scan (a 1,000-value IN list is most of its
/// statement's bytes) and written `(?+)`.
#[inline]
fn open_paren(sql: &[u8], i: usize, w: &mut Writer) -> usize {
    let list_head = w.prev == Kind::Word
        && w.list.is_none()
        && !w.limit_tail
        && matches!(w.last_word(), b"in" | b"values" | b"value");
    match list_head.then(|| literal_list_end(sql, i, w.last_word() != b"in")).flatten() {
        Some(end) => {
            if w.space_before(Kind::Open) {
                w.out.push(b' ');
            }
            w.out.extend_from_slice(b"(?+)");
            w.prev = Kind::Close;
            w.word_len = 0;
            end
        }
        None => {
            w.token(Kind::Open, b"(");
            i + 1
        }
    }
}

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
/// Two statements with the same skeleton have the same [`fingerprint`]:
/// the tokenizer reads every byte a skeleton keeps the same way, and reads
/// each replaced span as one literal of that extent whatever it holds
/// (strings end where [`fingerprint`]'s strings end; comments and
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

/// Where a parenthesized list of literals that starts at `i` (its `(`)
/// ends, or None when it holds anything but literals, commas, nested
/// parentheses and whitespace. With `rows`, further `, (…)` rows of
/// literals belong to it (VALUES).
fn literal_list_end(sql: &[u8], i: usize, rows: bool) -> Option<usize> {
    let n = sql.len();
    let mut j = i;
    let mut depth = 0u32;
    let mut lits = 0usize;
    loop {
        if j >= n {
            return None;
        }
        match sql[j] {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => j += 1,
            b'(' => {
                depth += 1;
                j += 1;
            }
            b')' => {
                depth = depth.checked_sub(1)?;
                j += 1;
                if depth == 0 {
                    if lits == 0 {
                        return None;
                    }
                    // Another row?
                    let mut k = j;
                    while k < n && sql[k].is_ascii_whitespace() {
                        k += 1;
                    }
                    if rows && sql.get(k) == Some(&b',') {
                        k += 1;
                        while k < n && sql[k].is_ascii_whitespace() {
                            k += 1;
                        }
                        if sql.get(k) == Some(&b'(') {
                            j = k;
                            continue;
                        }
                        // A comment or something else between rows: the
                        // token path decides.
                        return None;
                    }
                    return Some(j);
                }
            }
            b'\'' | b'"' => {
                j = quoted_end(sql, j);
                lits += 1;
            }
            b'?' => {
                j += 1;
                lits += 1;
            }
            b'0'..=b'9' | b'.' => {
                j = number_end(sql, j)?;
                lits += 1;
            }
            b'-' | b'+' if sql.get(j + 1).is_some_and(|c| c.is_ascii_digit() || *c == b'.') => {
                j = number_end(sql, j + 1)?;
                lits += 1;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let s = j;
                while j < n && is_word_byte(sql[j]) {
                    j += 1;
                }
                let word = &sql[s..j];
                if j < n
                    && sql[j] == b'\''
                    && (word[0] == b'_' || matches!(word, b"x" | b"X" | b"b" | b"B" | b"n" | b"N"))
                {
                    j = quoted_end(sql, j);
                } else if !(word.eq_ignore_ascii_case(b"null")
                    || word.eq_ignore_ascii_case(b"true")
                    || word.eq_ignore_ascii_case(b"false"))
                {
                    return None;
                }
                lits += 1;
            }
            _ => return None,
        }
    }
}

/// A word (keyword, identifier, `@variable`) at `i`, or a literal it
/// introduces (`_utf8mb4'x'`, `X'1F'`, `N'x'`): written, and the offset
/// after it returned.
fn read_word(sql: &[u8], i: usize, word: &mut WordBuf, w: &mut Writer) -> usize {
    let n = sql.len();
    let mut j = i;
    while j < n && sql[j] == b'@' {
        j += 1;
    }
    while j < n && is_word_byte(sql[j]) {
        j += 1;
    }
    if j == i {
        // A lone byte no rule knows.
        w.token(Kind::Op, &sql[i..i + 1]);
        return i + 1;
    }
    let raw = &sql[i..j];
    if j < n && sql[j] == b'\'' && (raw[0] == b'_' || matches!(raw, b"x" | b"X" | b"b" | b"B" | b"n" | b"N")) {
        w.token(Kind::Lit, b"?");
        return quoted_end(sql, j);
    }
    word.clear();
    word.extend_from_slice(raw);
    word.make_ascii_lowercase();
    match word.as_slice() {
        b"asc" => {}
        b"true" | b"false" => w.token(Kind::Lit, b"?"),
        b"null" => {
            let after_is = w.prev == Kind::Word
                && (w.last_word() == b"is" || w.last_word() == b"not" && &w.word2[..w.word2_len] == b"is");
            if after_is {
                w.token(Kind::Word, b"null");
            } else {
                w.token(Kind::Lit, b"?");
            }
        }
        b"offset" if w.out.ends_with(b"limit ?") => w.limit_tail = true,
        _ => w.token(Kind::Word, word),
    }
    j
}

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

fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(s.len());
    let end = s.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &s[start..end]
}

/// Where a comment that starts at `i` ends (`/* */`, `#` and `-- ` to the
/// line's end), or None when no comment starts there. The tokenizer and
/// skeletons skip the same comments.
#[inline]
fn comment_end(sql: &[u8], i: usize) -> Option<usize> {
    match sql[i] {
        b'/' if sql.get(i + 1) == Some(&b'*') => Some(find(sql, i + 2, b"*/").map_or(sql.len(), |e| e + 2)),
        b'#' => Some(memchr_nl(sql, i)),
        b'-' if sql.get(i + 1) == Some(&b'-') && sql.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()) => {
            Some(memchr_nl(sql, i))
        }
        _ => None,
    }
}

fn memchr_nl(s: &[u8], from: usize) -> usize {
    s[from..].iter().position(|&c| c == b'\n').map_or(s.len(), |p| from + p)
}

fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(s: &str) -> String {
        let mut out = vec![];
        fingerprint(s.as_bytes(), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn literals_case_and_spacing_fold() {
        assert_eq!(fp("SELECT c FROM sbtest1 WHERE id=5001"), "select c from sbtest1 where id = ?");
        assert_eq!(fp("select  c\nfrom sbtest1 where id = 17;"), "select c from sbtest1 where id = ?");
        assert_eq!(
            fp("SELECT * FROM t WHERE name='O''Brien' AND x=\"a\\\"b\" AND y=-1.5e3"),
            fp("select * from t where name = 'x' and x = 'y' and y = 2")
        );
        assert_eq!(
            fp("SELECT * FROM t WHERE a = 0x1F OR b = X'1f' OR c = _utf8mb4'x' OR d = TRUE"),
            "select * from t where a = ? or b = ? or c = ? or d = ?"
        );
        assert_eq!(
            fp("select count(*), max(`k`) from `Db`.`T1` where x is not null and y is null and z = null"),
            "select count(*), max(k) from db.t1 where x is not null and y is null and z = ?"
        );
    }

    #[test]
    fn lists_collapse() {
        assert_eq!(fp("select * from t where a in (1,2,3) and b > 5"), "select * from t where a in (?+) and b > ?");
        assert_eq!(fp("select * from t where a IN ('x')"), fp("select * from t where a in (1, 2, 3, 4)"));
        assert_eq!(fp("select * from t where (a,b) in ((1,2),(3,4))"), "select * from t where (a, b) in (?+)");
        assert_eq!(
            fp("select * from t where a in (select b from u where c in (1,2))"),
            "select * from t where a in (select b from u where c in (?+))"
        );
        assert_eq!(fp("INSERT INTO t (a,b) VALUES (1,'x'),(2,'y'),(3, NULL)"), "insert into t(a, b) values (?+)");
        assert_eq!(
            fp("insert into t values (1) on duplicate key update a=values(a)+1"),
            "insert into t values (?+) on duplicate key update a = values (a) + ?"
        );
        // Rows of one shape, whatever their number, are one class; rows of
        // different shapes are kept.
        assert_eq!(fp("insert into t values (1, now()), (2, now()),(3,NOW())"), "insert into t values (?, now())");
        assert_eq!(fp("insert into t values (1, now())"), "insert into t values (?, now())");
        assert_eq!(fp("insert into t values (1, now()), (2, 3)"), "insert into t values (?, now()), (?, ?)");
        assert_eq!(
            fp("insert into t values (1, now()), (2, now()) on duplicate key update a = values(a)"),
            "insert into t values (?, now()) on duplicate key update a = values (a)"
        );
    }

    #[test]
    fn the_fast_list_scan_agrees_with_the_token_path() {
        // Each of these is collapsed by the scan; spelt with a comment in
        // the list, the scan refuses it and the token path collapses it
        // the same way.
        for (list, with_comment) in [
            ("in (1, -2, 'a''b', x'1f', NULL, TRUE, .5, ?)", "in (1, -2, /*c*/ 'a''b', x'1f', NULL, TRUE, .5, ?)"),
            ("values (1,'a'), (2, 'b'),(3,NULL)", "values (1,'a'), /*c*/ (2, 'b'),(3,NULL)"),
            ("in ((1,2),(3,4))", "in ((1,2),/*c*/(3,4))"),
        ] {
            let a = fp(&format!("select * from t where a {list} and b = 1"));
            let b = fp(&format!("select * from t where a {with_comment} and b = 1"));
            assert_eq!(a, b);
            assert!(a.contains("(?+)"), "{a}");
        }
        assert_eq!(fp("select a in (b, 1) from t"), "select a in (b, ?) from t");
        assert_eq!(fp("select * from t where a in ()"), "select * from t where a in (?+)");
        assert_eq!(fp("select * from t where a in (1, 2"), "select * from t where a in (?, ?");
        assert_eq!(fp("insert into t values (1), (now())"), "insert into t values (?), (now())");
        assert_eq!(fp("insert into t values (now()), (now()), (1)"), "insert into t values (now()), (?)");
    }

    #[test]
    fn limits_comments_and_order() {
        assert_eq!(
            fp("select a from t order by a ASC, b desc limit 10, 20"),
            "select a from t order by a, b desc limit ?"
        );
        assert_eq!(fp("select a from t limit 10 offset 5"), "select a from t limit ?");
        assert_eq!(fp("select /* app:42 */ a -- tail\nfrom t # x\n where b = 1"), "select a from t where b = ?");
        assert_eq!(fp("SELECT /*!40001 SQL_NO_CACHE */ * FROM t"), "select * from t");
        assert_eq!(fp("select a-1, b - 2, f(-3) from t where c = -4"), "select a - ?, b - ?, f(?) from t where c = ?");
        assert_eq!(fp("select 1abc, t1.c2 from t1"), "select 1abc, t1.c2 from t1");
    }

    #[test]
    fn strings_end_where_mysql_ends_them() {
        assert_eq!(fp(r#"select 'a\'b', 'c''d', "e\\\"f", `g``h` from t"#), "select ?, ?, ?, `g``h` from t");
        assert_eq!(fp(r"select 'a\\' , 1"), "select ?, ?");
        assert_eq!(fp("select 'trailing backslash\\"), "select ?");
    }

    #[test]
    fn special_forms() {
        assert_eq!(fp("administrator command: Quit;"), "administrator command: Quit");
        assert_eq!(fp("use `sbtest`"), "use ?");
        assert_eq!(fp("set @x := 5, @@session.sql_mode = 'a'"), "set @x := ?, @@session.sql_mode = ?");
        assert_eq!(fp("call p(1, 'a')"), "call p(?, ?)");
        assert_eq!(fp(""), "");
        // Unterminated strings and comments end the text; binary bytes pass.
        assert_eq!(fp("select 'abc"), "select ?");
        assert_eq!(fp("select a /* x"), "select a");
        assert_eq!(
            String::from_utf8_lossy(&{
                let mut o = vec![];
                fingerprint(b"select \xff\xfe from t where a = '\x00\x01'", &mut o);
                o
            }),
            "select \u{fffd}\u{fffd} from t where a = ?"
        );
    }

    #[test]
    fn the_single_table_of_a_select_and_where_its_hint_goes() {
        let hint = |sql: &str| {
            single_table(sql.as_bytes()).map(|t| {
                format!("{} | {}FORCE INDEX (k){}", &sql[t.name.clone()], &sql[..t.hint_at], &sql[t.hint_at..])
            })
        };
        assert_eq!(
            hint("SELECT id FROM dive WHERE a IN (1,2) AND b > 3").unwrap(),
            "dive | SELECT id FROM diveFORCE INDEX (k) WHERE a IN (1,2) AND b > 3"
        );
        assert_eq!(
            hint("select * from `db`.`t` as x order by 1").unwrap(),
            "`db`.`t` | select * from `db`.`t` as xFORCE INDEX (k) order by 1"
        );
        assert_eq!(
            hint("select * from d.t z where (select 1 from u, v) > 0").unwrap(),
            "d.t | select * from d.t zFORCE INDEX (k) where (select 1 from u, v) > 0"
        );
        assert_eq!(hint("select 'from x' , a from t").unwrap(), "t | select 'from x' , a from tFORCE INDEX (k)");
        assert_eq!(hint("select * from t join u on t.a = u.a"), None);
        assert_eq!(hint("select * from t, u"), None);
        assert_eq!(hint("select * from t force index (a)"), None);
        assert_eq!(hint("select * from (select 1) x"), None);
        assert_eq!(hint("update t set a = 1"), None);
        assert_eq!(hint("select 1"), None);
    }

    /// Statements that share a skeleton share a fingerprint: thousands of
    /// statements made from templates with literals of every kind, spacing,
    /// comments and names that hold digits, compared pairwise by skeleton.
    #[test]
    fn statements_with_one_skeleton_have_one_fingerprint() {
        let templates = [
            "SELECT c FROM sbtest{N} WHERE id={N}",
            "select * from t where a in ({L}) and b > {N} order by c limit {N}, {N}",
            "INSERT INTO t{N} (id, k, c) VALUES ({N}, {N}, {S}), ({N}, {N}, {S})",
            "update t set c={S} where id = -{N} /* {N} it's */ and d=@v{N}",
            "select `{N}`, x{N}, {N}.{N}, {N}e{N}, 0x{N}, t.{N} from `t {N}` # {S}\n where a={S} -- {N}\n",
            "select {N}-{N}, {N}--{N}, {S}{S}, _utf8{S}, X{S}, N{S} from dual where a like {S} escape {S}",
            "administrator command: Quit {N}",
            "use db{N}",
            "select {N} ; ",
            "SELECT /*+ MAX_EXECUTION_TIME({N}) */ a FROM t WHERE b BETWEEN {N} AND {N} LIMIT {N} OFFSET {N}",
            "select a from t where id IN({L})and b=-{N}or c={S}{N} or d={N}{S} or e=({N})*{N}%{N}/{N}",
            "/*!{N} select */ {N}abc, x{S}, b{S}, {N}x{N}, -{N}.{N}, .{N}, - {N}, a<{N}>{N}<={N}<>{N}",
            "insert into t values ({L}), ({L}), (now(), {N}), (now(), {N}) on duplicate key update c={N}",
            "select {N}\t{N}\n{N}\r{N}#{S}",
            "select @{N}, @@{N}, :{N}, t.{N}, `t {N}`, `{N}`, $${N} from t",
        ];
        let nums = ["1", "22", "0", "007", "12345678901234567890", "1", "5"];
        let strs = ["'a'", "'it''s'", "'x\\'y'", "\"q\"", "''", "'1'", "'--'", "'/*'", "'#'"];
        let mut seed = 17u64;
        let mut rnd = |k: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize % k
        };
        // Each statement against itself with one literal changed: when
        // the two share a skeleton, they must share a fingerprint.
        let build = |t: &str, picks: &[usize]| {
            let (mut sql, mut rest, mut k) = (String::new(), t, 0);
            while let Some(p) = rest.find('{') {
                sql.push_str(&rest[..p]);
                let v = picks[k];
                k += 1;
                match &rest[p..p + 3] {
                    "{N}" => sql.push_str(nums[v % nums.len()]),
                    "{S}" => sql.push_str(strs[v % strs.len()]),
                    _ => {
                        let items: Vec<&str> = (0..1 + v % 4).map(|i| nums[(v / 4 + i) % nums.len()]).collect();
                        sql.push_str(&items.join(","));
                    }
                }
                rest = &rest[p + 3..];
            }
            sql.push_str(rest);
            sql
        };
        let (mut fa, mut fb, mut sa, mut sb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut shared = 0;
        for _ in 0..60000 {
            let t = templates[rnd(templates.len())];
            let slots = t.matches('{').count();
            let mut picks: Vec<usize> = (0..slots).map(|_| rnd(1000)).collect();
            let a = build(t, &picks);
            if slots > 0 {
                let k = rnd(slots);
                picks[k] = rnd(1000);
            }
            let b = build(t, &picks);
            if !(skeleton(a.as_bytes(), &mut sa) && skeleton(b.as_bytes(), &mut sb)) || sa != sb {
                continue;
            }
            shared += 1;
            fingerprint(a.as_bytes(), &mut fa);
            fingerprint(b.as_bytes(), &mut fb);
            assert_eq!(String::from_utf8_lossy(&fa), String::from_utf8_lossy(&fb), "{a:?} and {b:?} share a skeleton");
        }
        assert!(shared > 30000, "{shared}");
        // Where literals touch names, digits stay.
        let sk = |s: &str| {
            let mut o = Vec::new();
            skeleton(s.as_bytes(), &mut o).then_some(o)
        };
        for (a, b) in [
            ("select @v1", "select @v2"),
            ("select `1`", "select `2`"),
            ("select * from t1", "select * from t2"),
            ("select 1e5", "select 1e6"),
            ("select 1.5", "select 2.5"),
        ] {
            assert_ne!(sk(a), sk(b), "{a} / {b}");
        }
        assert_eq!(sk("select 1 from t where a='x'"), sk("select 22 from t where a='yy'"));
        assert_eq!(sk("administrator command: Quit"), None);
        assert_eq!(sk("use db1"), None);
        assert_eq!(sk("select '\x01'"), None);
    }

    #[test]
    fn class_ids_are_stable() {
        assert_eq!(format!("{:016x}", class_id(b"select ?")), "02fb7a5a1a5a9a58");
        assert_ne!(class_id(b"select ?"), class_id(b"select ?, ?"));
    }
}
