//! Printing events as `pileup binlog` shows them: mysqlbinlog's "# at"
//! lines with row images as JSON objects, or one JSON object per event.
//!
//! Events are written straight to the output through serde's serializer
//! from borrowed values (no JSON tree per event, no key strings copied per
//! row): building a `serde_json::Value` per row made JSON output slower
//! than mariadb-binlog on bulk inserts.

use std::io::Write;
use std::path::Path;

use crate::decoder::Event;
use crate::error::{DecodeError, ReadError};
use crate::reader::RawEvent;
use crate::value::Value;

/// How events are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrintFormat {
    /// One line per event and per row, images as JSON objects.
    Text,
    /// One JSON object per event.
    Json,
}

/// Print one event of file `path` (whose name, `file_name`, the output
/// shows) as decoded (or not). Returns the problem to report, if the event
/// or one of its rows does not decode (the event is printed all the same,
/// with its `error`).
pub fn print_event(
    out: &mut dyn Write,
    format: PrintFormat,
    path: &Path,
    file_name: &str,
    ev: &RawEvent,
    decoded: &Result<Event, DecodeError>,
) -> std::io::Result<Option<ReadError>> {
    // An event that does not decode is printed with its header and the error.
    let undecoded = Event::Other(ev.header.type_code);
    let (mut p, failed) = printed(file_name, ev, decoded.as_ref().unwrap_or(&undecoded));
    let failed = failed.or_else(|| decoded.as_ref().err().cloned());
    let problem = failed.map(|e| crate::reader::at(ev, path, e));
    if let (Some(err), true) = (&problem, decoded.is_err()) {
        p.fields.push(("error", Field::Str(err.to_string().into())));
    }
    match format {
        PrintFormat::Json => p.write_json(out)?,
        PrintFormat::Text => p.write_text(out)?,
    }
    Ok(problem)
}

/// One field of an event's output, borrowed where it can be.
enum Field<'a> {
    Str(std::borrow::Cow<'a, str>),
    U(u64),
    B(bool),
    Strs(Vec<String>),
    Codes(Vec<u8>),
}

impl serde::Serialize for Field<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Field::Str(v) => s.serialize_str(v),
            Field::U(v) => s.serialize_u64(*v),
            Field::B(v) => s.serialize_bool(*v),
            Field::Strs(v) => v.serialize(s),
            Field::Codes(v) => v.serialize(s),
        }
    }
}

/// A column value as JSON: numbers as numbers, text as strings, bytes that
/// are not UTF-8 as `{"hex": ...}`, temporal and decimal values as the
/// server prints them.
struct Val<'v, 'a>(&'v Value<'a>);

impl serde::Serialize for Val<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match *self.0 {
            Value::Null => s.serialize_unit(),
            Value::Int(i, _) => s.serialize_i64(i),
            Value::UInt(u) => s.serialize_u64(u),
            Value::Float(f) if f.is_finite() => s.serialize_f64(f as f64),
            Value::Double(f) if f.is_finite() => s.serialize_f64(f),
            Value::Float(_) | Value::Double(_) => s.serialize_unit(),
            Value::Bytes(b) | Value::Json(b) => match std::str::from_utf8(b) {
                Ok(t) => s.serialize_str(t),
                Err(_) => {
                    let mut m = s.serialize_map(Some(1))?;
                    m.serialize_entry("hex", &b.iter().map(|x| format!("{x:02x}")).collect::<String>())?;
                    m.end()
                }
            },
            Value::Year(y) => s.serialize_u16(y),
            Value::Bit(b) | Value::Set(b) => s.serialize_u64(b),
            Value::Enum(e) => s.serialize_u16(e),
            ref other => s.collect_str(other),
        }
    }
}

/// A row image as a JSON object, columns by name (`@N` when the table map
/// carries no names), absent columns left out.
struct Image<'v, 'a> {
    cols: &'v [Option<Value<'a>>],
    names: &'v [String],
}

impl serde::Serialize for Image<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (i, v) in self.cols.iter().enumerate() {
            if let Some(v) = v {
                match self.names.get(i) {
                    Some(n) => m.serialize_entry(n, &Val(v))?,
                    None => m.serialize_entry(&format!("@{}", i + 1), &Val(v))?,
                }
            }
        }
        m.end()
    }
}

/// Decoded row images of one rows event: (before, after), either empty.
type Images<'a> = Vec<(Vec<Option<Value<'a>>>, Vec<Option<Value<'a>>>)>;

struct RowsOut<'v, 'a> {
    rows: &'v Images<'a>,
    names: &'v [String],
}

