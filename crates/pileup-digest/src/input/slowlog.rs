//! Slow-log entries from a block of text: MariaDB 10.x/11.x under every
//! `log_slow_verbosity`, MySQL 5.7/8.0 (with or without `log_slow_extra`)
//! and Percona Server.
//!
//! An entry is its comment lines (`# Time:`, `# User@Host:`, `# Key: value
//! …`, `# explain:`, `# Warnings`), then `use db;` and `SET timestamp=N;`,
//! then the statement, up to the next entry or server header. Keys are read
//! by name, never by position (servers and versions order and space them
//! differently, and leave values empty: `Schema:   QC_hit: No`). The
//! header a server writes when it opens the log (start, `FLUSH LOGS`) —
//! `mariadbd, Version: …`, `/usr/sbin/mysqld, Version: …`, `Tcp port:`,
//! `Time  Id Command  Argument` — ends the entry before it and is skipped.
//!
//! A malformed value is named by line and the statement still counts; an
//! entry with no statement is named and skipped.

use crate::aggregate::{Aggregate, Problem};
use crate::attr::{field, Field, A, N_FLAGS};
use crate::class::Event;

/// Where a block sits: its input, its first line's number (when known:
/// blocks are parsed in parallel and lines are counted per block, so
/// problems carry the line within the block and are renumbered later),
/// and the database `use` selected before it (MySQL logs name it only on
/// change).
pub struct BlockCtx<'a> {
    pub input: usize,
    pub seq: u64,
    pub db: &'a [u8],
    /// The input ends with this block: an entry with no statement at its
    /// end is one still being written (or a log cut there), not damage.
    pub at_end: bool,
}

/// What a parsed block reports besides the classes it fed.
#[derive(Default)]
pub struct BlockOut {
    /// Lines in the block.
    pub lines: u64,
}

#[derive(PartialEq, Clone, Copy)]
enum State {
    /// Before any entry, or after a server header.
    Idle,
    /// In an entry's comment lines.
    Head,
    /// In its statement.
    Text,
}

struct Entry<'a> {
    values: [f64; crate::attr::N_ATTRS],
    present: u64,
    flags_seen: u32,
    flags_yes: u32,
    user: &'a [u8],
    host: &'a [u8],
    schema: Option<&'a [u8]>,
    ts: Option<i64>,
    has_user: bool,
    has_attrs: bool,
    /// Line of the entry's first line, within the block.
    line: u64,
    text: Option<(usize, usize)>,
    explain: Vec<&'a [u8]>,
    warnings: bool,
}

impl<'a> Entry<'a> {
    fn new(line: u64) -> Entry<'a> {
        Entry {
            values: [0.0; crate::attr::N_ATTRS],
            present: 0,
            flags_seen: 0,
            flags_yes: 0,
            user: b"",
            host: b"",
            schema: None,
            ts: None,
            has_user: false,
            has_attrs: false,
            line,
            text: None,
            explain: vec![],
            warnings: false,
        }
    }

    fn set(&mut self, a: A, v: f64) {
        self.values[a as usize] = v;
        self.present |= 1 << a as usize;
    }

    fn get(&self, a: A) -> Option<f64> {
        (self.present & (1 << a as usize) != 0).then(|| self.values[a as usize])
    }

    /// Take one `Key: value`: false (and the value left out) when the key's
    /// value must be a number and is not.
    #[inline]
    fn take(&mut self, f: Field, val: &'a [u8]) -> bool {
        self.has_attrs = true;
        match f {
            Field::Attr(a, scale) => match parse_num(val) {
                Some(v) => self.set(a, v * scale),
                None => return false,
            },
            Field::Flag(i) => {
                self.flags_seen |= 1 << i;
                if val == b"Yes" {
                    self.flags_yes |= 1 << i;
                }
            }
            Field::NonZeroFlag(i) | Field::CountAndFlag(_, i) => {
                let v = parse_num(val).unwrap_or(0.0);
                debug_assert!(i < N_FLAGS);
                self.flags_seen |= 1 << i;
                if v != 0.0 {
                    self.flags_yes |= 1 << i;
                }
                if let Field::CountAndFlag(a, _) = f {
                    self.set(a, v);
                }
            }
            Field::Schema => self.schema = Some(val),
            Field::ThreadId | Field::Ignored => {}
        }
        true
    }

    /// Empty again for the entry at `line`, its buffers kept. Values are
    /// left as they are: `present` says which hold this entry's.
    fn reset(&mut self, line: u64) {
        self.present = 0;
        self.flags_seen = 0;
        self.flags_yes = 0;
        self.user = b"";
        self.host = b"";
        self.schema = None;
        self.ts = None;
        self.has_user = false;
        self.has_attrs = false;
        self.line = line;
        self.text = None;
        self.explain.clear();
        self.warnings = false;
    }
}

/// Parse every entry of `block` into `agg`. The block starts at an entry
/// (or at the start of its input) and ends after one.
pub fn parse_block(block: &[u8], ctx: &BlockCtx, agg: &mut Aggregate) -> BlockOut {
    parse_block_with(block, ctx, agg, true)
}

/// `parse_block`, with comment lines' layouts learned or (`learn` false)
/// every line read by name.
fn parse_block_with(block: &[u8], ctx: &BlockCtx, agg: &mut Aggregate, learn: bool) -> BlockOut {
    let mut p = Parser {
        block,
        ctx,
        db: ctx.db,
        state: State::Idle,
        entry: Entry::new(0),
        skip_header: 0,
        layouts: vec![],
        next_layout: 0,
        learn,
    };
    let mut line_no = 0u64;
    let mut pos = 0;
    let mut line_to = |end: usize, p: &mut Parser, agg: &mut Aggregate| {
        line_no += 1;
        p.line(pos, end, line_no, agg);
        pos = end + 1;
    };
    // Line ends found 64 bytes at a time as a bit mask rather than by a
    // search per line: a log's lines are short, and a search's setup costs
    // more than its scan. The last bytes are searched.
    let mut base = 0;
    while let Some(chunk) = block.get(base..base + 64) {
        let mut m = newline_mask(chunk.try_into().unwrap());
        while m != 0 {
            line_to(base + m.trailing_zeros() as usize, &mut p, agg);
            m &= m - 1;
        }
        base += 64;
    }
    for end in memchr::memchr_iter(b'\n', &block[base..]) {
        line_to(base + end, &mut p, agg);
    }
    if pos < block.len() {
        line_no += 1;
        p.line(pos, block.len(), line_no, agg);
    }
    p.finish(agg, ctx.at_end);
    BlockOut { lines: line_no }
}

