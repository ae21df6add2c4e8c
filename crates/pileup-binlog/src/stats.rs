//! Counting what a binlog holds (`pileup binlog --stats`): events by
//! type, rows changed per table, decode speed.

use crate::decoder::Event;
use crate::error::DecodeError;
use pileup_output::plural;

/// What a run of events held: counts by type, rows changed per table,
/// decode speed (`pileup binlog --stats`).
#[derive(Default, serde::Serialize)]
pub struct Stats {
    pub files: usize,
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
    /// Count one decoded event (its rows decoded too). Inlined into the
    /// caller's loop: it runs once per event.
    #[inline]
    pub fn add(&mut self, ev: &crate::reader::RawEvent, e: &Event) -> Result<(), DecodeError> {
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
            while it.next_into(&mut b, &mut a)? {
                n += 1;
            }
            self.rows += n;
            let k = match r.kind {
                crate::decode::RowsKind::Insert => 0,
                crate::decode::RowsKind::Update => 1,
                crate::decode::RowsKind::Delete => 2,
            };
            // By table id (a name per event would cost more than decoding); named at the end.
            self.by_id.entry(r.table_id).or_insert_with(|| (format!("{}.{}", tm.schema, tm.table), [0; 3])).1[k] += n;
        }
        Ok(())
    }

    /// Close the counts after `elapsed` seconds of decoding.
    pub fn finish(&mut self, elapsed: f64) {
        for (code, n) in self.by_code.iter().enumerate().filter(|(_, n)| **n > 0) {
            *self.by_type.entry(crate::event::type_name(code as u8).to_string()).or_default() += n;
        }
        self.by_code.clear();
        for (name, c) in self.by_id.values() {
            let t = self.by_table.entry(name.clone()).or_default();
            for i in 0..3 {
                t[i] += c[i];
            }
        }
        self.by_id.clear();
        self.seconds = elapsed;
        self.events_per_second = self.events as f64 / elapsed.max(1e-9);
        self.rows_per_second = self.rows as f64 / elapsed.max(1e-9);
    }

    /// The summary as text (after [`Stats::finish`]); [`Stats`] is also
    /// the output layer's report of `--stats`.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}, {:.1} MB, {} ({}, {}) decoded in {:.3} s: {:.0} events/s, {:.0} rows/s",
            plural(self.files as u64, "file", "files"),
            self.bytes as f64 / 1e6,
            plural(self.events, "event", "events"),
            plural(self.row_events, "row event", "row events"),
            plural(self.rows, "row", "rows"),
            self.seconds,
            self.events_per_second,
            self.rows_per_second
        );
        s.push_str("\nevents by type:\n");
        let mut t: Vec<_> = self.by_type.iter().collect();
        t.sort_by(|a, b| b.1.cmp(a.1));
        for (k, v) in t {
            let _ = writeln!(s, "  {v:>10}  {k}");
        }
        if !self.by_table.is_empty() {
            s.push_str("\nrows changed by table:      inserted     updated     deleted\n");
            for (k, [i, u, d]) in &self.by_table {
                let _ = writeln!(s, "  {k:<24} {i:>11} {u:>11} {d:>11}");
            }
        }
        s
    }
}

impl pileup_output::Report for Stats {
    fn tool(&self) -> &'static str {
        "binlog"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        w.write_all(self.text().as_bytes())
    }
}
