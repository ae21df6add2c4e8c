//! Column values in row images: the binary row format of MySQL and MariaDB,
//! driven by the column types and metadata of the TABLE_MAP event.
//!
//! Decoding is zero-copy: strings, blobs, JSON and decimals borrow from the
//! event buffer, so a row costs no allocation. Integers whose signedness the
//! table map does not say are decoded as signed and keep their width, so a
//! caller that knows the column is unsigned can reinterpret them
//! ([`Value::as_u64`]).

use std::fmt;

use crate::error::DecodeError;

/// Column type codes (`enum_field_types`).
pub mod ty {
    pub const DECIMAL: u8 = 0;
    pub const TINY: u8 = 1;
    pub const SHORT: u8 = 2;
    pub const LONG: u8 = 3;
    pub const FLOAT: u8 = 4;
    pub const DOUBLE: u8 = 5;
    pub const NULL: u8 = 6;
    pub const TIMESTAMP: u8 = 7;
    pub const LONGLONG: u8 = 8;
    pub const INT24: u8 = 9;
    pub const DATE: u8 = 10;
    pub const TIME: u8 = 11;
    pub const DATETIME: u8 = 12;
    pub const YEAR: u8 = 13;
    pub const NEWDATE: u8 = 14;
    pub const VARCHAR: u8 = 15;
    pub const BIT: u8 = 16;
    pub const TIMESTAMP2: u8 = 17;
    pub const DATETIME2: u8 = 18;
    pub const TIME2: u8 = 19;
    pub const JSON: u8 = 245;
    pub const NEWDECIMAL: u8 = 246;
    pub const ENUM: u8 = 247;
    pub const SET: u8 = 248;
    pub const TINY_BLOB: u8 = 249;
    pub const MEDIUM_BLOB: u8 = 250;
    pub const LONG_BLOB: u8 = 251;
    pub const BLOB: u8 = 252;
    pub const VAR_STRING: u8 = 253;
    pub const STRING: u8 = 254;
    pub const GEOMETRY: u8 = 255;
}

/// One column's type as the table map describes it: the type code and its
/// metadata (meaning depends on the type: lengths, precision, fsp, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnType {
    pub code: u8,
    pub meta: u16,
}

/// How many metadata bytes a type carries in TABLE_MAP.
pub fn meta_len(code: u8) -> usize {
    match code {
        ty::FLOAT
        | ty::DOUBLE
        | ty::BLOB
        | ty::TINY_BLOB
        | ty::MEDIUM_BLOB
        | ty::LONG_BLOB
        | ty::GEOMETRY
        | ty::JSON => 1,
        ty::TIMESTAMP2 | ty::DATETIME2 | ty::TIME2 => 1,
        ty::VARCHAR | ty::VAR_STRING | ty::BIT | ty::NEWDECIMAL | ty::STRING | ty::ENUM | ty::SET => 2,
        _ => 0,
    }
}

/// Parse TABLE_MAP's metadata block into one [`ColumnType`] per column.
pub fn parse_meta(types: &[u8], meta: &[u8]) -> Result<Vec<ColumnType>, DecodeError> {
    let mut out = Vec::with_capacity(types.len());
    let mut p = 0usize;
    for &code in types {
        let n = meta_len(code);
        let b = meta.get(p..p + n).ok_or(DecodeError::Short("table map metadata"))?;
        let m = match (code, n) {
            (_, 0) => 0,
            (_, 1) => b[0] as u16,
            // STRING/ENUM/SET: real type first, then the length byte.
            (ty::STRING | ty::ENUM | ty::SET, _) => ((b[0] as u16) << 8) | b[1] as u16,
            // NEWDECIMAL: precision then scale; BIT: bits then bytes; VARCHAR: max length (little-endian).
            (ty::NEWDECIMAL, _) => ((b[0] as u16) << 8) | b[1] as u16,
            (ty::BIT, _) => ((b[1] as u16) << 8) | b[0] as u16,
            _ => u16::from_le_bytes([b[0], b[1]]),
        };
        p += n;
        // A STRING column may really be an ENUM or SET: the real type is in the metadata.
        let code = if code == ty::STRING && m >= 256 {
            let real = (m >> 8) as u8;
            if real == ty::ENUM || real == ty::SET {
                real
            } else {
                code
            }
        } else {
            code
        };
        out.push(ColumnType { code, meta: m });
    }
    Ok(out)
}

