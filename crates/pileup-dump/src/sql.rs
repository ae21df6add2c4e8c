//! Values as SQL literals, the way mydumper 0.10.1 writes them (so that
//! myloader and any SQL client load them): numbers bare, everything else in
//! double quotes with `\0 \n \r \\ \' \" \Z` escaped and other bytes as
//! they are (files are loaded with `SET NAMES binary`), `NULL` for NULL.

use mysql::Value;

pub fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::NULL => out.extend_from_slice(b"NULL"),
        Value::Bytes(b) => quoted(out, b),
        Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Double(_) => crate::tsv::value(out, v),
        Value::Date(..) | Value::Time(..) => {
            out.push(b'"');
            crate::tsv::value(out, v);
            out.push(b'"');
        }
    }
}

fn quoted(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'"');
    for &c in b {
        match c {
            0 => out.extend_from_slice(b"\\0"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\'' => out.extend_from_slice(b"\\'"),
            b'"' => out.extend_from_slice(b"\\\""),
            0x1a => out.extend_from_slice(b"\\Z"),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

/// One row as a parenthesised tuple.
pub fn tuple(out: &mut Vec<u8>, values: &[Value]) {
    out.push(b'(');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        value(out, v);
    }
    out.push(b')');
}

/// Split SQL text into statements as myloader 0.10.1 does: a statement
/// ends at a line that ends with `;`. (Values never hold a raw newline in
/// mydumper's files; routine bodies have `; ` at their inner line ends.)
pub fn statements(text: &[u8]) -> Vec<&[u8]> {
    let mut out = vec![];
    let mut start = 0;
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\n' && i > 0 && text[i - 1] == b';' {
            out.push(&text[start..i]);
            start = i + 1;
        }
        i += 1;
    }
    let rest = &text[start..];
    if rest.iter().any(|c| !c.is_ascii_whitespace()) {
        out.push(rest);
    }
    out
}

/// A multi-row INSERT as mydumper writes it, read back: the table, the
/// column list if any, and its rows as `LOAD DATA` text. Literals: NULL,
/// bare numbers, strings in double or single quotes with backslash escapes
/// (and doubled quotes), `0x` hex. Anything else is `Err` with what was
/// not understood. (Hand-written: a SQL parser crate reads values as text
/// and would not keep binary bytes.)
pub struct Insert {
    pub table: String,
    pub columns: Option<Vec<String>>,
    pub tsv: Vec<u8>,
    pub rows: u64,
}

