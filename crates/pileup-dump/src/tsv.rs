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

/// Append one value. Numbers and times are written by hand with `itoa` and
/// `ryu` rather than `format!`: this runs for every value of every row, and
/// the formatting machinery was most of the dump's own CPU time.
pub fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::NULL => out.extend_from_slice(b"\\N"),
        Value::Bytes(b) => escape(out, b),
        Value::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
        Value::UInt(u) => out.extend_from_slice(itoa::Buffer::new().format(*u).as_bytes()),
        // The shortest text that reads back to the same value ("1.1", "3.4e38").
        Value::Float(f) => float(out, *f),
        Value::Double(d) => out.extend_from_slice(ryu::Buffer::new().format(*d).as_bytes()),
        Value::Date(y, m, d, h, i, s, us) => {
            digits(out, u32::from(*y), 4);
            out.push(b'-');
            digits(out, u32::from(*m), 2);
            out.push(b'-');
            digits(out, u32::from(*d), 2);
            if (*h, *i, *s, *us) != (0, 0, 0, 0) {
                out.push(b' ');
                clock(out, u32::from(*h), *i, *s, *us);
            }
        }
        Value::Time(neg, days, h, m, s, us) => {
            if *neg {
                out.push(b'-');
            }
            clock(out, *days * 24 + u32::from(*h), *m, *s, *us);
        }
    }
}

/// A FLOAT as the shortest text that reads back to it, unless that text,
/// read as the server reads it (as a double), lies beyond FLOAT's range:
/// FLT_MAX's shortest form `3.4028235e38` is larger than FLT_MAX, and a
/// strict-mode load refuses it. Such a value is written exactly, as the
/// double it widens to.
fn float(out: &mut Vec<u8>, f: f32) {
    let mut b = ryu::Buffer::new();
    let short = b.format(f);
    if short.parse::<f64>().is_ok_and(|d| d.abs() <= f64::from(f32::MAX)) {
        out.extend_from_slice(short.as_bytes());
    } else {
        out.extend_from_slice(ryu::Buffer::new().format(f64::from(f)).as_bytes());
    }
}

/// `HH:MM:SS` with `.ffffff` when there are microseconds (hours may exceed 99).
fn clock(out: &mut Vec<u8>, h: u32, m: u8, s: u8, us: u32) {
    digits(out, h, 2);
    out.push(b':');
    digits(out, u32::from(m), 2);
    out.push(b':');
    digits(out, u32::from(s), 2);
    if us != 0 {
        out.push(b'.');
        digits(out, us, 6);
    }
}

/// `n` in decimal, zero-padded to at least `width` digits.
fn digits(out: &mut Vec<u8>, n: u32, width: usize) {
    let mut b = itoa::Buffer::new();
    let t = b.format(n);
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(t.len())));
    out.extend_from_slice(t.as_bytes());
}

/// Copy `b` with the five bytes `LOAD DATA` reads as escapes escaped; the
/// runs between them are copied whole. Two vectorised searches (memchr
/// takes at most three needles: backslash, tab and newline; carriage
/// return and NUL), each group's next byte searched for again only once
/// the copy has passed it, so that a value dense in one group and without
/// the other is not searched to its end at each escape (a test byte by
/// byte for five values was a fifth of the dump's own CPU time).
fn escape(out: &mut Vec<u8>, b: &[u8]) {
    out.reserve(b.len());
    let three = |from: usize| memchr::memchr3(b'\\', b'\t', b'\n', &b[from..]).map(|i| from + i);
    let two = |from: usize| memchr::memchr2(b'\r', 0, &b[from..]).map(|i| from + i);
    let (mut at, mut next3, mut next2) = (0, three(0), two(0));
    loop {
        let i = match (next3, next2) {
            (Some(x), Some(y)) => x.min(y),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => break,
        };
        out.extend_from_slice(&b[at..i]);
        out.extend_from_slice(match b[i] {
            b'\\' => b"\\\\",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            _ => b"\\0",
        });
        at = i + 1;
        if next3 == Some(i) {
            next3 = three(at);
        }
        if next2 == Some(i) {
            next2 = two(at);
        }
    }
    out.extend_from_slice(&b[at..]);
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

/// How a column's values are read from the text: as bytes, or, for an
/// integer or `DATETIME` column, as the typed value the text stands for
/// where nothing about it is left to the server's reading (see [`typed`]):
/// the server stores the value without parsing text, and it needs no
/// buffer of its own. Any other text stays bytes, converted by the server
/// as `LOAD DATA` converts it. (A `DOUBLE` stays text: checking that its
/// text is the shortest for its value cost pileup about as much as the
/// server saves storing it as a double.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Signed,
    Unsigned,
    DateTime,
}