/// A decoded column value, borrowing from the event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Null,
    /// An integer column of `bytes` width, read as signed.
    Int(i64, u8),
    /// An integer the table map says is unsigned.
    UInt(u64),
    Float(f32),
    Double(f64),
    Decimal(Decimal<'a>),
    /// CHAR, VARCHAR, BINARY, BLOB, TEXT, GEOMETRY: bytes as stored.
    Bytes(&'a [u8]),
    /// MySQL's binary JSON (MariaDB stores JSON as text, in `Bytes`).
    Json(&'a [u8]),
    Year(u16),
    Date {
        year: u16,
        month: u8,
        day: u8,
    },
    /// `fsp`: fractional-second digits of the column (shown as the server shows them).
    Time {
        negative: bool,
        hours: u32,
        minutes: u8,
        seconds: u8,
        micros: u32,
        fsp: u8,
    },
    DateTime {
        year: u16,
        month: u8,
        day: u8,
        hour: u8,
        minute: u8,
        second: u8,
        micros: u32,
        fsp: u8,
    },
    /// Seconds since the epoch, UTC.
    Timestamp {
        secs: u32,
        micros: u32,
        fsp: u8,
    },
    Bit(u64),
    /// 1-based index into the ENUM's values (0: the empty error value).
    Enum(u16),
    /// Bitmap of the SET's members.
    Set(u64),
}

impl Value<'_> {
    /// The value as an unsigned integer (for an integer column known to be unsigned).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Int(v, bytes) => {
                Some(if bytes >= 8 { v as u64 } else { (v as u64) & ((1u64 << (8 * bytes as u32)) - 1) })
            }
            Value::UInt(v) => Some(v),
            Value::Year(y) => Some(y as u64),
            Value::Bit(b) | Value::Set(b) => Some(b),
            Value::Enum(e) => Some(e as u64),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int(v, _) => Some(v),
            Value::UInt(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// A DECIMAL in MySQL's binary format; formatted on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimal<'a> {
    pub raw: &'a [u8],
    pub precision: u8,
    pub scale: u8,
}

const DIG_PER_DEC: usize = 9;
const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// Bytes a DECIMAL(precision, scale) takes in a row image.
pub fn decimal_len(precision: u8, scale: u8) -> usize {
    let (p, s) = (precision as usize, scale as usize);
    let int = p.saturating_sub(s);
    (int / DIG_PER_DEC) * 4 + DIG2BYTES[int % DIG_PER_DEC] + (s / DIG_PER_DEC) * 4 + DIG2BYTES[s % DIG_PER_DEC]
}

impl fmt::Display for Decimal<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Binary DECIMAL: groups of 9 digits in 4 bytes, big-endian, the
        // leftover digits of each side in fewer bytes; the sign is the
        // inverted top bit, and negative numbers have every bit flipped.
        let (p, s) = (self.precision as usize, self.scale as usize);
        let int = p.saturating_sub(s);
        let mut b = self.raw.to_vec();
        if b.is_empty() {
            return f.write_str("0");
        }
        let negative = b[0] & 0x80 == 0;
        b[0] ^= 0x80;
        if negative {
            for x in &mut b {
                *x = !*x;
            }
        }
        let mut pos = 0usize;
        let mut take = |n: usize| -> u32 {
            let mut v = 0u32;
            for i in 0..n {
                v = (v << 8) | b.get(pos + i).copied().unwrap_or(0) as u32;
            }
            pos += n;
            v
        };
        let mut digits = String::new();
        let lead = int % DIG_PER_DEC;
        if lead > 0 {
            digits.push_str(&take(DIG2BYTES[lead]).to_string());
        }
        for _ in 0..int / DIG_PER_DEC {
            let g = take(4);
            if digits.is_empty() {
                digits.push_str(&g.to_string());
            } else {
                digits.push_str(&format!("{g:09}"));
            }
        }
        let digits = digits.trim_start_matches('0');
        let mut out = String::new();
        if negative {
            out.push('-');
        }
        out.push_str(if digits.is_empty() { "0" } else { digits });
        if s > 0 {
            out.push('.');
            for _ in 0..s / DIG_PER_DEC {
                out.push_str(&format!("{:09}", take(4)));
            }
            let trail = s % DIG_PER_DEC;
            if trail > 0 {
                let v = take(DIG2BYTES[trail]);
                out.push_str(&format!("{v:0trail$}"));
            }
        }
        f.write_str(&out)
    }
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, &x| (a << 8) | x as u64)
}