/// Bit k: byte k is a newline. Eight bytes at a time: the high bit of
/// each byte of `t` is set exactly where a byte is `\n` (no borrow crosses
/// bytes), and one multiplication gathers the eight high bits into a byte.
fn newline_mask(chunk: &[u8; 64]) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut m = 0u64;
    for (k, w) in chunk.chunks_exact(8).enumerate() {
        let x = u64::from_le_bytes(w.try_into().unwrap()) ^ 0x0a0a_0a0a_0a0a_0a0a;
        let t = !(((x & LOW7) + LOW7) | x | LOW7);
        m |= ((t >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * k);
    }
    m
}

struct Parser<'a, 'c> {
    block: &'a [u8],
    ctx: &'c BlockCtx<'a>,
    db: &'a [u8],
    state: State,
    entry: Entry<'a>,
    /// Lines of a server header still to skip.
    skip_header: u8,
    /// Layouts of the comment lines read so far.
    layouts: Vec<Layout>,
    /// The layout to try first.
    next_layout: usize,
    learn: bool,
}

fn starts(line: &[u8], p: &[u8]) -> bool {
    line.len() >= p.len() && &line[..p.len()] == p
}

/// `mariadbd, Version: 10.11.19-MariaDB-log (Debian 12). started with:`
fn is_server_header(line: &[u8]) -> bool {
    line.ends_with(b"started with:") && memchr::memmem::find(line, b", Version: ").is_some()
}

impl<'a> Parser<'a, '_> {
    fn problem(&self, agg: &mut Aggregate, line: u64, what: String) {
        agg.problem(Problem { input: self.ctx.input, block: self.ctx.seq, file: String::new(), line, what });
    }

    fn line(&mut self, start: usize, end: usize, no: u64, agg: &mut Aggregate) {
        let block = self.block;
        let mut line = &block[start..end];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        if self.skip_header > 0 {
            self.skip_header -= 1;
            if starts(line, b"Tcp port:")
                || starts(line, b"TCP Port:")
                || starts(line, b"Time ")
                || starts(line, b"Time\t")
            {
                return;
            }
            self.skip_header = 0;
        }
        if line.first() == Some(&b'#') {
            if starts(line, b"# Time: ") {
                self.begin(no, agg);
                return;
            }
            if starts(line, b"# User@Host: ") {
                if self.state != State::Head || self.entry.has_user || self.entry.has_attrs {
                    self.begin(no, agg);
                }
                self.user_host(&line[13..]);
                return;
            }
            if self.state == State::Text {
                // A session's entry without its `# User@Host:` line.
                if starts(line, b"# Query_time: ") || starts(line, b"# Thread_id: ") {
                    self.begin(no, agg);
                } else {
                    return self.text(start, end);
                }
            }
            if self.state == State::Idle {
                if starts(line, b"# administrator command: ") || !looks_like_attrs(line) {
                    self.problem(agg, no, "a comment line outside any entry".into());
                    return;
                }
                self.begin(no, agg);
            }
            // In an entry's comment lines: told apart by their third byte
            // first, as most are `Key: value` lines.
            match line.get(2) {
                // `#` alone (around EXPLAIN lines): nothing to read.
                None => {}
                Some(b'e') if starts(line, b"# explain: ") => self.entry.explain.push(&line[11..]),
                Some(b'a') if starts(line, b"# administrator command: ") => {
                    self.state = State::Text;
                    self.text(start + 2, end);
                }
                Some(b'W') if line == b"# Warnings" => self.entry.warnings = true,
                _ if self.entry.warnings && is_warning_line(line) => {
                    let w = self.entry.get(A::Warnings).unwrap_or(0.0);
                    self.entry.set(A::Warnings, w + 1.0);
                }
                _ => self.attrs(line, no, agg),
            }
            return;
        }
        // A server header (start, FLUSH LOGS) ends the entry before it.
        if is_server_header(line) {
            self.finish(agg, false);
            self.skip_header = 2;
            return;
        }
        match self.state {
            State::Text => self.text(start, end),
            State::Head => {
                if starts(line, b"use ") && line.ends_with(b";") && self.entry.ts.is_none() {
                    let name = &line[4..line.len() - 1];
                    self.db = name.strip_prefix(b"`").and_then(|n| n.strip_suffix(b"`")).unwrap_or(name);
                } else if let Some(ts) = self.entry.ts.is_none().then(|| set_timestamp(line)).flatten() {
                    self.entry.ts = Some(ts);
                } else {
                    self.state = State::Text;
                    self.text(start, end);
                }
            }
            State::Idle => {
                if !line.iter().all(u8::is_ascii_whitespace) {
                    self.problem(agg, no, "text outside any entry (a log cut mid-entry?)".into());
                }
            }
        }
    }

    fn text(&mut self, start: usize, end: usize) {
        match &mut self.entry.text {
            Some((_, e)) => *e = end,
            t => *t = Some((start, end)),
        }
    }

    /// The input's last entry, at `line`, is not counted: `how` says why.
    fn set_aside(&self, agg: &mut Aggregate, line: u64, how: &str) {
        let what = format!("the last entry {how} (the log was still being written, or it is cut there): not counted");
        let (input, block) = (self.ctx.input, self.ctx.seq);
        agg.unfinished.push(Problem { input, block, file: String::new(), line, what });
    }

    /// A new entry starts at line `no`: the one before ends.
    fn begin(&mut self, no: u64, agg: &mut Aggregate) {
        self.finish(agg, false);
        self.entry.reset(no);
        self.state = State::Head;
    }

    /// The current entry ends: counted, or, when it has no statement,
    /// named as a problem, or set aside as unfinished when it is the last
    /// of its input (`input_ends`: one still being written, or a log cut
    /// there); the input's last entry is set aside too when the input ends
    /// inside a line.
    fn finish(&mut self, agg: &mut Aggregate, input_ends: bool) {
        if self.state == State::Idle {
            return;
        }
        self.state = State::Idle;
        let line = self.entry.line;
        let Some((s, t)) = self.entry.text else {
            if !(self.entry.has_user || self.entry.has_attrs) {
                return;
            }
            if input_ends {
                self.set_aside(agg, line, "has no statement");
            } else {
                self.problem(agg, line, "an entry with no statement (cut short?)".into());
            }
            return;
        };
        // The server ends every entry's statement with a line end. Looked
        // at for the input's last entry only, not for every entry.
        let inside_a_line =
            |b: &[u8]| b[memchr::memrchr(b'\n', b).map_or(0, |p| p + 1)..].iter().any(|c| !c.is_ascii_whitespace());
        if input_ends && inside_a_line(self.block) {
            self.set_aside(agg, line, "ends inside a line");
            return;
        }
        let e = &mut self.entry;
        let mut q = &self.block[s..t];
        while let Some((last, rest)) = q.split_last() {
            if last.is_ascii_whitespace() {
                q = rest;
            } else {
                break;
            }
        }
        let q = q.strip_suffix(b";").unwrap_or(q);
        // Engine_time times reads (writes' engine work is not in it), so the
        // rest is the optimizer's only for queries.
        if let (Some(qt), Some(et), true) = (e.get(A::QueryTime), e.get(A::EngineTime), is_query(q)) {
            e.set(A::OptimizerTime, (qt - et).max(0.0));
        }
        let ev = Event {
            values: &e.values,
            present: e.present,
            flags_seen: e.flags_seen,
            flags_yes: e.flags_yes,
            user: e.user,
            host: e.host,
            db: e.schema.unwrap_or(self.db),
            ts: e.ts,
            query: q,
            explain: &e.explain,
            at: (self.ctx.input, e.line | self.ctx.seq << 40),
        };
        agg.add(&ev);
    }

    /// `root[root] @ localhost [127.0.0.1]  Id:    10`
    fn user_host(&mut self, s: &'a [u8]) {
        let e = &mut self.entry;
        e.has_user = true;
        (e.user, e.host) = user_host(s);
    }

    /// `# Key: value  Key: value …`: read by a layout learned earlier when
    /// one fits, else by name (and its layout learned).
    fn attrs(&mut self, line: &'a [u8], no: u64, agg: &mut Aggregate) {
        // Lines come in the order their server writes them: the layout
        // after the last one that fitted is tried first.
        let n = self.layouts.len();
        let first = if self.next_layout < n { self.next_layout } else { 0 };
        // Most lines of a log: one comparison per key and one scan per
        // value.
        if let Some(k) = (first..n).chain(0..first).find(|&k| self.layouts[k].read(line, &mut self.entry)) {
            self.next_layout = k + 1;
            return;
        }
        let learn = self.learn && self.layouts.len() < MAX_LAYOUTS && line.len() <= u32::MAX as usize;
        let mut steps = Vec::new();
        let mut learnable = learn;
        let n = line.len();
        let mut i = 1;
        // Where the last value (or empty value's key) ended.
        let mut prev = 0;
        loop {
            while i < n && blank(line[i]) {
                i += 1;
            }
            if i >= n {
                break;
            }
            let s = i;
            while i < n && !blank(line[i]) {
                i += 1;
            }
            let Some(key) = line[s..i].strip_suffix(b":") else {
                learnable = false;
                continue;
            };
            // The value is the next word, unless that is a key itself (an
            // empty value: `Schema:   QC_hit: No`).
            let mut j = i;
            while j < n && blank(line[j]) {
                j += 1;
            }
            let vs = j;
            while j < n && !blank(line[j]) {
                j += 1;
            }
            let v = &line[vs..j];
            let empty = v.is_empty() || v.ends_with(b":") && field(&v[..v.len() - 1]).is_some();
            let f = field(key);
            if learnable {
                // The text before the value: up to the value, or for an
                // empty one, up to one blank after the key.
                let upto = if empty { (i + 1).min(n) } else { vs };
                steps.push(Step { text: line[prev..upto].into(), field: f });
                prev = if empty { upto } else { j };
                learnable = steps.len() < MAX_STEPS;
            }
            let val: &'a [u8] = if empty {
                b""
            } else {
                i = j;
                v
            };
            if let Some(f) = f {
                self.pair(key, f, val, no, agg);
            }
        }
        if learnable && !steps.is_empty() {
            let l = Layout { steps };
            // Kept only when it reads its own line back.
            if l.read(line, &mut Entry::new(0)) {
                self.layouts.push(l);
            }
        }
    }

    /// One `Key: value` of an entry.
    fn pair(&mut self, key: &[u8], f: Field, val: &'a [u8], no: u64, agg: &mut Aggregate) {
        if !self.entry.take(f, val) {
            self.problem(
                agg,
                no,
                format!(
                    "{} \"{}\" is not a number; the statement counts without it",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(&val[..val.len().min(40)]).escape_default()
                ),
            );
        }
    }
}

