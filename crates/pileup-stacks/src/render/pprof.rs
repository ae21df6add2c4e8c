//! pprof output: the profile.proto message, gzipped, as `go tool pprof`,
//! Pyroscope and Parca read it. The message types are declared with prost's
//! derive macros (field numbers from pprof's profile.proto), which avoids a
//! protoc build step.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;
use flate2::write::GzEncoder;
use prost::Message;

use crate::Profile;

#[derive(Clone, PartialEq, Message)]
pub struct PProfile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<PSample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct PSample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// pprof's string table: index 0 is the empty string, each string once.
pub struct Strings {
    pub table: Vec<String>,
    idx: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Self {
        Strings::new()
    }
}

impl Strings {
    pub fn new() -> Self {
        Strings { table: vec![String::new()], idx: HashMap::from([(String::new(), 0)]) }
    }
    pub fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.idx.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.idx.insert(s.to_string(), i);
        i
    }
}

/// Build the profile message: one pprof sample per distinct stack and kind
/// of thread, value = thread samples, labels = thread name, role, OS state,
/// SQL command and user, and the tid where a single thread had the stack.
pub fn pprof_message(p: &Profile) -> PProfile {
    let mut st = Strings::new();
    let mut out = PProfile {
        sample_type: vec![ValueType { r#type: st.id("threads"), unit: st.id("count") }],
        period_type: Some(ValueType { r#type: st.id("wall"), unit: st.id("count") }),
        period: 1,
        ..Default::default()
    };
    let mut mapping_ids: HashMap<String, u64> = HashMap::new();
    for m in &p.modules {
        let id = out.mapping.len() as u64 + 1;
        mapping_ids.insert(m.name.clone(), id);
        out.mapping.push(Mapping {
            id,
            filename: st.id(&m.path),
            build_id: st.id(m.build_id.as_deref().unwrap_or("")),
            has_functions: m.named > 0,
            ..Default::default()
        });
    }
    let mut func_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut loc_ids: HashMap<u64, u64> = HashMap::new();
    for t in &p.stacks {
        let mut sample = PSample { value: vec![t.count as i64], ..Default::default() };
        // Locations are per address; inlined frames become several lines of one location.
        let mut fi = 0;
        for &addr in &t.addrs {
            let n = t.frames[fi..].iter().position(|f| !f.inlined).map(|k| k + 1).unwrap_or(t.frames.len() - fi);
            let frames = &t.frames[fi..fi + n];
            fi += n;
            let lid = *loc_ids.entry(addr).or_insert_with(|| {
                let id = out.location.len() as u64 + 1;
                let mut lines = vec![];
                for f in frames {
                    let key = (f.label.clone(), f.file.clone().unwrap_or_default());
                    let fid = match func_ids.get(&key) {
                        Some(&x) => x,
                        None => {
                            let x = out.function.len() as u64 + 1;
                            out.function.push(Function {
                                id: x,
                                name: st.id(&f.label),
                                system_name: st.id(f.function.as_deref().unwrap_or(&f.label)),
                                filename: st.id(f.file.as_deref().unwrap_or("")),
                            });
                            func_ids.insert(key, x);
                            x
                        }
                    };
                    lines.push(Line { function_id: fid, line: f.line.unwrap_or(0) as i64 });
                }
                let mapping_id = frames
                    .first()
                    .and_then(|f| f.module.as_ref())
                    .and_then(|m| mapping_ids.get(m))
                    .copied()
                    .unwrap_or(0);
                out.location.push(Location { id, mapping_id, address: addr, line: lines });
                id
            });
            sample.location_id.push(lid);
        }
        let mut label = |k: &str, v: &str| Label { key: st.id(k), str: st.id(v), num: 0 };
        let mut labels = vec![label("thread", &t.thread), label("state", t.state_label)];
        if let Some(r) = t.role {
            labels.push(label("role", r.as_str()));
        }
        if let Some(c) = &t.sql_command {
            labels.push(label("sql_command", c));
        }
        if let Some(u) = &t.sql_user {
            labels.push(label("sql_user", u));
        }
        // A tid label only where one thread had this stack: counts are per
        // stack and kind of thread, not per thread.
        if let (1, false, Some(&tid)) = (t.tids.len(), t.tids_capped, t.tids.first()) {
            labels.push(Label { key: st.id("tid"), str: 0, num: tid as i64 });
        }
        sample.label = labels;
        out.sample.push(sample);
    }
    if p.stops.samples > 0 {
        out.time_nanos = p.stops.first_unix_ms as i64 * 1_000_000;
        out.duration_nanos = (p.stops.last_unix_ms.saturating_sub(p.stops.first_unix_ms)) as i64 * 1_000_000;
    }
    out.comment.push(st.id(&format!("pileup stacks pid {} {}", p.pid, p.exe)));
    out.string_table = st.table;
    out
}

pub fn pprof(p: &Profile, w: &mut dyn Write) -> Result<()> {
    write_gz(&pprof_message(p), w)
}

/// Encode a profile message, gzipped, as pprof files are.
pub fn write_gz(msg: &PProfile, w: &mut dyn Write) -> Result<()> {
    let mut gz = GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&msg.encode_to_vec())?;
    gz.finish()?;
    Ok(())
}