impl serde::Serialize for RowsOut<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        let mut seq = s.serialize_seq(Some(self.rows.len()))?;
        struct Row<'r, 'v, 'a>(&'r (Vec<Option<Value<'a>>>, Vec<Option<Value<'a>>>), &'v [String]);
        impl serde::Serialize for Row<'_, '_, '_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(None)?;
                if !self.0 .0.is_empty() {
                    m.serialize_entry("before", &Image { cols: &self.0 .0, names: self.1 })?;
                }
                if !self.0 .1.is_empty() {
                    m.serialize_entry("after", &Image { cols: &self.0 .1, names: self.1 })?;
                }
                m.end()
            }
        }
        for r in self.rows {
            seq.serialize_element(&Row(r, self.names))?;
        }
        seq.end()
    }
}

/// An event ready to print: its fields in output order and, for a rows
/// event whose table map was seen, its decoded rows.
struct Printed<'e, 'a> {
    fields: Vec<(&'static str, Field<'e>)>,
    rows: Option<(Images<'a>, &'e [String], &'static str)>,
}

/// Fields common to every event, then the type's own; rows decoded.
/// A row that does not decode is the event's `error` (and the Err, for
/// the caller to report with the file and offset).
fn printed<'e, 'a>(
    file: &'e str,
    ev: &crate::reader::RawEvent,
    e: &'e Event<'a>,
) -> (Printed<'e, 'a>, Option<crate::error::DecodeError>) {
    use std::borrow::Cow::{Borrowed, Owned};
    let h = ev.header;
    // Room for the common fields and any type's own, so no event grows it.
    let mut f: Vec<(&'static str, Field<'e>)> = Vec::with_capacity(12);
    f.extend([
        ("file", Field::Str(Borrowed(file))),
        ("offset", Field::U(ev.offset)),
        ("end", Field::U(ev.end())),
        ("type", Field::Str(Borrowed(crate::event::type_name(h.type_code)))),
        ("server_id", Field::U(h.server_id.into())),
        ("timestamp", Field::U(h.timestamp.into())),
        ("log_pos", Field::U(h.log_pos.into())),
    ]);
    let mut rows = None;
    let mut err = None;
    match e {
        Event::FormatDescription(x) => {
            f.push(("server_version", Field::Str(Borrowed(&x.server_version))));
            f.push(("checksum", Field::Str(Owned(format!("{:?}", x.checksum).to_lowercase()))));
        }
        Event::Rotate { position, next } => {
            f.push(("next", Field::Str(Borrowed(next))));
            f.push(("position", Field::U(*position)));
        }
        Event::Query(q) => {
            f.push(("db", Field::Str(String::from_utf8_lossy(q.db))));
            f.push(("sql", Field::Str(String::from_utf8_lossy(&q.sql))));
            f.push(("thread_id", Field::U(q.thread_id.into())));
            f.push(("error_code", Field::U(q.error_code.into())));
        }
        Event::Xid(x) => f.push(("xid", Field::U(*x))),
        Event::MariaGtid(g) => {
            f.push(("gtid", Field::Str(Owned(format!("{}-{}-{}", g.domain_id, h.server_id, g.seq_no)))));
            f.push(("standalone", Field::B(g.standalone())));
        }
        Event::MariaGtidList(l) => {
            f.push(("gtids", Field::Strs(l.iter().map(|(d, s, n)| format!("{d}-{s}-{n}")).collect())))
        }
        Event::MysqlGtid { uuid, gno } => f.push(("gtid", Field::Str(Owned(format!("{uuid}:{gno}"))))),
        Event::TableMap(t) => {
            f.push(("table_id", Field::U(t.table_id)));
            f.push(("table", Field::Str(Owned(format!("{}.{}", t.schema, t.table)))));
            f.push(("column_types", Field::Codes(t.columns.iter().map(|c| c.code).collect())));
        }
        Event::Rows(r, tm) => {
            f.push(("table_id", Field::U(r.table_id)));
            let kind = r.kind.name();
            f.push(("kind", Field::Str(Borrowed(kind))));
            match tm {
                None => f.push((
                    "error",
                    Field::Str(Borrowed(
                        "no table map for this table id before it (file read from the middle of a transaction?)",
                    )),
                )),
                Some(tm) => {
                    f.push(("table", Field::Str(Owned(format!("{}.{}", tm.schema, tm.table)))));
                    let mut imgs: Images = vec![];
                    let mut it = r.iter(tm);
                    loop {
                        let (mut b, mut a) = (vec![], vec![]);
                        match it.next_into(&mut b, &mut a) {
                            Ok(true) => imgs.push((b, a)),
                            Ok(false) => break,
                            Err(x) => {
                                f.push((
                                    "error",
                                    Field::Str(Owned(format!("row {} does not decode: {x}", imgs.len() + 1))),
                                ));
                                err = Some(x);
                                break;
                            }
                        }
                    }
                    rows = Some((imgs, &tm.column_names[..], kind));
                }
            }
        }
        Event::Annotate(s) => f.push(("sql", Field::Str(String::from_utf8_lossy(s)))),
        Event::BinlogCheckpoint(x) => f.push(("checkpoint", Field::Str(Borrowed(x)))),
        Event::Payload(p) => f.push(("payload_bytes", Field::U(p.len() as u64))),
        Event::Stop | Event::Heartbeat | Event::Other(_) => {}
    }
    (Printed { fields: f, rows }, err)
}

impl Printed<'_, '_> {
    /// One JSON object per event, on one line.
    /// The object is built in a buffer of this thread's and written in one
    /// piece: the serializer writes each token on its own, which through
    /// `dyn Write` is a call each.
    pub(crate) fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        use serde::ser::{SerializeMap, Serializer};
        thread_local!(static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
        LINE.with_borrow_mut(|line| {
            line.clear();
            let mut ser = serde_json::Serializer::new(&mut *line);
            let mut m = ser.serialize_map(None)?;
            m.serialize_entry("schema_version", &pileup_output::SCHEMA_VERSION)?;
            for (k, v) in &self.fields {
                m.serialize_entry(k, v)?;
            }
            if let Some((rows, names, _)) = &self.rows {
                m.serialize_entry("rows", &RowsOut { rows, names })?;
            }
            m.end()?;
            line.push(b'\n');
            let r = out.write_all(line);
            // A huge event's buffer is not kept.
            if line.capacity() > 1 << 20 {
                *line = Vec::new();
            }
            r
        })
    }

