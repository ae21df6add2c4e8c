//! Statement fingerprints: a statement reduced to its shape (literals
//! become `?`, kept in order), and the table a write names.
//!
//! The lexer is written here because it must keep the literals' positions
//! and values, which a SQL parser's tokenizer does not hand back in a
//! reusable form; it knows MySQL's literal syntax only (strings with
//! escapes and introducers, numbers, hex and bit literals), everything
//! else is copied. Shapes are parsed with `sqlparser`.

use sqlparser::ast::{FromTable, ObjectName, Statement, TableFactor, TableObject};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

/// A literal taken out of a statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Int(i64),
    UInt(u64),
    /// Decimal or float text, and strings (unescaped bytes).
    Text(Vec<u8>),
    Double(f64),
    Null,
}

impl Literal {
    pub fn param(&self) -> mysql::Value {
        match self {
            Literal::Int(i) => mysql::Value::Int(*i),
            Literal::UInt(u) => mysql::Value::UInt(*u),
            Literal::Text(t) => mysql::Value::Bytes(t.clone()),
            Literal::Double(d) => mysql::Value::Double(*d),
            Literal::Null => mysql::Value::NULL,
        }
    }
}

/// Reduce a statement to its fingerprint: literals become `?` and are
/// returned in order. Numbers after LIMIT/OFFSET and strings after COLLATE
/// are part of the shape, not literals.
pub fn fingerprint(sql: &[u8], literals: &mut Vec<Literal>) -> String {
    literals.clear();
    let mut lx = Lexer { sql, i: 0, out: String::with_capacity(sql.len()), literals, last_word: String::new() };
    while lx.i < sql.len() {
        lx.step();
    }
    let mut out = lx.out;
    out.truncate(out.trim_end().len());
    out
}

/// The fingerprint being written: the statement, where it is read, and the
/// last keyword seen (LIMIT, OFFSET and COLLATE change what follows).
struct Lexer<'a> {
    sql: &'a [u8],
    i: usize,
    out: String,
    literals: &'a mut Vec<Literal>,
    last_word: String,
}

