//! `pileup binlog`: print the events of binlog and relay log files, row
//! images decoded (a mysqlbinlog that speaks JSON).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use pileup_binlog::value::Value;
use pileup_binlog::{reader, Decoder, Event, FileReader, ReadError};
use serde_json::{json, Map};

#[derive(clap::Args)]
#[command(after_long_help = "Examples:\n  pileup binlog /var/lib/mysql/mariadb-bin.000042\n  pileup binlog --format json relay-bin.000007 | jq 'select(.type == \"Update_rows\")'\n  pileup binlog --follow --start-position 1234 relay-bin.000007\n\nRow images hold your data: treat the output like the files themselves.")]
pub struct BinlogArgs {
    /// Binlog or relay log files, read in this order.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// text: one line per event and per row (images as JSON objects);
    /// json: one JSON object per event.
    #[arg(long, value_enum, default_value = "text")]
    pub format: OutFormat,
    /// Start at this offset in the first file (an event boundary, e.g. Relay_Log_Pos).
    #[arg(long, value_name = "OFFSET")]
    pub start_position: Option<u64>,
    /// Keep reading as the server writes, and on into the next numbered file (like tail -f).
    #[arg(long)]
    pub follow: bool,
    /// Do not verify event checksums.
    #[arg(long)]
    pub no_verify: bool,
    /// Print no events: decode every event and row, then a summary (events
    /// by type, rows changed per table, decode speed). JSON with --format json.
    #[arg(long)]
    pub stats: bool,
}

/// Counts for `--stats`.
#[derive(Default, serde::Serialize)]
struct Stats {
    files: usize,
    bytes: u64,
    events: u64,
    row_events: u64,
    rows: u64,
    seconds: f64,
    events_per_second: f64,
    rows_per_second: f64,
    by_type: std::collections::BTreeMap<String, u64>,
    #[serde(skip)]
    by_code: Vec<u64>,
    /// table -> [inserted, updated, deleted] rows
    by_table: std::collections::BTreeMap<String, [u64; 3]>,
    #[serde(skip)]
    by_id: std::collections::HashMap<u64, (String, [u64; 3])>,
}

impl Stats {
    fn add(&mut self, ev: &pileup_binlog::RawEvent, e: &Event) -> Result<()> {
        self.events += 1;
        self.bytes += ev.bytes.len() as u64;
        if self.by_code.is_empty() {
            self.by_code = vec![0; 256];
        }
        self.by_code[ev.header.type_code as usize] += 1;
        if let Event::Rows(r, Some(tm)) = e {
            self.row_events += 1;
            let mut it = r.iter(tm);
            let (mut b, mut a) = (Vec::with_capacity(tm.columns.len()), Vec::with_capacity(tm.columns.len()));
            let mut n = 0u64;
            while it.next_into(&mut b, &mut a).map_err(|e| anyhow::anyhow!("{e}"))? {
                n += 1;
            }
            self.rows += n;
            let k = match r.kind {
                pileup_binlog::RowsKind::Insert => 0,
                pileup_binlog::RowsKind::Update => 1,
                pileup_binlog::RowsKind::Delete => 2,
            };
            // By table id (a name per event would cost more than decoding); named at the end.
            self.by_id.entry(r.table_id).or_insert_with(|| (format!("{}.{}", tm.schema, tm.table), [0; 3])).1[k] += n;
        }
        Ok(())
    }