/// `starts`, for the short texts of a layout: compared eight bytes at a
/// time inline, where a call to `memcmp` costs more than the comparison.
fn starts_short(line: &[u8], p: &[u8]) -> bool {
    if line.len() < p.len() {
        return false;
    }
    if p.len() < 8 {
        return line[..p.len()] == *p;
    }
    let word = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().unwrap());
    let mut i = 0;
    while i + 8 < p.len() {
        if word(line, i) != word(p, i) {
            return false;
        }
        i += 8;
    }
    // The last eight bytes, overlapping those compared.
    let last = p.len() - 8;
    word(line, last) == word(p, last)
}

/// Where the word at `p` ends: the first blank at or after `p`, or the
/// end. Eight bytes at a time (a zero byte of `w ^ blanks` is a blank; the
/// lowest flagged byte is always a true one), so a value is usually one
/// step.
fn word_end(line: &[u8], mut p: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    while p + 8 <= line.len() {
        let w = u64::from_le_bytes(line[p..p + 8].try_into().unwrap());
        let z = zero(w ^ (ONES * u64::from(b' '))) | zero(w ^ (ONES * u64::from(b'\t')));
        if z != 0 {
            return p + (z.trailing_zeros() / 8) as usize;
        }
        p += 8;
    }
    while p < line.len() && !blank(line[p]) {
        p += 1;
    }
    p
}

fn blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

/// Layouts a block learns at most.
const MAX_LAYOUTS: usize = 16;
/// Keys a layout holds at most (MySQL 8's `log_slow_extra` line has 26).
const MAX_STEPS: usize = 40;

/// The layout of one kind of `# Key: value  Key: value …` line, learned
/// from a line read by name: the text before each value (`# Query_time: `,
/// `  Lock_time: `) and the key's meaning.
///
/// Servers write these lines from fixed formats, so a log's comment lines
/// repeat a few layouts. A line that fits one is read with one comparison
/// per key and one scan per value, no key looked up; a line that differs
/// anywhere (spacing, another key, a value that looks like a key) is read
/// by name. Fitting a layout yields exactly the pairs reading by name
/// would: every text is blanks, a known or unknown key, `:` and blanks;
/// every value is one word not ending in `:`; nothing follows the last but
/// blanks. A test reads mutated lines both ways and compares.
struct Layout {
    steps: Vec<Step>,
}

struct Step {
    text: Box<[u8]>,
    /// None: a key pileup does not know, skipped as reading by name skips
    /// it.
    field: Option<Field>,
}