fn le(b: &[u8]) -> u64 {
    b.iter().rev().fold(0u64, |a, &x| (a << 8) | x as u64)
}

fn sign_extend(v: u64, bytes: usize) -> i64 {
    let shift = 64 - 8 * bytes as u32;
    ((v << shift) as i64) >> shift
}

/// Fractional seconds of TIME2/DATETIME2/TIMESTAMP2: (bytes, microseconds).
fn frac(buf: &[u8], fsp: u16) -> Result<(usize, u32), DecodeError> {
    let n = (fsp as usize).div_ceil(2);
    let b = buf.get(..n).ok_or(DecodeError::Short("fractional seconds"))?;
    let v = be(b) as u32;
    let us = match n {
        0 => 0,
        1 => v * 10_000,
        2 => v * 100,
        _ => v,
    };
    Ok((n, us))
}

/// Decode one non-NULL value of type `t` at the start of `buf`; returns the
/// value and the bytes it took.
pub fn decode<'a>(t: ColumnType, unsigned: bool, buf: &'a [u8]) -> Result<(Value<'a>, usize), DecodeError> {
    let need = |n: usize| buf.get(..n).ok_or(DecodeError::Short("column value"));
    let int = |n: usize| -> Result<(Value<'a>, usize), DecodeError> {
        let v = le(need(n)?);
        Ok((if unsigned { Value::UInt(v) } else { Value::Int(sign_extend(v, n), n as u8) }, n))
    };
    match t.code {
        ty::TINY => int(1),
        ty::SHORT => int(2),
        ty::INT24 => int(3),
        ty::LONG => int(4),
        ty::LONGLONG => int(8),
        ty::FLOAT => Ok((Value::Float(f32::from_le_bytes(need(4)?.try_into().unwrap())), 4)),
        ty::DOUBLE => Ok((Value::Double(f64::from_le_bytes(need(8)?.try_into().unwrap())), 8)),
        ty::NULL => Ok((Value::Null, 0)),
        ty::YEAR => {
            let y = need(1)?[0] as u16;
            Ok((Value::Year(if y == 0 { 0 } else { 1900 + y }), 1))
        }
        ty::DATE | ty::NEWDATE => {
            let v = le(need(3)?) as u32;
            Ok((Value::Date { year: (v >> 9) as u16, month: ((v >> 5) & 15) as u8, day: (v & 31) as u8 }, 3))
        }
        ty::TIME => old_time(need(3)?),
        ty::DATETIME => old_datetime(need(8)?),
        ty::TIMESTAMP => Ok((Value::Timestamp { secs: le(need(4)?) as u32, micros: 0, fsp: 0 }, 4)),
        ty::TIMESTAMP2 => {
            let secs = be(need(4)?) as u32;
            let (n, us) = frac(&buf[4..], t.meta)?;
            Ok((Value::Timestamp { secs, micros: us, fsp: t.meta as u8 }, 4 + n))
        }
        ty::DATETIME2 => datetime2(t.meta, buf),
        ty::TIME2 => time2(t.meta, buf),
        ty::NEWDECIMAL => {
            let (precision, scale) = ((t.meta >> 8) as u8, (t.meta & 0xff) as u8);
            let n = decimal_len(precision, scale);
            Ok((Value::Decimal(Decimal { raw: need(n)?, precision, scale }), n))
        }
        ty::VARCHAR | ty::VAR_STRING => {
            let lb = if t.meta < 256 { 1 } else { 2 };
            let len = le(need(lb)?) as usize;
            let s = buf.get(lb..lb + len).ok_or(DecodeError::Short("VARCHAR value"))?;
            Ok((Value::Bytes(s), lb + len))
        }
        ty::STRING => {
            // Max length spread over the metadata: high bits hide in the
            // real-type byte, XOR-ed.
            let max = ((((t.meta >> 4) & 0x300) ^ 0x300) + (t.meta & 0xff)) as usize;
            let lb = if max < 256 { 1 } else { 2 };
            let len = le(need(lb)?) as usize;
            let s = buf.get(lb..lb + len).ok_or(DecodeError::Short("CHAR value"))?;
            Ok((Value::Bytes(s), lb + len))
        }
        ty::ENUM => {
            let n = (t.meta & 0xff) as usize;
            Ok((Value::Enum(le(need(n)?) as u16), n))
        }
        ty::SET => {
            let n = (t.meta & 0xff) as usize;
            Ok((Value::Set(le(need(n)?)), n))
        }
        ty::BIT => {
            let n = (t.meta >> 8) as usize + ((t.meta & 0xff) as usize).div_ceil(8);
            Ok((Value::Bit(be(need(n)?)), n))
        }
        ty::BLOB | ty::TINY_BLOB | ty::MEDIUM_BLOB | ty::LONG_BLOB | ty::GEOMETRY | ty::JSON => {
            let lb = t.meta as usize;
            if !(1..=4).contains(&lb) {
                return Err(DecodeError::Bad(format!("blob length width {lb}")));
            }
            let len = le(need(lb)?) as usize;
            let s = buf.get(lb..lb + len).ok_or(DecodeError::Short("BLOB value"))?;
            Ok((if t.code == ty::JSON { Value::Json(s) } else { Value::Bytes(s) }, lb + len))
        }
        other => Err(DecodeError::Bad(format!("column type {other} is not supported"))),
    }
}