impl Lexer<'_> {
    /// Read the token at `i`.
    fn step(&mut self) {
        let (sql, i, n) = (self.sql, self.i, self.sql.len());
        let c = sql[i];
        match c {
            b'\'' | b'"' => {
                let (bytes, end) = read_string(sql, i);
                if self.last_word == "COLLATE" {
                    self.out.push_str(&String::from_utf8_lossy(&sql[i..end]));
                } else {
                    self.literal(Literal::Text(bytes));
                }
                self.i = end;
                self.last_word.clear();
            }
            b'`' => self.backquoted(),
            b'/' if sql.get(i + 1) == Some(&b'*') => {
                // Comments (including MariaDB's executable ones) are dropped.
                if !self.out.ends_with(' ') {
                    self.out.push(' ');
                }
                self.i = find(sql, i + 2, b"*/").map(|e| e + 2).unwrap_or(n);
            }
            b'#' => self.i = find(sql, i, b"\n").unwrap_or(n),
            b'-' if sql.get(i + 1) == Some(&b'-') && sql.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()) => {
                self.i = find(sql, i, b"\n").unwrap_or(n);
            }
            b'-' if sql.get(i + 1).is_some_and(|d| d.is_ascii_digit())
                && self.out.trim_end().ends_with(['(', ',', '=', '<', '>']) =>
            {
                self.negative()
            }
            b'0'..=b'9' | b'.' if c != b'.' || sql.get(i + 1).is_some_and(|d| d.is_ascii_digit()) => self.number(),
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80 => self.word(),
            c if c.is_ascii_whitespace() => {
                if !self.out.ends_with(' ') && !self.out.is_empty() {
                    self.out.push(' ');
                }
                self.i += 1;
            }
            _ => {
                self.out.push(c as char);
                self.i += 1;
                if c != b',' {
                    self.last_word.clear();
                }
            }
        }
    }

    fn literal(&mut self, lit: Literal) {
        self.literals.push(lit);
        self.out.push('?');
    }

    /// A name in backquotes, copied.
    fn backquoted(&mut self) {
        let (sql, n, start) = (self.sql, self.sql.len(), self.i);
        let mut i = start + 1;
        while i < n {
            if sql[i] == b'`' {
                if i + 1 < n && sql[i + 1] == b'`' {
                    i += 2;
                    continue;
                }
                i += 1;
                break;
            }
            i += 1;
        }
        self.out.push_str(&String::from_utf8_lossy(&sql[start..i]));
        self.i = i;
        self.last_word.clear();
    }

    /// A minus sign after an operator or a separator: a negative number,
    /// not a subtraction.
    fn negative(&mut self) {
        let (sql, n, i) = (self.sql, self.sql.len(), self.i);
        let mut j = i + 1;
        while j < n && (sql[j].is_ascii_digit() || sql[j] == b'.') {
            j += 1;
        }
        match number(std::str::from_utf8(&sql[i..j]).unwrap_or("0")) {
            lit @ (Literal::Int(_) | Literal::Text(_))
                if j >= n
                    || !(sql[j].is_ascii_alphanumeric() || sql[j] == b'_' || sql[j] == b'e' || sql[j] == b'E') =>
            {
                self.literal(lit);
                self.i = j;
            }
            _ => {
                self.out.push('-');
                self.i += 1;
            }
        }
        self.last_word.clear();
    }

    /// A number (decimal, float, hex), or digits that start a name.
    fn number(&mut self) {
        let (sql, n, start) = (self.sql, self.sql.len(), self.i);
        let prev_ident = self.out.chars().last().is_some_and(|p| p.is_ascii_alphanumeric() || p == '_' || p == '$');
        let mut i = start;
        if sql[i] == b'0' && matches!(sql.get(i + 1), Some(b'x') | Some(b'X')) {
            i += 2;
            while i < n && sql[i].is_ascii_hexdigit() {
                i += 1;
            }
        } else {
            while i < n && (sql[i].is_ascii_digit() || sql[i] == b'.') {
                i += 1;
            }
            if i < n
                && (sql[i] == b'e' || sql[i] == b'E')
                && sql.get(i + 1).is_some_and(|d| d.is_ascii_digit() || *d == b'-' || *d == b'+')
            {
                i += 2;
                while i < n && sql[i].is_ascii_digit() {
                    i += 1;
                }
            }
        }
        let text = std::str::from_utf8(&sql[start..i]).unwrap_or("0");
        if prev_ident || i < n && (sql[i].is_ascii_alphabetic() || sql[i] == b'_') {
            // Part of an identifier (t1, 1abc): copy.
            while i < n && (sql[i].is_ascii_alphanumeric() || sql[i] == b'_' || sql[i] == b'$') {
                i += 1;
            }
            self.out.push_str(&String::from_utf8_lossy(&sql[start..i]));
        } else if self.last_word == "LIMIT"
            || self.last_word == "OFFSET"
            || self.out.trim_end().ends_with(',') && limit_context(&self.out)
        {
            self.out.push_str(text);
        } else {
            self.literal(number(text));
        }
        self.i = i;
        self.last_word.clear();
    }

    /// A word: a keyword or name, NULL, or the introducer of a string
    /// literal (`_latin1'abc'`, `X'..'`, `B'..'`, `N'..'`).
    fn word(&mut self) {
        let (sql, n, start) = (self.sql, self.sql.len(), self.i);
        let mut i = start;
        while i < n && (sql[i].is_ascii_alphanumeric() || sql[i] == b'_' || sql[i] == b'$' || sql[i] >= 0x80) {
            i += 1;
        }
        let word = &sql[start..i];
        if i < n
            && sql[i] == b'\''
            && (word[0] == b'_'
                || word.eq_ignore_ascii_case(b"x")
                || word.eq_ignore_ascii_case(b"b")
                || word.eq_ignore_ascii_case(b"n"))
        {
            let (bytes, end) = read_string(sql, i);
            let lit = if word.eq_ignore_ascii_case(b"x") {
                Literal::Text(unhex(&bytes))
            } else if word.eq_ignore_ascii_case(b"b") {
                Literal::UInt(bytes.iter().fold(0u64, |a, b| (a << 1) | u64::from(*b == b'1')))
            } else {
                Literal::Text(bytes)
            };
            self.literal(lit);
            self.i = end;
            self.last_word.clear();
            return;
        }
        let w = String::from_utf8_lossy(word).to_ascii_uppercase();
        if w == "NULL" {
            self.literal(Literal::Null);
        } else {
            self.out.push_str(&String::from_utf8_lossy(word));
        }
        self.last_word = w;
        self.i = i;
    }
}

/// After `LIMIT n,` the second number is part of the shape too.
fn limit_context(out: &str) -> bool {
    let t = out.trim_end().trim_end_matches(',').trim_end();
    let t = t.trim_end_matches(|c: char| c.is_ascii_digit());
    t.trim_end().to_ascii_uppercase().ends_with("LIMIT")
}

fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

