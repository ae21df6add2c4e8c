//! Rows as `LOAD DATA` text: fields separated by tab, rows ended by newline,
//! `\N` for NULL, and the escapes `LOAD DATA ... ESCAPED BY '\\'` reads back
//! (backslash, tab, newline, carriage return, NUL). Bytes are written as
//! they are (the file is loaded `CHARACTER SET binary`), so every value of
//! every character set and every binary byte comes back unchanged.
//!
//! Values arrive through the binary protocol, so floating-point columns are
//! written as the shortest text that reads back to the same value (the
//! text protocol rounds FLOAT to 6 digits).

use mysql::Value;

/// The clause of `LOAD DATA` that reads what [`row`] writes.
pub const LOAD_FORMAT: &str =
    r"CHARACTER SET binary FIELDS TERMINATED BY '\t' ESCAPED BY '\\' LINES TERMINATED BY '\n'";

/// Append one value.
pub fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::NULL => out.extend_from_slice(b"\\N"),
        Value::Bytes(b) => escape(out, b),
        Value::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::UInt(u) => out.extend_from_slice(u.to_string().as_bytes()),
        // Rust's shortest round-trip form ("1.1", "3.4e38").
        Value::Float(f) => out.extend_from_slice(format!("{f:?}").as_bytes()),
        Value::Double(d) => out.extend_from_slice(format!("{d:?}").as_bytes()),
        Value::Date(y, m, d, h, i, s, us) => {
            let mut t = format!("{y:04}-{m:02}-{d:02}");
            if (*h, *i, *s, *us) != (0, 0, 0, 0) {
                t.push_str(&format!(" {h:02}:{i:02}:{s:02}"));
                if *us != 0 {
                    t.push_str(&format!(".{us:06}"));
                }
            }
            out.extend_from_slice(t.as_bytes());
        }
        Value::Time(neg, days, h, m, s, us) => {
            let hours = *days * 24 + u32::from(*h);
            let mut t = format!("{}{hours:02}:{m:02}:{s:02}", if *neg { "-" } else { "" });
            if *us != 0 {
                t.push_str(&format!(".{us:06}"));
            }
            out.extend_from_slice(t.as_bytes());
        }
    }
}

fn escape(out: &mut Vec<u8>, b: &[u8]) {
    for &c in b {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0 => out.extend_from_slice(b"\\0"),
            c => out.push(c),
        }
    }
}

/// Append one row.
pub fn row(out: &mut Vec<u8>, values: &[Value]) {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        value(out, v);
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(v: Value) -> Vec<u8> {
        let mut o = vec![];
        value(&mut o, &v);
        o
    }

    #[test]
    fn values_are_written_as_load_data_reads_them() {
        assert_eq!(one(Value::NULL), b"\\N");
        assert_eq!(one(Value::Bytes(b"\\N".to_vec())), b"\\\\N", "the string \\N is not NULL");
        assert_eq!(one(Value::Bytes(b"a\tb\nc\rd\0e\\".to_vec())), b"a\\tb\\nc\\rd\\0e\\\\");
        assert_eq!(one(Value::Bytes(vec![0xff, 0x80, b'x'])), vec![0xff, 0x80, b'x']);
        assert_eq!(one(Value::Bytes(vec![])), b"");
        assert_eq!(one(Value::Int(-5)), b"-5");
        assert_eq!(one(Value::UInt(u64::MAX)), b"18446744073709551615");
        assert_eq!(one(Value::Float(1.1)), b"1.1");
        assert_eq!(one(Value::Float(3.4e38)), b"3.4e38");
        assert_eq!(one(Value::Double(0.1)), b"0.1");
        assert_eq!(one(Value::Date(2024, 1, 2, 0, 0, 0, 0)), b"2024-01-02");
        assert_eq!(one(Value::Date(2024, 1, 2, 3, 4, 5, 678000)), b"2024-01-02 03:04:05.678000");
        assert_eq!(one(Value::Time(true, 1, 2, 3, 4, 0)), b"-26:03:04");
        assert_eq!(one(Value::Time(false, 0, 0, 0, 1, 5)), b"00:00:01.000005");
    }

    #[test]
    fn a_row_is_tab_separated_and_newline_terminated() {
        let mut o = vec![];
        row(&mut o, &[Value::Int(1), Value::NULL, Value::Bytes(b"x".to_vec())]);
        assert_eq!(o, b"1\t\\N\tx\n");
    }
}