/// Old TIME: HHMMSS as a signed 3-byte integer.
fn old_time<'a>(b: &[u8]) -> Result<(Value<'a>, usize), DecodeError> {
    let v = sign_extend(le(b), 3);
    let a = v.unsigned_abs();
    let (hours, minutes, seconds) = ((a / 10000) as u32, (a / 100 % 100) as u8, (a % 100) as u8);
    Ok((Value::Time { negative: v < 0, hours, minutes, seconds, micros: 0, fsp: 0 }, 3))
}

/// Old DATETIME: YYYYMMDDhhmmss as an 8-byte integer.
fn old_datetime<'a>(b: &[u8]) -> Result<(Value<'a>, usize), DecodeError> {
    let v = le(b);
    let (d, t) = (v / 1_000_000, v % 1_000_000);
    Ok((
        Value::DateTime {
            year: (d / 10000) as u16,
            month: (d / 100 % 100) as u8,
            day: (d % 100) as u8,
            hour: (t / 10000) as u8,
            minute: (t / 100 % 100) as u8,
            second: (t % 100) as u8,
            micros: 0,
            fsp: 0,
        },
        8,
    ))
}

/// DATETIME2: 40 bits big-endian, sign(1) year*13+month(17) day(5)
/// hour(5) minute(6) second(6), then the fraction.
fn datetime2(meta: u16, buf: &[u8]) -> Result<(Value<'_>, usize), DecodeError> {
    let v = be(buf.get(..5).ok_or(DecodeError::Short("column value"))?).wrapping_sub(0x80_0000_0000);
    let (n, us) = frac(&buf[5..], meta)?;
    let ymd = v >> 17;
    let ym = ymd >> 5;
    let hms = v & ((1 << 17) - 1);
    Ok((
        Value::DateTime {
            year: (ym / 13) as u16,
            month: (ym % 13) as u8,
            day: (ymd & 31) as u8,
            hour: (hms >> 12) as u8,
            minute: ((hms >> 6) & 63) as u8,
            second: (hms & 63) as u8,
            micros: us,
            fsp: meta as u8,
        },
        5 + n,
    ))
}