/// `text` as the value it stands for in a column of `kind`, where the
/// text is one of the forms [`value`] writes: an integer written the only
/// way it can be (`0`, or digits without a leading zero after an optional
/// `-`, within 64 bits); a date and time `YYYY-MM-DD[ HH:MM:SS[.ffffff]]` that is
/// on the calendar (no zero date, no zero month or day).
pub fn typed(text: &[u8], kind: Kind) -> Option<Value> {
    match kind {
        Kind::Text => None,
        Kind::Signed | Kind::Unsigned => number(text, kind == Kind::Signed),
        Kind::DateTime => datetime(text),
    }
}

fn number(text: &[u8], signed: bool) -> Option<Value> {
    let (neg, digits) = match text {
        [b'-', d @ ..] if signed => (true, d),
        d => (false, d),
    };
    let canonical = match digits {
        [b'0'] => !neg,
        [b'1'..=b'9', rest @ ..] => rest.len() < 20 && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !canonical {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    match (signed, neg) {
        (false, _) => Some(Value::UInt(n)),
        (true, false) => i64::try_from(n).ok().map(Value::Int),
        (true, true) => 0i64.checked_sub_unsigned(n).map(Value::Int),
    }
}

fn datetime(t: &[u8]) -> Option<Value> {
    // "YYYY-MM-DD", "YYYY-MM-DD HH:MM:SS" or "YYYY-MM-DD HH:MM:SS.ffffff",
    // each part read at its fixed place: this runs for every value.
    const SEPARATORS: [(usize, u8); 6] = [(4, b'-'), (7, b'-'), (10, b' '), (13, b':'), (16, b':'), (19, b'.')];
    let seps = match t.len() {
        10 => 2,
        19 => 5,
        26 => 6,
        _ => return None,
    };
    if SEPARATORS[..seps].iter().any(|&(at, c)| t[at] != c) {
        return None;
    }
    let num = |from: usize, to: usize| {
        t[from..to].iter().try_fold(0u32, |n, &c| {
            let d = c.wrapping_sub(b'0');
            (d <= 9).then(|| n * 10 + u32::from(d))
        })
    };
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, i, s) = if seps >= 5 { (num(11, 13)?, num(14, 16)?, num(17, 19)?) } else { (0, 0, 0) };
    let us = if seps == 6 { num(20, 26)? } else { 0 };
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if y == 0 || !(1..=12).contains(&m) || d == 0 || d > days || h > 23 || i > 59 || s > 59 {
        return None;
    }
    // Each part fits: checked against its range above.
    Some(Value::Date(y as u16, m as u8, d as u8, h as u8, i as u8, s as u8, us))
}

/// Read the complete rows at the start of `b` (each ended by a newline)
/// as `LOAD DATA ... ESCAPED BY '\\'` reads them, a value for each of
/// `kinds` a row, into `rows`: a backslash and the byte after it are one
/// byte (`\n`, `\t`, `\r`, `\b`, `\0`, `\Z` the control byte they name, any
/// other that byte itself), a field that is exactly `\N` is NULL, and a
/// typed column's value is read as [`typed`] says. Returns how many
/// bytes the rows took (what follows is a row not complete yet); a row
/// with another number of fields is an error, at the byte it starts at.
pub fn read_rows(b: &[u8], kinds: &[Kind], rows: &mut Vec<Vec<Value>>) -> Result<usize, usize> {
    let cols = kinds.len();
    let mut at = 0;
    loop {
        let mut row = Vec::with_capacity(cols);
        let mut p = at;
        loop {
            let (begin, mut field, mut from) = (p, None::<Vec<u8>>, p);
            let end = loop {
                let Some(i) = memchr::memchr3(b'\t', b'\n', b'\\', &b[p..]) else { return Ok(at) };
                let q = p + i;
                if b[q] != b'\\' {
                    if let Some(f) = field.as_mut() {
                        f.extend_from_slice(&b[from..q]);
                    }
                    p = q + 1;
                    break b[q];
                }
                let Some(&e) = b.get(q + 1) else { return Ok(at) };
                let f = field.get_or_insert_with(Vec::new);
                f.extend_from_slice(&b[from..q]);
                f.push(unescape(e));
                p = q + 2;
                from = p;
            };
            let text = &b[begin..p - 1];
            let kind = kinds.get(row.len()).copied().unwrap_or(Kind::Text);
            row.push(match field {
                _ if text == b"\\N" => Value::NULL,
                // A value with escapes is never a number.
                Some(f) => Value::Bytes(f),
                None if kind == Kind::Text => Value::Bytes(text.to_vec()),
                None => typed(text, kind).unwrap_or_else(|| Value::Bytes(text.to_vec())),
            });
            if end == b'\n' {
                break;
            }
        }
        if row.len() != cols {
            return Err(at);
        }
        rows.push(row);
        at = p;
    }
}

/// The byte an escape stands for, as `LOAD DATA` reads it.
fn unescape(e: u8) -> u8 {
    match e {
        b'n' => b'\n',
        b't' => b'\t',
        b'r' => b'\r',
        b'b' => 8,
        b'0' => 0,
        b'Z' => 26,
        e => e,
    }
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
        // FLT_MAX: its shortest text is past FLT_MAX as a double.
        assert_eq!(one(Value::Float(f32::MAX)), b"3.4028234663852886e38");
        assert_eq!(one(Value::Float(f32::MIN)), b"-3.4028234663852886e38");
        assert_eq!(one(Value::Float(f32::MIN_POSITIVE)), b"1.1754944e-38");
        assert_eq!(one(Value::Double(0.1)), b"0.1");
        assert_eq!(one(Value::Date(2024, 1, 2, 0, 0, 0, 0)), b"2024-01-02");
        assert_eq!(one(Value::Date(2024, 1, 2, 3, 4, 5, 678000)), b"2024-01-02 03:04:05.678000");
        assert_eq!(one(Value::Time(true, 1, 2, 3, 4, 0)), b"-26:03:04");
        assert_eq!(one(Value::Time(false, 0, 0, 0, 1, 5)), b"00:00:01.000005");
        assert_eq!(one(Value::Time(false, 34, 22, 59, 59, 0)), b"838:59:59");
        assert_eq!(one(Value::Date(1, 2, 3, 0, 0, 0, 1)), b"0001-02-03 00:00:00.000001");
        assert_eq!(one(Value::Double(-1.5e-300)), b"-1.5e-300");
        assert_eq!(one(Value::Double(1.0)), b"1.0");
        assert_eq!(one(Value::Int(i64::MIN)), b"-9223372036854775808");
        assert_eq!(one(Value::Bytes(b"\\\\ab\0\0".to_vec())), b"\\\\\\\\ab\\0\\0");
    }

    #[test]
    fn long_values_escape_every_special_byte_wherever_it_lies() {
        // Every special at every position of values long enough for the
        // vectorised search, against the escapes written byte by byte.
        let by_byte = |b: &[u8]| -> Vec<u8> {
            b.iter()
                .flat_map(|&c| match c {
                    b'\\' => b"\\\\".to_vec(),
                    b'\t' => b"\\t".to_vec(),
                    b'\n' => b"\\n".to_vec(),
                    b'\r' => b"\\r".to_vec(),
                    0 => b"\\0".to_vec(),
                    c => vec![c],
                })
                .collect()
        };
        for len in [1usize, 15, 16, 17, 31, 32, 33, 64, 100, 257] {
            for at in 0..len {
                for sp in [b'\\', b'\t', b'\n', b'\r', 0] {
                    let mut v: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                    v[at] = sp;
                    v[len - 1 - at / 2] = if sp == 0 { b'\r' } else { 0 };
                    let mut o = vec![];
                    escape(&mut o, &v);
                    assert_eq!(o, by_byte(&v), "length {len}, byte {sp} at {at}");
                }
            }
        }
    }

    #[test]
    fn a_value_dense_in_one_group_of_specials_is_escaped_in_one_pass() {
        // 4 MB with a NUL every 4 bytes and no backslash, tab or newline
        // (searching the rest of the value for the other group at each
        // escape took 78 s, and the server gave up sending the next row),
        // then the other group dense and the first absent.
        let v: Vec<u8> = [0xab, 0xcd, 0xef, 0x00].repeat(1_000_000);
        let mut o = vec![];
        escape(&mut o, &v);
        assert_eq!(o, [0xab, 0xcd, 0xef, b'\\', b'0'].repeat(1_000_000));
        let v: Vec<u8> = [b'a', b'\t'].repeat(1_000_000);
        let mut o = vec![];
        escape(&mut o, &v);
        assert_eq!(o, [b'a', b'\\', b't'].repeat(1_000_000));
    }

    #[test]
    fn a_row_is_tab_separated_and_newline_terminated() {
        let mut o = vec![];
        row(&mut o, &[Value::Int(1), Value::NULL, Value::Bytes(b"x".to_vec())]);
        assert_eq!(o, b"1\t\\N\tx\n");
    }

    #[test]
    fn rows_read_back_as_written() {
        // Every escape, NULL beside the string "\N", empty values, and a
        // row cut anywhere: what is read is what was written, and a cut
        // row waits for the rest.
        let written = vec![
            vec![Value::Bytes(b"a\tb\nc\rd\0e\\".to_vec()), Value::NULL, Value::Bytes(b"\\N".to_vec())],
            vec![Value::Bytes(vec![]), Value::Bytes(vec![0xff, b'\\', 0x80]), Value::Bytes(b"N".to_vec())],
        ];
        let mut text = vec![];
        for r in &written {
            row(&mut text, r);
        }
        let mut rows = vec![];
        assert_eq!(read_rows(&text, &[Kind::Text; 3], &mut rows), Ok(text.len()));
        assert_eq!(rows, written);
        let first = text.iter().position(|&c| c == b'\n').unwrap() + 1;
        for cut in 0..text.len() {
            let mut rows = vec![];
            let took = read_rows(&text[..cut], &[Kind::Text; 3], &mut rows).unwrap();
            assert_eq!(took, if cut >= first { first } else { 0 }, "cut at {cut}");
            assert_eq!(rows.len(), usize::from(cut >= first));
        }
        let mut rows = vec![];
        assert_eq!(read_rows(b"\\b\\Z\\x\\N1\n", &[Kind::Text], &mut rows), Ok(10));
        assert_eq!(rows, vec![vec![Value::Bytes(vec![8, 26, b'x', b'N', b'1'])]]);
    }

    #[test]
    fn a_row_with_another_number_of_fields_is_an_error_where_it_starts() {
        let mut rows = vec![];
        assert_eq!(read_rows(b"1\t2\n3\n", &[Kind::Text; 2], &mut rows), Err(4));
        assert_eq!(rows.len(), 1);
        assert_eq!(read_rows(b"1\t2\t3\n", &[Kind::Text; 2], &mut vec![]), Err(0));
    }

    #[test]
    fn a_datetime_is_read_as_one_only_in_the_form_the_dump_writes_and_on_the_calendar() {
        use Kind::DateTime;
        let t = |t: &str, k| typed(t.as_bytes(), k);
        // What `value` writes reads back to the same value.
        for v in [
            Value::Date(2024, 1, 2, 0, 0, 0, 0),
            Value::Date(2024, 2, 29, 3, 4, 5, 0),
            Value::Date(1, 1, 1, 23, 59, 59, 999999),
            Value::Date(9999, 12, 31, 0, 0, 0, 1),
        ] {
            assert_eq!(typed(&one(v.clone()), DateTime), Some(v));
        }
        assert_eq!(t("2024-01-02 00:00:00", DateTime), Some(Value::Date(2024, 1, 2, 0, 0, 0, 0)));
        // Other spellings, values off the range or the calendar: bytes.
        for d in [
            "0000-00-00",
            "0000-00-00 00:00:00",
            "2024-00-10",
            "2024-01-00",
            "2023-02-29",
            "1900-02-29",
            "2024-04-31",
            "2024-01-02 24:00:00",
            "2024-01-02 23:60:00",
            "2024-01-02T03:04:05",
            "2024-01-02 03:04:05.5",
            "2024-1-02",
            "2024-01-02 03:04",
            "+024-01-02",
        ] {
            assert_eq!(t(d, DateTime), None, "{d:?}");
        }
    }

    #[test]
    fn an_integer_columns_number_is_read_as_one_only_where_written_the_only_way_it_can_be() {
        use Kind::{Signed, Text, Unsigned};
        let n = |t: &str, k| typed(t.as_bytes(), k);
        assert_eq!(n("0", Signed), Some(Value::Int(0)));
        assert_eq!(n("-42", Signed), Some(Value::Int(-42)));
        assert_eq!(n("9223372036854775807", Signed), Some(Value::Int(i64::MAX)));
        assert_eq!(n("-9223372036854775808", Signed), Some(Value::Int(i64::MIN)));
        assert_eq!(n("18446744073709551615", Unsigned), Some(Value::UInt(u64::MAX)));
        assert_eq!(n("7", Text), None);
        // Past the type, another spelling, or not a number: the server
        // converts the text.
        for t in [
            "9223372036854775808",
            "-9223372036854775809",
            "-0",
            "007",
            "+1",
            "1.0",
            "1e3",
            " 1",
            "1 ",
            "",
            "-",
            "0x1F",
        ] {
            assert_eq!(n(t, Signed), None, "{t:?}");
        }
        for t in ["-1", "18446744073709551616", "123456789012345678901", "00"] {
            assert_eq!(n(t, Unsigned), None, "{t:?}");
        }
        // In a row: NULL stays NULL, an escaped value stays bytes, the
        // text column stays text.
        let mut rows = vec![];
        let text = b"12\t-3\t\\N\t12\n\\12\t007\t5\tx\n";
        assert_eq!(read_rows(text, &[Signed, Signed, Unsigned, Text], &mut rows), Ok(text.len()));
        let b = |t: &[u8]| Value::Bytes(t.to_vec());
        assert_eq!(
            rows,
            vec![
                vec![Value::Int(12), Value::Int(-3), Value::NULL, b(b"12")],
                vec![b(b"12"), b(b"007"), Value::UInt(5), b(b"x")],
            ]
        );
    }
}
