//! The fingerprint: a statement tokenized and written back with what
//! varies between its executions folded (see the crate's documentation).

use crate::lex::{comment_end, is_word_byte, number_end, quoted_end, trim};

/// A word being read, lowercased: on the stack for all but very long ones.
type WordBuf = smallvec::SmallVec<[u8; 64]>;

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
    /// Where the `,` just written after a literal stands: a literal next
    /// folds the run (`?, ?` is `?+`).
    lit_comma: Option<usize>,
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
        // A run of literals separated by commas, anywhere (a select list,
        // a function's arguments, ORDER BY 1, 2), is one `?+`, as
        // performance_schema's digest folds it (`?, ...`): the same class
        // from both, whatever the number of literals.
        let after_lit = self.prev == Kind::Lit;
        if let (Kind::Lit, Some(comma)) = (k, self.lit_comma.take()) {
            // (Any other token after the comma ends the run: taken above.)
            self.out.truncate(comma);
            if !self.out.ends_with(b"+") {
                self.out.push(b'+');
            }
            self.prev = Kind::Lit;
            return;
        }
        if k == Kind::Comma && after_lit {
            self.lit_comma = Some(self.out.len());
        }
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
        lit_comma: None,
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
        // performance_schema's digest writes a folded list's rest as
        // `...`: one more literal of the run.
        b'.' if sql[i..].starts_with(b"...") => lit(w, i + 3),
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
        // Synonyms the server's own digest prints by its last alias
        // (performance_schema's DIGEST_TEXT says DISTINCTROW for DISTINCT):
        // one spelling, so every input of one statement is one class.
        b"distinctrow" => w.token(Kind::Word, b"distinct"),
        _ => w.token(Kind::Word, word),
    }
    j
}