fn unhex(b: &[u8]) -> Vec<u8> {
    let v = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    b.chunks(2).map(|p| if p.len() == 2 { v(p[0]) << 4 | v(p[1]) } else { v(p[0]) }).collect()
}

fn number(text: &str) -> Literal {
    if let Ok(i) = text.parse::<i64>() {
        Literal::Int(i)
    } else if let Ok(u) = text.parse::<u64>() {
        Literal::UInt(u)
    } else if text.starts_with("0x") || text.starts_with("0X") {
        Literal::Text(unhex(&text.as_bytes()[2..]))
    } else if text.contains(['e', 'E']) {
        Literal::Double(text.parse().unwrap_or(0.0))
    } else {
        // DECIMAL literal: exact, as text.
        Literal::Text(text.as_bytes().to_vec())
    }
}

/// A quoted string starting at `start` (its quote): unescaped bytes and the
/// offset after the closing quote.
fn read_string(sql: &[u8], start: usize) -> (Vec<u8>, usize) {
    let q = sql[start];
    let mut out = Vec::new();
    let mut i = start + 1;
    while i < sql.len() {
        let c = sql[i];
        if c == b'\\' && i + 1 < sql.len() {
            let e = sql[i + 1];
            if e == b'%' || e == b'_' {
                // \% and \_ keep the backslash (LIKE patterns).
                out.push(b'\\');
            }
            out.push(match e {
                b'n' => b'\n',
                b't' => b'\t',
                b'r' => b'\r',
                b'0' => 0,
                b'b' => 8,
                b'Z' => 26,
                other => other,
            });
            i += 2;
            continue;
        }
        if c == q {
            if sql.get(i + 1) == Some(&q) {
                out.push(q);
                i += 2;
                continue;
            }
            return (out, i + 1);
        }
        out.push(c);
        i += 1;
    }
    (out, sql.len())
}

/// `schema.table` or `table` (None for the statement's default database).
pub fn table_of(name: &ObjectName) -> Option<(Option<String>, String)> {
    let parts: Vec<String> =
        name.0.iter().map(|p| p.as_ident().map(|i| i.value.clone())).collect::<Option<Vec<_>>>()?;
    match parts.as_slice() {
        [t] => Some((None, t.clone())),
        [s, t] => Some((Some(s.clone()), t.clone())),
        _ => None,
    }
}

/// The table a single-table UPDATE, DELETE, INSERT or REPLACE writes:
/// (schema, or None for the statement's default database; table). A
/// multi-table statement names no one table: None.
pub fn written_table(sql: &[u8]) -> Option<(Option<String>, String)> {
    let mut lits = vec![];
    let fp = fingerprint(sql, &mut lits);
    let head = fp.trim_start().get(..7).unwrap_or("").to_ascii_uppercase();
    if !["UPDATE", "DELETE", "INSERT", "REPLACE"].iter().any(|k| head.starts_with(k)) {
        return None;
    }
    let mut st = Parser::parse_sql(&MySqlDialect {}, &fp).ok()?;
    if st.len() != 1 {
        return None;
    }
    match st.remove(0) {
        Statement::Update(u) => match &u.table.relation {
            TableFactor::Table { name, .. } if u.table.joins.is_empty() && u.from.is_none() => table_of(name),
            _ => None,
        },
        Statement::Delete(d) => {
            let from = match &d.from {
                FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
            };
            if d.tables.len() > 1 || d.using.is_some() || from.len() != 1 || !from[0].joins.is_empty() {
                return None;
            }
            match &from[0].relation {
                TableFactor::Table { name, .. } => table_of(name),
                _ => None,
            }
        }
        Statement::Insert(ins) => match &ins.table {
            TableObject::TableName(name) => table_of(name),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_a_write_names() {
        let t = |s: &str| written_table(s.as_bytes());
        assert_eq!(t("UPDATE sbtest1 SET k=k+1 WHERE id=5"), Some((None, "sbtest1".into())));
        assert_eq!(t("delete from shop.orders where id in (1,2)"), Some((Some("shop".into()), "orders".into())));
        assert_eq!(t("INSERT INTO t (a) VALUES ('x'), ('y')"), Some((None, "t".into())));
        assert_eq!(t("REPLACE INTO s.t VALUES (1)"), Some((Some("s".into()), "t".into())));
        assert_eq!(t("SELECT * FROM t"), None, "not a write");
        assert_eq!(t("UPDATE a JOIN b ON a.id = b.id SET a.x = b.x"), None, "two tables");
        assert_eq!(t("DELETE a FROM a JOIN b ON a.id = b.id"), None, "two tables");
        assert_eq!(t("UPDATE"), None, "does not parse");
    }
}
