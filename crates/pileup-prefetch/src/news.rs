//! What the prefetcher says as it runs: its counters every few seconds (a
//! status line of rates for a person, or every counter for scripts and
//! logs), advice when the readers are the bottleneck (at most once a
//! minute), and at the end its share line and why it read nothing if it
//! did not. Each is a `pileup_output::News` for the program's sink.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pileup_output::News;
use serde::ser::{SerializeMap, Serializer};

use crate::metrics::{self, Counters};

/// One thing said.
#[derive(Debug, Clone, PartialEq)]
pub enum Said {
    /// A person's status line: the rates since the last one.
    Status(String),
    /// Every counter, by name (`event` "counters" in JSON).
    Counters(Vec<(&'static str, u64)>),
    /// Advice, the run's share line, why nothing was read, or the
    /// prefetcher's own news.
    Note(String),
}

impl serde::Serialize for Said {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self {
            Said::Status(text) => {
                m.serialize_entry("event", "status")?;
                m.serialize_entry("text", text)?;
            }
            Said::Counters(c) => {
                m.serialize_entry("event", "counters")?;
                for (k, v) in c {
                    m.serialize_entry(k, v)?;
                }
            }
            Said::Note(text) => {
                m.serialize_entry("event", "note")?;
                m.serialize_entry("text", text)?;
            }
        }
        m.end()
    }
}

impl News for Said {
    fn text(&self) -> Option<String> {
        Some(match self {
            Said::Status(s) => format!("prefetch: {s}"),
            Said::Counters(c) => {
                format!("prefetch: {}", c.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "))
            }
            Said::Note(s) => format!("pileup prefetch: {s}"),
        })
    }
    fn diagnostic(&self) -> bool {
        matches!(self, Said::Note(_))
    }
}

/// How the counters are said.
#[derive(Debug, Clone, Copy)]
pub struct Saying {
    /// A status line of rates (a person at a terminal), else every counter.
    pub status: bool,
    /// Seconds between two.
    pub every: u64,
    /// The lag under which the prefetcher waits (`--min-lag`), for the status.
    pub min_lag: u64,
    /// Reader threads, for the advice about them.
    pub readers: usize,
}

impl Saying {
    fn counters(self, now: &[(&'static str, u64)], before: &[(&'static str, u64)], secs: f64) -> Said {
        match self.status {
            true => Said::Status(metrics::status_line(now, before, secs, self.min_lag)),
            false => Said::Counters(now.to_vec()),
        }
    }

    /// The counters every `every` seconds until `stop`, and (at most once a
    /// minute) when the readers are the bottleneck.
    pub fn run(self, c: &Counters, stop: &AtomicBool, on: &mut dyn FnMut(&Said)) {
        let mut t = Instant::now();
        let mut before = c.snapshot();
        let (mut busy0, mut advised) = (0u64, None::<Instant>);
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if t.elapsed() < Duration::from_secs(self.every) {
                continue;
            }
            let now = c.snapshot();
            on(&self.counters(&now, &before, t.elapsed().as_secs_f64()));
            before = now;
            let busy = c.readers_busy_ms.load(Ordering::Relaxed);
            let advice = metrics::reader_advice(
                busy - busy0,
                t.elapsed().as_secs_f64(),
                c.keys_ahead.load(Ordering::Relaxed),
                c.window_keys.load(Ordering::Relaxed),
                self.readers,
            );
            busy0 = busy;
            if let Some(a) = advice.filter(|_| advised.is_none_or(|at| at.elapsed() >= Duration::from_secs(60))) {
                on(&Said::Note(a));
                advised = Some(Instant::now());
            }
            t = Instant::now();
        }
    }

    /// The last counters of a run that ran, its share line, and why it
    /// read nothing if it did not.
    pub fn last(self, c: &Counters, on: &mut dyn FnMut(&Said)) {
        let snap = c.snapshot();
        on(&self.counters(&snap, &snap, 1.0));
        if let Some(line) = metrics::run_share_line(&snap) {
            on(&Said::Note(line));
        }
        if c.events_read.load(Ordering::Relaxed) == 0 {
            let state = metrics::state_of(&snap, self.min_lag);
            on(&Said::Note(format!("read nothing from the relay log: {}", state.describe())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_one_json_object_and_a_line_of_words() {
        let c = Said::Counters(vec![("keys_issued", 3), ("lookups", 2)]);
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            serde_json::json!({"event": "counters", "keys_issued": 3, "lookups": 2})
        );
        assert_eq!(c.text().unwrap(), "prefetch: keys_issued=3 lookups=2");
    }

    #[test]
    fn a_run_that_read_nothing_says_why() {
        let c = Counters::default();
        let mut said = vec![];
        Saying { status: false, every: 1, min_lag: 1, readers: 1 }.last(&c, &mut |s| said.push(s.clone()));
        assert!(matches!(&said[0], Said::Counters(_)), "{said:?}");
        assert!(
            said.iter().any(|s| matches!(s, Said::Note(n) if n.starts_with("read nothing from the relay log"))),
            "{said:?}"
        );
    }
}