    fn print(&mut self, json: bool, elapsed: f64) -> Result<()> {
        for (code, n) in self.by_code.iter().enumerate().filter(|(_, n)| **n > 0) {
            *self.by_type.entry(pileup_binlog::event::type_name(code as u8).to_string()).or_default() += n;
        }
        for (name, c) in self.by_id.values() {
            let t = self.by_table.entry(name.clone()).or_default();
            for i in 0..3 {
                t[i] += c[i];
            }
        }
        self.seconds = elapsed;
        self.events_per_second = self.events as f64 / elapsed.max(1e-9);
        self.rows_per_second = self.rows as f64 / elapsed.max(1e-9);
        if json {
            println!("{}", serde_json::to_string(self)?);
            return Ok(());
        }
        println!("{} file(s), {:.1} MB, {} events ({} row events, {} rows) decoded in {:.3} s: {:.0} events/s, {:.0} rows/s", self.files, self.bytes as f64 / 1e6, self.events, self.row_events, self.rows, elapsed, self.events_per_second, self.rows_per_second);
        println!("\nevents by type:");
        let mut t: Vec<_> = self.by_type.iter().collect();
        t.sort_by(|a, b| b.1.cmp(a.1));
        for (k, v) in t {
            println!("  {v:>10}  {k}");
        }
        if !self.by_table.is_empty() {
            println!("\nrows changed by table:      inserted     updated     deleted");
            for (k, [i, u, d]) in &self.by_table {
                println!("  {k:<24} {i:>11} {u:>11} {d:>11}");
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutFormat {
    Text,
    Json,
}

fn value_json(v: &Value) -> serde_json::Value {
    match *v {
        Value::Null => serde_json::Value::Null,
        Value::Int(i, _) => json!(i),
        Value::UInt(u) => json!(u),
        Value::Float(f) => serde_json::Number::from_f64(f as f64).map(serde_json::Value::Number).unwrap_or(serde_json::Value::Null),
        Value::Double(f) => serde_json::Number::from_f64(f).map(serde_json::Value::Number).unwrap_or(serde_json::Value::Null),
        Value::Bytes(b) | Value::Json(b) => match std::str::from_utf8(b) {
            Ok(s) => json!(s),
            Err(_) => json!({ "hex": b.iter().map(|x| format!("{x:02x}")).collect::<String>() }),
        },
        Value::Year(y) => json!(y),
        Value::Bit(b) | Value::Set(b) => json!(b),
        Value::Enum(e) => json!(e),
        ref other => json!(other.to_string()),
    }
}

fn image(cols: &[Option<Value>], names: &[String]) -> serde_json::Value {
    let mut m = Map::new();
    for (i, v) in cols.iter().enumerate() {
        if let Some(v) = v {
            let k = names.get(i).cloned().unwrap_or_else(|| format!("@{}", i + 1));
            m.insert(k, value_json(v));
        }
    }
    serde_json::Value::Object(m)
}

/// One event as JSON (type-specific fields next to the common ones).
fn event_json(file: &str, ev: &pileup_binlog::RawEvent, e: &Event) -> Result<serde_json::Value> {
    let h = ev.header;
    let mut o = json!({
        "file": file, "offset": ev.offset, "end": ev.end(), "type": pileup_binlog::event::type_name(h.type_code),
        "server_id": h.server_id, "timestamp": h.timestamp, "log_pos": h.log_pos,
    });
    let m = o.as_object_mut().unwrap();
    match e {
        Event::FormatDescription(f) => {
            m.insert("server_version".into(), json!(f.server_version));
            m.insert("checksum".into(), json!(format!("{:?}", f.checksum).to_lowercase()));
        }
        Event::Rotate { position, next } => {
            m.insert("next".into(), json!(next));
            m.insert("position".into(), json!(position));
        }
        Event::Query(q) => {
            m.insert("db".into(), json!(String::from_utf8_lossy(q.db)));
            m.insert("sql".into(), json!(String::from_utf8_lossy(&q.sql)));
            m.insert("thread_id".into(), json!(q.thread_id));
            m.insert("error_code".into(), json!(q.error_code));
        }
        Event::Xid(x) => {
            m.insert("xid".into(), json!(x));
        }
        Event::MariaGtid(g) => {
            m.insert("gtid".into(), json!(format!("{}-{}-{}", g.domain_id, h.server_id, g.seq_no)));
            m.insert("standalone".into(), json!(g.standalone()));
        }
        Event::MariaGtidList(l) => {
            m.insert("gtids".into(), json!(l.iter().map(|(d, s, n)| format!("{d}-{s}-{n}")).collect::<Vec<_>>()));
        }
        Event::MysqlGtid { uuid, gno } => {
            m.insert("gtid".into(), json!(format!("{uuid}:{gno}")));
        }
        Event::TableMap(t) => {
            m.insert("table_id".into(), json!(t.table_id));
            m.insert("table".into(), json!(format!("{}.{}", t.schema, t.table)));
            m.insert("column_types".into(), json!(t.columns.iter().map(|c| c.code).collect::<Vec<_>>()));
        }
        Event::Rows(r, tm) => {
            m.insert("table_id".into(), json!(r.table_id));
            m.insert("kind".into(), json!(r.kind));
            let Some(tm) = tm else {
                m.insert("error".into(), json!("no table map for this table id before it (file read from the middle of a transaction?)"));
                return Ok(o);
            };
            m.insert("table".into(), json!(format!("{}.{}", tm.schema, tm.table)));
            let mut rows = vec![];
            let mut it = r.iter(tm);
            let (mut b, mut a) = (vec![], vec![]);
            while it.next_into(&mut b, &mut a).map_err(|e| anyhow::anyhow!("{e}"))? {
                let mut row = Map::new();
                if !b.is_empty() {
                    row.insert("before".into(), image(&b, &tm.column_names));
                }
                if !a.is_empty() {
                    row.insert("after".into(), image(&a, &tm.column_names));
                }
                rows.push(serde_json::Value::Object(row));
            }
            m.insert("rows".into(), json!(rows));
        }
        Event::Annotate(s) => {
            m.insert("sql".into(), json!(String::from_utf8_lossy(s)));
        }
        Event::BinlogCheckpoint(f) => {
            m.insert("checkpoint".into(), json!(f));
        }
        Event::Payload(p) => {
            m.insert("payload_bytes".into(), json!(p.len()));
        }
        Event::Stop | Event::Heartbeat | Event::Other(_) => {}
    }
    Ok(o)
}

fn text_line(j: &serde_json::Value) -> String {
    let g = |k: &str| j.get(k).cloned().unwrap_or(serde_json::Value::Null);
    let mut s = format!("# at {} {} server {} end_log_pos {}", g("offset"), g("type").as_str().unwrap_or(""), g("server_id"), g("log_pos"));
    for k in ["gtid", "db", "sql", "xid", "table", "next", "position", "server_version", "checkpoint", "error"] {
        if let Some(v) = j.get(k) {
            let shown = v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
            if !(k == "db" && shown.is_empty()) {
                s.push_str(&format!("  {k}: {shown}"));
            }
        }
    }
    if let Some(rows) = j.get("rows").and_then(|r| r.as_array()) {
        let kind = g("kind").as_str().unwrap_or("").to_uppercase();
        for r in rows {
            s.push_str(&format!("\n  {kind}"));
            for side in ["before", "after"] {
                if let Some(img) = r.get(side) {
                    s.push_str(&format!(" {side} {img}"));
                }
            }
        }
    }
    s
}

pub fn run(a: BinlogArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut dec = Decoder::new();
    let mut problems = 0usize;
    let mut queue: std::collections::VecDeque<PathBuf> = a.files.iter().cloned().collect();
    let mut first = true;
    let mut stats = Stats::default();
    let t0 = std::time::Instant::now();
    while let Some(path) = queue.pop_front() {
        stats.files += 1;
        let mut r = FileReader::open(&path).map_err(|e| anyhow::anyhow!("{e}; give a binlog or relay log file (e.g. mariadb-bin.000001, relay-bin.000002)"))?;
        r.verify = !a.no_verify;
        if let (true, Some(p)) = (first, a.start_position) {
            r.read_format().map_err(anyhow::Error::from)?;
            r.seek(p);
        }
        first = false;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        loop {
            match r.next_with_format() {
                Ok(Some((ev, f))) if a.stats => match dec.decode(f, ev.bytes) {
                    Ok(e) => stats.add(&ev, &e)?,
                    Err(e) => {
                        problems += 1;
                        eprintln!("pileup: {}", reader::at(&ev, &path, e));
                    }
                },
                Ok(Some((ev, f))) => {
                    let j = match dec.decode(f, ev.bytes) {
                        Ok(e) => event_json(&name, &ev, &e)?,
                        Err(e) => {
                            problems += 1;
                            let err = reader::at(&ev, &path, e);
                            eprintln!("pileup: {err}");
                            json!({"file": name, "offset": ev.offset, "end": ev.end(), "type": pileup_binlog::event::type_name(ev.header.type_code), "error": err.to_string()})
                        }
                    };
                    let line = if a.format == OutFormat::Json { j.to_string() } else { text_line(&j) };
                    if writeln!(out, "{line}").is_err() {
                        return Ok(()); // reader went away (| head)
                    }
                }
                Ok(None) => {
                    if !a.follow {
                        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                        if len > r.position() {
                            eprintln!("pileup: {} ends inside an event at offset {} ({} bytes follow; still being written? --follow waits for the rest)", path.display(), r.position(), len - r.position());
                        }
                        break;
                    }
                    let _ = out.flush();
                    // The server moved on to the next file: finish this one first.
                    if let Some(n) = pileup_binlog::reader::next_started(&path) {
                        if matches!(r.next_event(), Ok(None)) {
                            queue.push_front(n);
                            break;
                        }
                        continue;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e @ ReadError::Corrupt { .. }) => {
                    problems += 1;
                    let at = r.position();
                    match r.resync(at).map_err(anyhow::Error::from)? {
                        Some(next) => eprintln!("pileup: {e}; resynchronised at offset {next}"),
                        None => {
                            eprintln!("pileup: {e}; cannot find the next event (checksums are off or the file ends): skipping the rest of {}", path.display());
                            break;
                        }
                    }
                }
                Err(e) => return Err(e).context("reading"),
            }
        }
    }
    out.flush()?;
    if a.stats {
        stats.print(a.format == OutFormat::Json, t0.elapsed().as_secs_f64())?;
    }
    if problems > 0 {
        bail!("{problems} corrupt or undecodable event(s), reported above with their offsets");
    }
    Ok(())
}