impl Layout {
    /// Read `line` into `e` if it has this layout: true when read. A line
    /// that turns out to differ part way, or holds a value that is not a
    /// number where one is due, is then read by name, which names the bad
    /// value. What this read took of it before stopping needs no undoing:
    /// the keys before the point of difference are the same keys with the
    /// same values by name, and reading by name sets each again (or, for an
    /// empty value it reads otherwise, sets more), so the entry ends as
    /// reading by name alone leaves it; the layout test checks exactly that.
    fn read<'a>(&self, line: &'a [u8], e: &mut Entry<'a>) -> bool {
        let mut p = 0;
        for step in &self.steps {
            if !starts_short(&line[p..], &step.text) {
                return false;
            }
            p += step.text.len();
            let s = p;
            p = word_end(line, p);
            let v = &line[s..p];
            if v.last() == Some(&b':') {
                return false;
            }
            if let Some(f) = step.field {
                if !e.take(f, v) {
                    return false;
                }
            }
        }
        line[p..].iter().all(|&c| blank(c))
    }
}

/// Does the statement read only (SELECT, WITH …, a parenthesized SELECT)?
pub fn is_query(q: &[u8]) -> bool {
    let q = trim(q);
    let q = q.strip_prefix(b"(").map_or(q, trim);
    let word =
        |w: &[u8]| q.len() > w.len() && q[..w.len()].eq_ignore_ascii_case(w) && !q[w.len()].is_ascii_alphanumeric();
    word(b"select") || word(b"with")
}

/// `root[root] @ localhost [127.0.0.1]  Id:    10` (the `# User@Host:`
/// line, and `mysql.slow_log`'s `user_host`): the user, and the host name
/// or, when there is none, its address.
pub fn user_host(s: &[u8]) -> (&[u8], &[u8]) {
    let user_end = memchr::memchr(b'[', s).unwrap_or(s.len());
    let user = trim(&s[..user_end]);
    // ` @ `, found by its `@` (a substring search would build its searcher
    // on every entry).
    let Some(at) =
        memchr::memchr_iter(b'@', s).find(|&p| p > 0 && s[p - 1] == b' ' && s.get(p + 1) == Some(&b' ')).map(|p| p - 1)
    else {
        return (user, b"");
    };
    let rest = &s[at + 3..];
    let (name, ip) = match memchr::memchr(b'[', rest) {
        Some(b) => {
            let close = memchr::memchr(b']', &rest[b..]).map_or(rest.len(), |c| b + c);
            (trim(&rest[..b]), trim(&rest[b + 1..close]))
        }
        None => (trim(rest), &b""[..]),
    };
    (user, if name.is_empty() { ip } else { name })
}

/// Could this comment line be an entry's (a known `Key:` in it)?
fn looks_like_attrs(line: &[u8]) -> bool {
    line[1..].split(|c| *c == b' ' || *c == b'\t').any(|t| t.strip_suffix(b":").is_some_and(|k| field(k).is_some()))
}

/// MariaDB's warning lines: `# Warning         1292 Truncated …`.
fn is_warning_line(line: &[u8]) -> bool {
    starts(line, b"# Warning ") || starts(line, b"# Note ") || starts(line, b"# Error ")
}

/// `SET timestamp=N;` or `SET last_insert_id=1,insert_id=2,timestamp=N;`,
/// exactly as servers write it (a user's `SET … timestamp=…` is a
/// statement). Times outside 1970–2106 are not taken.
fn set_timestamp(line: &[u8]) -> Option<i64> {
    let mut rest = line.strip_prefix(b"SET ")?.strip_suffix(b";")?;
    for key in [&b"last_insert_id="[..], b"insert_id="] {
        if let Some(r) = rest.strip_prefix(key) {
            let n = r.iter().take_while(|c| c.is_ascii_digit()).count();
            rest = r.get(n..)?.strip_prefix(b",")?;
        }
    }
    let digits = rest.strip_prefix(b"timestamp=")?;
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let t = digits.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0'));
    (t <= i64::from(u32::MAX)).then_some(t)
}

fn parse_num(v: &[u8]) -> Option<f64> {
    // What servers write (`0`, `123`, `0.000128`) without the float parser:
    // the digits as integers, one division.
    const POW10: [f64; 10] = [1.0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];
    // Most counts in a log are one digit.
    if let [d] = v {
        if d.is_ascii_digit() {
            return Some(f64::from(d - b'0'));
        }
    }
    let digits = |s: &[u8]| {
        s.iter().try_fold(0u64, |a, &c| {
            let d = c.wrapping_sub(b'0');
            (d < 10).then(|| a * 10 + u64::from(d))
        })
    };
    let dot = v.iter().position(|&c| c == b'.');
    let (int, frac) = match dot {
        Some(d) => (&v[..d], &v[d + 1..]),
        None => (v, &b""[..]),
    };
    if !int.is_empty() && int.len() <= 18 && frac.len() < POW10.len() && (dot.is_none() || !frac.is_empty()) {
        if let (Some(i), Some(f)) = (digits(int), digits(frac)) {
            return Some(i as f64 + f as f64 / POW10[frac.len()]);
        }
    }
    let f: f64 = std::str::from_utf8(v).ok()?.parse().ok()?;
    f.is_finite().then_some(f).filter(|f| *f >= 0.0)
}

fn trim(s: &[u8]) -> &[u8] {
    let a = s.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(s.len());
    let b = s.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(a, |e| e + 1);
    &s[a..b]
}

/// Where the last entry of `buf` starts (after position 0), so a block can
/// be cut there: the last `# User@Host:` line, or the `# Time:` line right
/// before it; failing those, the last `# Time:` or `# Query_time:` line.
pub fn last_entry_start(buf: &[u8]) -> Option<usize> {
    let cut = |needle: &[u8]| memchr::memmem::rfind(buf, needle).map(|p| p + 1).filter(|&p| p > 0);
    if let Some(p) = cut(b"\n# User@Host: ") {
        // Back up over the `# Time:` line that belongs to it; when that is
        // the block's first line, the block holds one entry: no cut.
        let before = &buf[..p - 1];
        let prev = memchr::memrchr(b'\n', before).map_or(0, |n| n + 1);
        if starts(&buf[prev..], b"# Time: ") {
            return (prev > 0).then_some(prev);
        }
        return Some(p);
    }
    // One entry larger than the block (a bulk INSERT): grow rather than cut
    // inside it. The other starts are for logs without `# User@Host:`.
    if starts(buf, b"# User@Host: ") || memchr::memmem::find(buf, b"\n# User@Host: ").is_some() {
        return None;
    }
    cut(b"\n# Time: ").or_else(|| cut(b"\n# Query_time: "))
}