    /// mysqlbinlog's "# at" line with the fields that say what the event
    /// is, then a line per row with its images as JSON objects.
    pub(crate) fn write_text(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let get = |k: &str| self.fields.iter().find(|(n, _)| *n == k).map(|(_, v)| v);
        let show = |v: Option<&Field>| match v {
            Some(Field::Str(s)) => s.to_string(),
            Some(Field::U(u)) => u.to_string(),
            Some(other) => serde_json::to_string(other).unwrap_or_default(),
            None => "null".into(),
        };
        write!(
            out,
            "# at {} {} server {} end_log_pos {}",
            show(get("offset")),
            show(get("type")),
            show(get("server_id")),
            show(get("log_pos"))
        )?;
        for k in ["gtid", "db", "sql", "xid", "table", "next", "position", "server_version", "checkpoint", "error"] {
            if let Some(v) = get(k) {
                let shown = show(Some(v));
                if !(k == "db" && shown.is_empty()) {
                    write!(out, "  {k}: {shown}")?;
                }
            }
        }
        if let Some((rows, names, kind)) = &self.rows {
            let kind = kind.to_uppercase();
            for (b, a) in rows {
                write!(out, "\n  {kind}")?;
                for (side, img) in [("before", b), ("after", a)] {
                    if !img.is_empty() {
                        write!(out, " {side} ")?;
                        serde_json::to_writer(&mut *out, &Image { cols: img, names })?;
                    }
                }
            }
        }
        out.write_all(b"\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_images_as_json() {
        let j = |v: Value| serde_json::to_string(&Val(&v)).unwrap();
        assert_eq!(j(Value::Int(-5, 4)), "-5");
        assert_eq!(j(Value::UInt(u64::MAX)), "18446744073709551615");
        assert_eq!(j(Value::Double(f64::NAN)), "null", "JSON has no NaN");
        assert_eq!(j(Value::Bytes(b"a\"b")), r#""a\"b""#);
        assert_eq!(j(Value::Bytes(&[0xff, 0x00])), r#"{"hex":"ff00"}"#, "bytes that are not UTF-8");
        assert_eq!(j(Value::Date { year: 2026, month: 11, day: 23 }), r#""2026-11-23""#);
        assert_eq!(j(Value::Null), "null");
        let cols = [Some(Value::Int(1, 4)), None, Some(Value::Bytes(b"x"))];
        let names = ["id".to_string()];
        // Named where the table map has names, @N (1-based) where it has not, absent columns left out.
        assert_eq!(serde_json::to_string(&Image { cols: &cols, names: &names }).unwrap(), r#"{"id":1,"@3":"x"}"#);
        let rows: Images = vec![(vec![Some(Value::Int(1, 4))], vec![]), (vec![], vec![Some(Value::Int(2, 4))])];
        assert_eq!(
            serde_json::to_string(&RowsOut { rows: &rows, names: &names }).unwrap(),
            r#"[{"before":{"id":1}},{"after":{"id":2}}]"#
        );
    }
}