/// TIME2: 24 bits big-endian with an offset (sign(1) hours(10) minutes(6)
/// seconds(6)), then the fraction; negative values are stored as the
/// offset minus the magnitude, fraction included.
fn time2(meta: u16, buf: &[u8]) -> Result<(Value<'_>, usize), DecodeError> {
    let n = (meta as usize).div_ceil(2);
    let b = buf.get(..3 + n).ok_or(DecodeError::Short("column value"))?;
    let int = be(&b[..3]) as i64 - 0x80_0000;
    let fr = be(&b[3..]) as i64;
    let (mut whole, mut micros) = (int, 0i64);
    if n > 0 {
        let (scale, span) = match n {
            1 => (10_000, 0x100),
            2 => (100, 0x10000),
            _ => (1, 0x100_0000),
        };
        let mut fr = fr;
        if whole < 0 && fr != 0 {
            // The fraction borrowed one from the whole part.
            whole += 1;
            fr -= span;
        }
        micros = fr * scale;
    }
    let negative = whole < 0 || (whole == 0 && micros < 0);
    let a = whole.unsigned_abs();
    Ok((
        Value::Time {
            negative,
            hours: ((a >> 12) & 0x3ff) as u32,
            minutes: ((a >> 6) & 63) as u8,
            seconds: (a & 63) as u8,
            micros: micros.unsigned_abs() as u32,
            fsp: meta as u8,
        },
        3 + n,
    ))
}

/// `.ddd` with as many digits as the column's fractional-second precision.
fn frac_digits(f: &mut fmt::Formatter<'_>, micros: u32, fsp: u8) -> fmt::Result {
    if fsp == 0 {
        return Ok(());
    }
    let fsp = fsp.min(6) as u32;
    let v = micros / 10u32.pow(6 - fsp);
    write!(f, ".{v:0w$}", w = fsp as usize)
}

impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Value::Null => f.write_str("NULL"),
            Value::Int(v, _) => write!(f, "{v}"),
            Value::UInt(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Double(v) => write!(f, "{v}"),
            Value::Decimal(d) => write!(f, "{d}"),
            Value::Bytes(b) | Value::Json(b) => f.write_str(&String::from_utf8_lossy(b)),
            Value::Year(y) => write!(f, "{y:04}"),
            Value::Date { year, month, day } => write!(f, "{year:04}-{month:02}-{day:02}"),
            Value::Time { negative, hours, minutes, seconds, micros, fsp } => {
                write!(f, "{}{hours:02}:{minutes:02}:{seconds:02}", if negative { "-" } else { "" })?;
                frac_digits(f, micros, fsp)
            }
            Value::DateTime { year, month, day, hour, minute, second, micros, fsp } => {
                write!(f, "{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}")?;
                frac_digits(f, micros, fsp)
            }
            Value::Timestamp { secs, micros, fsp } => {
                write!(f, "{secs}")?;
                frac_digits(f, micros, fsp)
            }
            Value::Bit(b) => write!(f, "b'{b:b}'"),
            Value::Enum(e) => write!(f, "{e}"),
            Value::Set(s) => write!(f, "{s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(raw: &[u8], p: u8, s: u8) -> String {
        Decimal { raw, precision: p, scale: s }.to_string()
    }

    #[test]
    fn decimals() {
        // DECIMAL(10,2) 1234.56 and -1234.56 (layout: 8 int digits = 4 bytes, 2 frac digits = 1 byte).
        assert_eq!(decimal_len(10, 2), 5);
        assert_eq!(dec(&[0x80, 0x00, 0x04, 0xd2, 0x38], 10, 2), "1234.56");
        assert_eq!(dec(&[0x7f, 0xff, 0xfb, 0x2d, 0xc7], 10, 2), "-1234.56");
        assert_eq!(dec(&[0x80, 0x00, 0x00, 0x00, 0x00], 10, 2), "0.00");
        // DECIMAL(5,0) 12345: 5 digits = 3 bytes.
        assert_eq!(decimal_len(5, 0), 3);
        assert_eq!(dec(&[0x80, 0x30, 0x39], 5, 0), "12345");
    }

    #[test]
    fn integers_keep_width_for_unsigned_reading() {
        let t = ColumnType { code: ty::TINY, meta: 0 };
        let (v, n) = decode(t, false, &[0xff]).unwrap();
        assert_eq!((v, n), (Value::Int(-1, 1), 1));
        assert_eq!(v.as_u64(), Some(255));
        let (v, _) = decode(ColumnType { code: ty::INT24, meta: 0 }, false, &[0xfe, 0xff, 0xff]).unwrap();
        assert_eq!(v.as_i64(), Some(-2));
        assert_eq!(
            decode(ColumnType { code: ty::LONG, meta: 0 }, true, &[1, 0, 0, 0x80]).unwrap().0,
            Value::UInt(0x8000_0001)
        );
    }

    #[test]
    fn strings_and_lengths() {
        let t = ColumnType { code: ty::VARCHAR, meta: 300 };
        let (v, n) = decode(t, false, &[3, 0, b'a', b'b', b'c', 9]).unwrap();
        assert_eq!((v, n), (Value::Bytes(b"abc"), 5));
        // CHAR(60) utf8mb4 = 240 bytes: one length byte.
        let t = parse_meta(&[ty::STRING], &[0xfe, 240]).unwrap()[0];
        assert_eq!(decode(t, false, &[2, b'h', b'i']).unwrap(), (Value::Bytes(b"hi"), 3));
        // CHAR(255) utf8mb4 = 1020 bytes: the high bits ride in the type byte.
        let t = parse_meta(&[ty::STRING], &[0xce, 0xfc]).unwrap()[0];
        assert_eq!(decode(t, false, &[1, 0, b'x']).unwrap(), (Value::Bytes(b"x"), 3));
        let t = parse_meta(&[ty::STRING], &[ty::ENUM, 1]).unwrap()[0];
        assert_eq!(t.code, ty::ENUM);
        assert_eq!(decode(t, false, &[2]).unwrap(), (Value::Enum(2), 1));
        assert!(
            decode(ColumnType { code: ty::BLOB, meta: 2 }, false, &[5, 0, 1]).is_err(),
            "truncated blob is an error"
        );
    }

    #[test]
    fn temporal() {
        // DATETIME2(0) 2024-02-29 13:45:07
        let ym = 2024u64 * 13 + 2;
        let v = (1u64 << 39) | (ym << 22) | (29 << 17) | (13 << 12) | (45 << 6) | 7;
        let b = v.to_be_bytes();
        let (d, n) = decode(ColumnType { code: ty::DATETIME2, meta: 0 }, false, &b[3..]).unwrap();
        assert_eq!(n, 5);
        assert_eq!(d.to_string(), "2024-02-29 13:45:07");
        // TIME2(0) -01:02:03 and 10:00:00
        let t = ColumnType { code: ty::TIME2, meta: 0 };
        let enc = |secs: i64| ((0x80_0000i64 + secs) as u32).to_be_bytes();
        let m = (1 << 12) | (2 << 6) | 3;
        assert_eq!(decode(t, false, &enc(-m)[1..]).unwrap().0.to_string(), "-01:02:03");
        assert_eq!(decode(t, false, &enc(10 << 12)[1..]).unwrap().0.to_string(), "10:00:00");
        // TIME2(6) -00:00:01.5 is stored as offset - 1.5 s.
        let whole = 0x80_0000i64 - 2;
        let fr = 0x100_0000i64 - 500_000;
        let mut b = ((whole as u32).to_be_bytes()[1..]).to_vec();
        b.extend_from_slice(&(fr as u32).to_be_bytes()[1..]);
        assert_eq!(
            decode(ColumnType { code: ty::TIME2, meta: 6 }, false, &b).unwrap().0.to_string(),
            "-00:00:01.500000"
        );
        // DATE 2023-12-31
        let d = (2023u32 << 9) | (12 << 5) | 31;
        assert_eq!(
            decode(ColumnType { code: ty::DATE, meta: 0 }, false, &d.to_le_bytes()[..3]).unwrap().0.to_string(),
            "2023-12-31"
        );
        // TIMESTAMP2(3) with .123
        let (v, n) = decode(ColumnType { code: ty::TIMESTAMP2, meta: 3 }, false, &[0, 0, 0, 10, 0x04, 0xce]).unwrap();
        assert_eq!((v, n), (Value::Timestamp { secs: 10, micros: 123_000, fsp: 3 }, 6));
        assert_eq!(v.to_string(), "10.123");
    }
}