/// The database the last `use db;` line of `buf` selects.
pub fn last_use(buf: &[u8]) -> Option<&[u8]> {
    // Forward: memmem's forward search is several times faster than its
    // reverse one, and the whole block is searched either way when it
    // holds no `use`.
    let p = memchr::memmem::find_iter(buf, b"\nuse ").last()? + 5;
    let end = memchr::memchr(b'\n', &buf[p..]).map_or(buf.len(), |e| p + e);
    let name = buf[p..end].strip_suffix(b";")?;
    Some(name.strip_prefix(b"`").and_then(|n| n.strip_suffix(b"`")).unwrap_or(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::F_FILESORT;

    fn parse(log: &str) -> Aggregate {
        let mut agg = Aggregate::new(100);
        parse_block(log.as_bytes(), &BlockCtx { input: 0, seq: 0, db: b"", at_end: false }, &mut agg);
        agg
    }

    fn class<'a>(agg: &'a Aggregate, fp: &str) -> &'a crate::class::Class {
        agg.classes.iter().find(|c| &*c.fingerprint == fp.as_bytes()).unwrap_or_else(|| {
            panic!(
                "no class {fp:?} in {:?}",
                agg.classes.iter().map(|c| String::from_utf8_lossy(&c.fingerprint).into_owned()).collect::<Vec<_>>()
            )
        })
    }

    const MARIADB: &str = "mariadbd, Version: 10.11.19-MariaDB-0+deb12u1-log (Debian 12). started with:
Tcp port: 33999  Unix socket: /tmp/sb/sock
Time\t\t    Id Command\tArgument
# Time: 261127  6:52:26
# User@Host: app[app] @ web1 [10.0.0.5]
# Thread_id: 4  Schema: d  QC_hit: No
# Query_time: 0.003581  Lock_time: 0.000079  Rows_sent: 1  Rows_examined: 20000
# Rows_affected: 0  Bytes_sent: 65
# Pages_accessed: 111  Pages_read: 3  Pages_prefetched: 0  Pages_updated: 0  Old_rows_read: 0
# Pages_read_time: 0.5000  Engine_time: 2.1186
# Full_scan: Yes  Full_join: No  Tmp_table: No  Tmp_table_on_disk: No
# Filesort: No  Filesort_on_disk: No  Merge_passes: 0  Priority_queue: No
#
# explain: id\tselect_type\ttable\ttype\tpossible_keys\tkey\tkey_len\tref\trows\tr_rows\tfiltered\tr_filtered\tExtra
# explain: 1\tSIMPLE\tt\tALL\tNULL\tNULL\tNULL\tNULL\t20001\t20000.00\t100.00\t0.00\tUsing where
#
use `d`;
SET timestamp=1795762346;
select count(*) from t where c like '%y%';
# User@Host: root[root] @ localhost []
# Thread_id: 5  Schema:   QC_hit: No
# Query_time: 0.000455  Lock_time: 0.000098  Rows_sent: 3  Rows_examined: 60
# Rows_affected: 0  Bytes_sent: 353
# Filesort: Yes  Filesort_on_disk: No  Merge_passes: 0  Priority_queue: Yes
# Warnings
# Warning         1292 Truncated incorrect DOUBLE value: 'x'
# Note            1003 Query_time: 5 is not an attribute
SET timestamp=1795762347;
select *
  from t where a in (1,2,3)
  order by c limit 3;
mariadbd, Version: 10.11.19-MariaDB-0+deb12u1-log (Debian 12). started with:
Tcp port: 33999  Unix socket: /tmp/sb/sock
Time\t\t    Id Command\tArgument
# User@Host: root[root] @ localhost []
# Thread_id: 6  Schema: d  QC_hit: No
# Query_time: 0.000091  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0
# Rows_affected: 0  Bytes_sent: 11
SET timestamp=1795762348;
select count(*) from t where c like '%zz%';
";

    #[test]
    fn mariadb_full_verbosity() {
        let agg = parse(MARIADB);
        assert_eq!(agg.events, 3, "{:?}", agg.problems);
        assert!(agg.problems.is_empty(), "{:?}", agg.problems);
        let c = class(&agg, "select count(*) from t where c like ?");
        assert_eq!(c.count, 2);
        let qt = c.stat(A::QueryTime).unwrap();
        assert!((qt.sum - 0.003672).abs() < 1e-9);
        // Engine_time is milliseconds; the optimizer's share is the rest.
        let et = c.stat(A::EngineTime).unwrap();
        assert!((et.sum - 0.0021186).abs() < 1e-9, "{}", et.sum);
        let ot = c.stat(A::OptimizerTime).unwrap();
        assert!((ot.sum - (0.003581 - 0.0021186)).abs() < 1e-9);
        assert_eq!(c.stat(A::PagesRead).unwrap().sum, 3.0);
        assert!((c.stat(A::PagesReadTime).unwrap().sum - 0.0005).abs() < 1e-12);
        assert_eq!(c.flags[1], (1, 1));
        assert_eq!(c.sample.explain_lines().count(), 2);
        assert_eq!(c.hosts.sorted(), vec![("localhost".to_string(), 1), ("web1".to_string(), 1)]);
        assert_eq!(c.dbs.sorted(), vec![("d".to_string(), 2)]);
        assert_eq!((c.first, c.last), (Some(1795762346), Some(1795762348)));
        // A multi-line statement, warnings not taken for attributes, an
        // empty Schema.
        let s = class(&agg, "select * from t where a in (?+) order by c limit ?");
        assert_eq!(s.stat(A::Warnings).unwrap().sum, 2.0);
        assert_eq!(s.flags[F_FILESORT], (1, 1));
        assert_eq!(s.stat(A::QueryTime).unwrap().n, 1);
        assert_eq!(&*s.sample.query, b"select *\n  from t where a in (1,2,3)\n  order by c limit 3");
        assert_eq!(s.dbs.sorted()[0].0, "");
    }

    #[test]
    fn mysql_57_and_80_extra() {
        let log = "/usr/sbin/mysqld, Version: 5.7.12-0ubuntu1.1-log ((Ubuntu)). started with:
Tcp port: 3306  Unix socket: /var/run/mysqld/mysqld.sock
Time                 Id Command    Argument
# Time: 2016-07-20T18:13:25.698433Z
# User@Host: root[root] @ localhost [127.0.0.1]  Id:     3
# Query_time: 0.003464  Lock_time: 0.000324 Rows_sent: 1000  Rows_examined: 2000
use facturas;
SET timestamp=1469038405;
SELECT * FROM db_facturacion.facturas LIMIT 0, 1000;
# Time: 2016-07-20T18:13:25.699880Z
# User@Host: root[root] @ localhost [127.0.0.1]  Id:     4
# Query_time: 0.000241  Lock_time: 0.000055 Rows_sent: 0  Rows_examined: 0
SET timestamp=1469038405;
# administrator command: Init DB;
# Time: 2024-05-10T17:45:09.474988Z
# User@Host: msandbox[msandbox] @ localhost []  Id:    12
# Query_time: 0.000244  Lock_time: 0.000003 Rows_sent: 0  Rows_examined: 0 Thread_id: 12 Errno: 1146 Killed: 0 Bytes_received: 22 Bytes_sent: 56 Read_first: 1 Read_last: 0 Read_key: 1 Read_next: 0 Read_prev: 0 Read_rnd: 0 Read_rnd_next: 7 Sort_merge_passes: 2 Sort_range_count: 0 Sort_rows: 9 Sort_scan_count: 0 Created_tmp_disk_tables: 1 Created_tmp_tables: 1 Start:  End: 2024-05-10T17:45:09.474988Z
SET timestamp=1715363109;
select * from t;
";
        let agg = parse(log);
        assert_eq!(agg.events, 3);
        assert!(agg.problems.is_empty(), "{:?}", agg.problems);
        let c = class(&agg, "select * from db_facturacion.facturas limit ?");
        assert_eq!(c.stat(A::RowsSent).unwrap().sum, 1000.0);
        assert_eq!(c.dbs.sorted()[0].0, "facturas");
        assert_eq!(c.hosts.sorted()[0].0, "localhost");
        let a = class(&agg, "administrator command: Init DB");
        assert_eq!(a.count, 1);
        let m = class(&agg, "select * from t");
        assert_eq!(m.flags[crate::attr::F_ERROR], (1, 1));
        assert_eq!(m.flags[crate::attr::F_TMP_TABLE_ON_DISK], (1, 1));
        assert_eq!(m.stat(A::MergePasses).unwrap().sum, 2.0);
        assert_eq!(m.stat(A::ReadRndNext).unwrap().sum, 7.0);
        assert_eq!(m.stat(A::BytesReceived).unwrap().sum, 22.0);
        // The database `use` chose earlier in the log.
        assert_eq!(m.dbs.sorted()[0].0, "facturas");
    }

    #[test]
    fn percona_full() {
        let log = "# Time: 2024-05-10T17:52:26.336958Z
# User@Host: msandbox[msandbox] @ localhost []  Id:    13
# Schema: test_jfg  Last_errno: 0  Killed: 0
# Query_time: 0.000218  Lock_time: 0.000004  Rows_sent: 0  Rows_examined: 0  Rows_affected: 0  Bytes_sent: 56
# Tmp_tables: 0  Tmp_disk_tables: 0  Tmp_table_sizes: 0
# InnoDB_trx_id: 0
# Full_scan: Yes  Full_join: No  Tmp_table: No  Tmp_table_on_disk: No
# Filesort: No  Filesort_on_disk: No  Merge_passes: 0
#   InnoDB_IO_r_ops: 4  InnoDB_IO_r_bytes: 65536  InnoDB_IO_r_wait: 0.001500
#   InnoDB_rec_lock_wait: 0.250000  InnoDB_queue_wait: 0.000000
#   InnoDB_pages_distinct: 7
SET timestamp=1715363546;
select * from t;
# Time: 2018-05-30T09:30:12.039775Z
# User@Host: root[root] @ localhost []  Id:    10
# Schema: test  Last_errno: 1317  Killed: 0
# Query_time: 19.254508  Lock_time: 0.001043  Rows_sent: 0  Rows_examined: 0  Rows_affected: 0
# Bytes_sent: 44  Tmp_tables: 0  Tmp_disk_tables: 0  Tmp_table_sizes: 0
# InnoDB_trx_id: 0
# QC_Hit: No  Full_scan: No  Full_join: No  Tmp_table: No  Tmp_table_on_disk: No
# Filesort: No  Filesort_on_disk: No  Merge_passes: 0
# No InnoDB statistics available for this query
SET timestamp=1527672612;
select count(*) from z1 limit 1;
";
        let agg = parse(log);
        assert_eq!(agg.events, 2);
        assert!(agg.problems.is_empty(), "{:?}", agg.problems);
        let c = class(&agg, "select * from t");
        assert_eq!(c.stat(A::PagesRead).unwrap().sum, 4.0);
        assert_eq!(c.stat(A::PagesDistinct).unwrap().sum, 7.0);
        assert!((c.stat(A::RowLockWait).unwrap().sum - 0.25).abs() < 1e-12);
        assert!((c.stat(A::PagesReadTime).unwrap().sum - 0.0015).abs() < 1e-12);
        assert_eq!(c.dbs.sorted()[0].0, "test_jfg");
        let k = class(&agg, "select count(*) from z1 limit ?");
        assert_eq!(k.flags[crate::attr::F_ERROR], (1, 1));
        assert_eq!(k.flags[0], (1, 0));
    }

    #[test]
    fn garbled_entries_are_named_and_statements_kept() {
        let log = "SELECT tail of an entry cut by rotation;
# User@Host: a[a] @ h []
# Query_time: 0.x1  Lock_time: 0.000001  Rows_sent: 1  Rows_examined: 1
SET timestamp=100;
select 1;
# Query_time: 0.5  Lock_time: 0  Rows_sent: 1  Rows_examined: 1
SET timestamp=101;
select 2;
# User@Host: b[b] @ h []
# Query_time: 0.1  Lock_time: 0  Rows_sent: 1  Rows_examined: 1
# User@Host: c[c] @ h []
# Query_time: 0.2  Lock_time: 0  Rows_sent: 1  Rows_examined: 1
SET timestamp=102;
select 3;
# User@Host: d[d] @ h []
# Query_time: 0.3";
        let agg = parse(log);
        assert_eq!(agg.events, 3, "{:?}", agg.problems);
        let c = class(&agg, "select ?");
        assert_eq!(c.count, 3);
        // The garbled Query_time is left out, the statement still counts.
        assert_eq!(c.stat(A::QueryTime).unwrap().n, 2);
        assert_eq!(c.stat(A::RowsSent).unwrap().n, 3);
        let lines: Vec<(u64, &str)> = agg.problems.iter().map(|p| (p.line, p.what.as_str())).collect();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[0].0, 1);
        assert!(lines[1].1.contains("Query_time \"0.x1\""), "{lines:?}");
        assert_eq!(lines[1].0, 3);
        assert_eq!(lines[2], (9, "an entry with no statement (cut short?)"));
        assert_eq!(lines[3], (15, "an entry with no statement (cut short?)"));
    }

    #[test]
    fn an_entry_without_statement_at_the_inputs_end_is_unfinished_not_damage() {
        // A live log read while the server writes its last entry.
        let log = "# User@Host: a[a] @ h []\n# Query_time: 0.1\nSET timestamp=100;\nselect 1;\n\
                   # User@Host: b[b] @ h []\n# Query_time: 0.2\nSET timestamp=101;\nselect 2;\n\
                   # Time: 2026-12-01T18:00:00.000000Z\n# User@Host: c[c] @ h []\n# Query_time: 0.3";
        let mut agg = Aggregate::new(100);
        parse_block(log.as_bytes(), &BlockCtx { input: 0, seq: 0, db: b"", at_end: true }, &mut agg);
        assert_eq!(agg.events, 2);
        assert!(agg.problems.is_empty(), "{:?}", agg.problems);
        assert_eq!(agg.unfinished.len(), 1);
        assert_eq!(agg.unfinished[0].line, 9);
        assert!(agg.unfinished[0].what.contains("still being written"), "{}", agg.unfinished[0].what);
        // The same entry before more of the input (a block's end inside it)
        // is damage.
        let mut agg = Aggregate::new(100);
        parse_block(log.as_bytes(), &BlockCtx { input: 0, seq: 0, db: b"", at_end: false }, &mut agg);
        assert!(agg.unfinished.is_empty());
        assert_eq!(agg.problem_count, 1);
        // A complete last entry is counted either way.
        let mut agg = Aggregate::new(100);
        parse_block(
            &log.as_bytes()[..log.find("# Time:").unwrap()],
            &BlockCtx { input: 0, seq: 0, db: b"", at_end: true },
            &mut agg,
        );
        assert_eq!((agg.events, agg.problem_count, agg.unfinished.len()), (2, 0, 0));
        // A last entry that ends inside a line is set aside; one that ends
        // with blanks after its line end is whole.
        let whole = &log[..log.find("# Time:").unwrap()];
        for (text, counted) in [(&whole[..whole.len() - 4], 1u64), (&format!("{whole}  ")[..], 2)] {
            let mut agg = Aggregate::new(100);
            parse_block(text.as_bytes(), &BlockCtx { input: 0, seq: 0, db: b"", at_end: true }, &mut agg);
            assert_eq!(
                (agg.events, agg.problem_count, agg.unfinished.len()),
                (counted, 0, 2 - counted as usize),
                "{text:?}"
            );
        }
        let mut agg = Aggregate::new(100);
        parse_block(
            &whole.as_bytes()[..whole.len() - 4],
            &BlockCtx { input: 0, seq: 0, db: b"", at_end: true },
            &mut agg,
        );
        assert_eq!(agg.unfinished[0].line, 5);
        assert!(agg.unfinished[0].what.contains("ends inside a line"), "{}", agg.unfinished[0].what);
    }

    #[test]
    fn only_the_servers_set_timestamp_line_is_taken_for_one() {
        assert_eq!(set_timestamp(b"SET timestamp=1795762346;"), Some(1795762346));
        assert_eq!(set_timestamp(b"SET last_insert_id=3,insert_id=4,timestamp=17;"), Some(17));
        assert_eq!(set_timestamp(b"SET insert_id=4,timestamp=17;"), Some(17));
        assert_eq!(set_timestamp(b"SET SESSION explicit_defaults_for_timestamp=1;"), None);
        assert_eq!(set_timestamp(b"SET @last_timestamp=5;"), None);
        assert_eq!(set_timestamp(b"SET timestamp=99999999999;"), None);
        // A user's SET after the server's is the entry's statement.
        let log = "# User@Host: a[a] @ h []\n# Query_time: 0.1\nSET timestamp=100;\nSET timestamp=5;\n\
                   # User@Host: a[a] @ h []\n# Query_time: 0.1\nSET timestamp=101;\nSET SESSION explicit_defaults_for_timestamp=1;\n";
        let agg = parse(log);
        assert!(agg.problems.is_empty(), "{:?}", agg.problems);
        assert_eq!(agg.events, 2);
        let c = class(&agg, "set timestamp = ?");
        assert_eq!(c.first, Some(100));
        class(&agg, "set session explicit_defaults_for_timestamp = ?");
    }

    #[test]
    fn an_entry_larger_than_a_block_is_not_cut() {
        let big = format!("insert into t values {};", vec!["(1)"; 3000].join(","));
        let log = format!(
            "# Time: 261127  6:52:23\n# User@Host: u[u] @ h []\n# Thread_id: 3  Schema: d  QC_hit: No\n\
             # Query_time: 0.1  Lock_time: 0  Rows_sent: 0  Rows_examined: 0\nSET timestamp=1;\n{big}\n\
             # User@Host: u[u] @ h []\n# Thread_id: 3  Schema: d  QC_hit: No\n# Query_time: 0.1\nSET timestamp=2;\nselect 1;\n"
        );
        let mut b = crate::input::Blocks::new(
            Box::new(std::io::Cursor::new(log.clone().into_bytes())),
            4096,
            crate::input::Pool::default(),
        );
        let mut agg = Aggregate::new(100);
        let mut seq = 0;
        while let Some(block) = b.next_block().unwrap() {
            parse_block(&block, &BlockCtx { input: 0, seq, db: b"", at_end: false }, &mut agg);
            seq += 1;
        }
        assert!(agg.problems.is_empty(), "{:?}", agg.problems);
        assert_eq!(agg.events, 2);
        let c = class(&agg, "insert into t values (?+)");
        assert_eq!(c.users.sorted()[0].0, "u");
        assert_eq!(c.dbs.sorted()[0].0, "d");
    }

    /// Lines that fit a learned layout read exactly as read by name, on
    /// thousands of lines changed from servers' own in every way a layout
    /// could be fooled: spacing, tabs, empty values, values that look like
    /// keys, unknown keys, stray words, garbled numbers.
    #[test]
    fn layouts_read_what_reading_by_name_reads() {
        let lines = [
            "# Thread_id: 4  Schema: d  QC_hit: No",
            "# Thread_id: 5  Schema:   QC_hit: No",
            "# Query_time: 0.003581  Lock_time: 0.000079  Rows_sent: 1  Rows_examined: 20000",
            "# Rows_affected: 0  Bytes_sent: 65",
            "# Pages_accessed: 111  Pages_read: 3  Pages_prefetched: 0  Pages_updated: 0  Old_rows_read: 0",
            "# Pages_read_time: 0.5000  Engine_time: 2.1186",
            "# Full_scan: Yes  Full_join: No  Tmp_table: No  Tmp_table_on_disk: No",
            "# Filesort: No  Filesort_on_disk: No  Merge_passes: 3  Priority_queue: No",
            "# Query_time: 0.000244  Lock_time: 0.000003 Rows_sent: 0  Rows_examined: 0 Thread_id: 12 Errno: 1146 Killed: 0 Bytes_received: 22 Start:  End: 2024-05-10T17:45:09.474988Z",
            "# Schema: test_jfg  Last_errno: 0  Killed: 0",
            "#   InnoDB_IO_r_ops: 4  InnoDB_IO_r_bytes: 65536  InnoDB_IO_r_wait: 0.001500",
            "# Tmp_tables: 1  Unknown_key: 7  Tmp_disk_tables: 0",
        ];
        let replacements = [
            "",
            "Yes",
            "No",
            "x:",
            "Rows_sent:",
            "Unknown:",
            "0.x",
            "12",
            "-1",
            "1e3",
            "a b",
            "\t",
            "  ",
            ":",
            "Schema:",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut log = String::new();
        for k in 0..3000 {
            log.push_str("# User@Host: u[u] @ h []\n");
            for (i, l) in lines.iter().enumerate() {
                // The first entries as written, so layouts are learned.
                if k < 3 || rnd(3) == 0 {
                    log.push_str(l);
                    log.push('\n');
                    continue;
                }
                let mut words: Vec<String> = l.split(' ').map(String::from).collect();
                for _ in 0..1 + rnd(2) {
                    let w = 1 + rnd(words.len() - 1);
                    match rnd(5) {
                        0 => words[w] = replacements[rnd(replacements.len())].to_string(),
                        1 => words.insert(w, String::new()),
                        2 => words.insert(w, replacements[rnd(replacements.len())].to_string()),
                        3 => words[w] = words[w].replace(':', ""),
                        _ => words[w].push('\t'),
                    }
                }
                log.push_str(&words.join(" "));
                if i % 5 == 0 {
                    log.push_str("  ");
                }
                log.push('\n');
            }
            log.push_str(&format!("SET timestamp={};\nselect {};\n", 100 + k, k % 7));
        }
        let ctx = BlockCtx { input: 0, seq: 0, db: b"", at_end: false };
        let (mut by_layout, mut by_name) = (Aggregate::new(100), Aggregate::new(100));
        parse_block_with(log.as_bytes(), &ctx, &mut by_layout, true);
        parse_block_with(log.as_bytes(), &ctx, &mut by_name, false);
        assert_eq!(by_layout.events, 3000);
        assert_eq!(by_layout.problem_count, by_name.problem_count);
        assert_eq!(by_layout.problems, by_name.problems);
        assert!(by_name.problem_count > 100, "the mutations make garbled values: {}", by_name.problem_count);
        assert_eq!(format!("{:?}", by_layout.classes), format!("{:?}", by_name.classes));
        // And layouts were used: the lines as written fit them.
        let mut p = Parser {
            block: b"",
            ctx: &ctx,
            db: b"",
            state: State::Head,
            entry: Entry::new(0),
            skip_header: 0,
            layouts: vec![],
            next_layout: 0,
            learn: true,
        };
        for l in lines {
            p.attrs(l.as_bytes(), 1, &mut by_layout);
        }
        for l in lines {
            assert!(p.layouts.iter().any(|y| y.read(l.as_bytes(), &mut Entry::new(0))), "no layout fits {l:?}");
        }
    }

    #[test]
    fn newlines_are_found_in_any_bytes() {
        let mut seed = 99u64;
        for _ in 0..2000 {
            let mut chunk = [0u8; 64];
            for c in &mut chunk {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                // Newlines, their neighbours, high bytes.
                *c = [b'\n', 0x0b, 0x09, 0x8a, 0xff, 0, b'a'][(seed >> 60) as usize % 7];
            }
            let want = chunk.iter().enumerate().fold(0u64, |m, (k, &b)| m | u64::from(b == b'\n') << k);
            assert_eq!(newline_mask(&chunk), want, "{chunk:?}");
        }
    }

    #[test]
    fn short_prefixes_compare_whole() {
        let line = b"  Rows_examined: 20000";
        for k in 0..=line.len() {
            assert!(starts_short(line, &line[..k]), "{k}");
            let mut other = line[..k].to_vec();
            for j in 0..k {
                other[j] ^= 1;
                assert!(!starts_short(line, &other), "{k} {j}");
                other[j] ^= 1;
            }
        }
        assert!(!starts_short(b"  Rows", b"  Rows_examined: "));
    }

    #[test]
    fn words_end_at_the_first_blank() {
        let line = b"# Query_time: 0.000016  Lock_time:\t0.000003 Rows_sent: 1\x80\xff 12345678901234567";
        for p in 0..=line.len() {
            let want = line[p..].iter().position(|&c| blank(c)).map_or(line.len(), |k| p + k);
            assert_eq!(word_end(line, p), want, "from {p}");
        }
    }

    #[test]
    fn numbers_as_servers_write_them() {
        assert_eq!(parse_num(b"0.000128"), Some(0.000128));
        assert_eq!(parse_num(b"12.5"), Some(12.5));
        assert_eq!(parse_num(b"20000"), Some(20000.0));
        assert_eq!(parse_num(b"1e3"), Some(1000.0));
        assert_eq!(parse_num(b"0.x1"), None);
        assert_eq!(parse_num(b"-1"), None);
        assert_eq!(parse_num(b""), None);
        assert_eq!(parse_num(b"1.0000000000001"), Some(1.0000000000001));
        assert_eq!(parse_num(b"0"), Some(0.0));
        assert_eq!(parse_num(b"7."), Some(7.0));
        assert_eq!(parse_num(b".5"), Some(0.5));
        assert_eq!(parse_num(b"1.2.3"), None);
        assert_eq!(parse_num(b"2.1186"), Some(2.1186));
    }

    #[test]
    fn blocks_cut_before_an_entry() {
        let log =
            b"x;\n# Time: 1\n# User@Host: a\n# Query_time: 1\nselect 1;\n# User@Host: b\n# Query_time: 1\nselect 2;\n";
        let p = last_entry_start(log).unwrap();
        assert!(log[p..].starts_with(b"# User@Host: b"));
        let p2 = last_entry_start(&log[..p]).unwrap();
        assert!(log[p2..].starts_with(b"# Time: 1"));
        assert_eq!(last_use(b"x\nuse `a`;\nselect 1;\nuse b;\nSET timestamp=1;"), Some(&b"b"[..]));
    }
}