pub fn parse_insert(st: &[u8]) -> Result<Insert, String> {
    let mut p = Parser { s: st, i: 0 };
    p.ws();
    for w in ["INSERT", "INTO"] {
        if !p.word(w) {
            return Err(format!("expected {w}"));
        }
        p.ws();
    }
    p.word("IGNORE");
    p.ws();
    let table = p.ident()?;
    p.ws();
    let columns = if p.peek() == Some(b'(') {
        p.i += 1;
        let mut cols = vec![];
        loop {
            p.ws();
            cols.push(p.ident()?);
            p.ws();
            match p.next() {
                Some(b',') => continue,
                Some(b')') => break,
                _ => return Err("bad column list".into()),
            }
        }
        p.ws();
        Some(cols)
    } else {
        None
    };
    if !p.word("VALUES") {
        return Err("expected VALUES".into());
    }
    let (mut tsv, mut rows) = (Vec::with_capacity(st.len()), 0u64);
    loop {
        p.ws();
        if p.next() != Some(b'(') {
            return Err(format!("expected ( at byte {}", p.i));
        }
        let mut first = true;
        loop {
            p.ws();
            if !first {
                tsv.push(b'\t');
            }
            first = false;
            p.value(&mut tsv)?;
            p.ws();
            match p.next() {
                Some(b',') => continue,
                Some(b')') => break,
                _ => return Err(format!("expected , or ) at byte {}", p.i)),
            }
        }
        tsv.push(b'\n');
        rows += 1;
        p.ws();
        match p.next() {
            Some(b',') => continue,
            Some(b';') | None => break,
            _ => return Err(format!("expected , or ; at byte {}", p.i)),
        }
    }
    Ok(Insert { table, columns, tsv, rows })
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let c = self.peek();
        self.i += 1;
        c
    }
    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }
    fn word(&mut self, w: &str) -> bool {
        let end = self.i + w.len();
        let ok = self.s.get(self.i..end).is_some_and(|b| b.eq_ignore_ascii_case(w.as_bytes()))
            && !self.s.get(end).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_');
        if ok {
            self.i = end;
        }
        ok
    }
    fn ident(&mut self) -> Result<String, String> {
        if self.peek() == Some(b'`') {
            self.i += 1;
            let mut out = vec![];
            loop {
                match self.next() {
                    Some(b'`') if self.peek() == Some(b'`') => {
                        self.i += 1;
                        out.push(b'`');
                    }
                    Some(b'`') => break,
                    Some(c) => out.push(c),
                    None => return Err("unterminated identifier".into()),
                }
            }
            return String::from_utf8(out).map_err(|_| "identifier is not UTF-8".into());
        }
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'$') {
            self.i += 1;
        }
        if start == self.i {
            return Err(format!("expected a name at byte {start}"));
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }
    /// One literal, appended to `out` as `LOAD DATA` text.
    fn value(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => {
                self.i += 1;
                let mut raw = vec![];
                loop {
                    match self.next() {
                        None => return Err("unterminated string".into()),
                        Some(b'\\') => match self.next() {
                            Some(b'0') => raw.push(0),
                            Some(b'n') => raw.push(b'\n'),
                            Some(b'r') => raw.push(b'\r'),
                            Some(b't') => raw.push(b'\t'),
                            Some(b'b') => raw.push(8),
                            Some(b'Z') => raw.push(0x1a),
                            Some(c @ (b'%' | b'_')) => raw.extend_from_slice(&[b'\\', c]),
                            Some(c) => raw.push(c),
                            None => return Err("unterminated string".into()),
                        },
                        Some(c) if c == q && self.peek() == Some(q) => {
                            self.i += 1;
                            raw.push(q);
                        }
                        Some(c) if c == q => break,
                        Some(c) => raw.push(c),
                    }
                }
                crate::tsv::value(out, &mysql::Value::Bytes(raw));
            }
            _ if self.word("NULL") => out.extend_from_slice(b"\\N"),
            Some(b'0') if matches!(self.s.get(self.i + 1), Some(b'x' | b'X')) => {
                self.i += 2;
                let start = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                    self.i += 1;
                }
                let hex = &self.s[start..self.i];
                if !hex.len().is_multiple_of(2) {
                    return Err("odd hex literal".into());
                }
                let bytes: Vec<u8> = hex
                    .chunks(2)
                    .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap_or("zz"), 16).unwrap_or(0))
                    .collect();
                crate::tsv::value(out, &mysql::Value::Bytes(bytes));
            }
            Some(c) if c.is_ascii_digit() || c == b'-' || c == b'+' || c == b'.' => {
                let start = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.')) {
                    self.i += 1;
                }
                out.extend_from_slice(&self.s[start..self.i]);
            }
            _ => return Err(format!("a value pileup does not read at byte {}", self.i)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_escaped_as_mydumper_writes_them() {
        let mut o = vec![];
        tuple(
            &mut o,
            &[
                Value::Int(1),
                Value::Bytes(b"a'b\"c\\d\ne\rf\0g\x1ah\ti\xff".to_vec()),
                Value::NULL,
                Value::Double(0.5),
                Value::Date(2024, 1, 2, 3, 4, 5, 0),
            ],
        );
        assert_eq!(o, b"(1,\"a\\'b\\\"c\\\\d\\ne\\rf\\0g\\Zh\ti\xff\",NULL,0.5,\"2024-01-02 03:04:05\")".to_vec());
    }

    #[test]
    fn inserts_read_back_to_load_data_text() {
        let st = b"INSERT INTO `t` (`a`,`b c`) VALUES\n(1,\"x\\ty\\n\\0\\\\z\\'q\\\"\"),\n(-2.5e3,NULL),\n(0x00ff,'it''s'),\n(3,\"\xff\x80\");";
        let i = parse_insert(st).unwrap();
        assert_eq!(i.table, "t");
        assert_eq!(i.columns, Some(vec!["a".to_string(), "b c".to_string()]));
        assert_eq!(i.rows, 4);
        assert_eq!(i.tsv, b"1\tx\\ty\\n\\0\\\\z'q\"\n-2.5e3\t\\N\n\\0\xff\tit's\n3\t\xff\x80\n".to_vec());
        let i = parse_insert(b"INSERT INTO t VALUES\n(1);").unwrap();
        assert_eq!((i.columns, i.rows), (None, 1));
        assert!(parse_insert(b"INSERT INTO t VALUES (CURRENT_TIMESTAMP);").is_err());
    }

    #[test]
    fn statements_end_at_lines_ending_in_a_semicolon() {
        let text = b"SET NAMES binary;\nINSERT INTO t VALUES\n(1,\"a;\"),\n(2,\"b\");\nCREATE PROCEDURE p() BEGIN SELECT 1; \nEND;\nDO 1";
        let s = statements(text);
        assert_eq!(s.len(), 4);
        assert_eq!(s[1], b"INSERT INTO t VALUES\n(1,\"a;\"),\n(2,\"b\");");
        assert_eq!(s[2], b"CREATE PROCEDURE p() BEGIN SELECT 1; \nEND;");
        assert_eq!(s[3], b"DO 1");
    }
}
