//! The watcher's events told to a person: a line for each that is news, a
//! failing poll said once until the state changes (then its end, with how
//! many polls failed), and each event kept whole for JSON. A state
//! machine, tested with scripted events.

use pileup_output::{plural, News};
use pileup_store::ShipEvent;

use crate::decide::Event;
use crate::evidence::stamp_tenths;

/// Turns events into what a person reads.
#[derive(Debug, Default)]
pub struct Narrator {
    /// Why the server's process is not watched, when it is not.
    no_pid_why: Option<String>,
    /// The failing poll's error, and how many polls failed with it.
    failing: Option<(String, u64)>,
}

/// An event and the line it makes: JSON gets the event, a person the line.
pub struct Told<'a> {
    /// The event.
    pub event: &'a Event,
    /// Its line, when it is news.
    pub line: Option<String>,
}

impl serde::Serialize for Told<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.event.serialize(s)
    }
}

impl News for Told<'_> {
    fn text(&self) -> Option<String> {
        self.line.clone()
    }
}

impl Narrator {
    /// `no_pid_why`: why no process is watched (said in the first line).
    pub fn new(no_pid_why: Option<String>) -> Narrator {
        Narrator { no_pid_why, failing: None }
    }

    /// Tell `e`.
    pub fn tell<'a>(&mut self, e: &'a Event) -> Told<'a> {
        Told { event: e, line: self.line(e) }
    }

    fn line(&mut self, e: &Event) -> Option<String> {
        Some(match e {
            Event::Started { server, pid, interval_ms, data_dir, triggers } => format!(
                "pileup watch: {server} every {}, pid {}, history in {data_dir}; triggers: {}",
                every(*interval_ms),
                pid.map(|p| p.to_string())
                    .unwrap_or_else(|| format!("none ({})", self.no_pid_why.as_deref().unwrap_or("not watched"))),
                triggers.join("; ")
            ),
            // A change of state is news; a repeat is counted and said when
            // the state changes again.
            Event::Poll { ok: false, error, .. } => {
                let why = error.as_deref().unwrap_or("");
                let news = self.failing.as_ref().is_none_or(|(w, _)| w != why);
                if news {
                    self.failing = Some((why.to_string(), 0));
                }
                if let Some((_, n)) = &mut self.failing {
                    *n += 1;
                }
                return news.then(|| format!("poll failed: {why} (said once; polls go on)"));
            }
            Event::Poll { .. } => {
                let (_, n) = self.failing.take()?;
                format!("polls answer again, after {}", plural(n, "failed poll", "failed polls"))
            }
            Event::Listening { addr, scheme, profiles_refused: None } if self.no_pid_why.is_none() => format!(
                "metrics: {scheme}://{addr}/metrics; profiles: {scheme}://{addr}/debug/pprof/profile?seconds=N, {scheme}://{addr}/debug/pprof/locks?seconds=N"
            ),
            Event::Listening { addr, scheme, profiles_refused: Some(why) } if self.no_pid_why.is_none() => {
                format!("metrics: {scheme}://{addr}/metrics; {why}")
            }
            Event::Listening { addr, scheme, .. } => format!("metrics: {scheme}://{addr}/metrics"),
            Event::ServerRestarted { old_pid, new_pid, .. } => {
                format!("the server restarted: pid {old_pid} is gone, following pid {new_pid}")
            }
            Event::Fired { trigger, .. } => format!("fired: {trigger}"),
            Event::PileUp { blocked, baseline, .. } => {
                format!("pile-up: {} held up (usually {baseline}); capturing", plural(*blocked, "thread", "threads"))
            }
            Event::Stall { began_unix, ended_unix, ms, peak_blocked, what: None, .. } => format!(
                "stall: {} from {} to {} UTC, {} held up at peak",
                lasted(*ms),
                stamp_tenths(*began_unix),
                stamp_tenths(*ended_unix),
                plural(*peak_blocked, "thread", "threads")
            ),
            Event::Stall { began_unix, ended_unix, ms, what: Some(what), ongoing: true, .. } => format!(
                "stall: {what}, still on when watch stopped: at least {} from {} to {} UTC",
                lasted(*ms),
                stamp_tenths(*began_unix),
                stamp_tenths(*ended_unix)
            ),
            Event::Stall { began_unix, ended_unix, ms, what: Some(what), .. } => format!(
                "{}: {what}, {} from {} to {} UTC",
                if *ms < crate::scan::LASTING_SECS * 1000.0 { "short stall" } else { "stall" },
                lasted(*ms),
                stamp_tenths(*began_unix),
                stamp_tenths(*ended_unix)
            ),
            Event::Skipped { trigger, why, .. } => format!("not capturing for {trigger}: {why}"),
            Event::StoreFailed { error, .. } => {
                format!("cannot store the history: {error}; polls and captures go on (said once)")
            }
            Event::StoreRecovered { failed, .. } => {
                format!("the history is stored again, after {}", plural(*failed, "write that failed", "writes that failed"))
            }
            Event::Captured { dir, verdict, .. } => format!("captured {dir}\n  {verdict}"),
            Event::CaptureFailed { error, .. } => format!("capture failed: {error}"),
            Event::Ship(ShipEvent::Queued { .. }) => return None,
            Event::Ship(ShipEvent::Shipped { url, .. }) => format!("shipped {url}"),
            Event::Ship(ShipEvent::NotQueued { capture_dir, error }) => format!("not shipping {capture_dir}: {error}"),
            Event::Ship(ShipEvent::NotReplaced { capture_dir, error }) => format!("shipped {capture_dir}; {error}"),
            Event::Ship(ShipEvent::Failed { error, queued, retry_in_s }) => format!(
                "shipping: {error}; {} on local disk, next try in {retry_in_s} s",
                plural(*queued, "capture waits", "captures wait")
            ),
        })
    }
}

/// How long a stall lasted: `400 ms`, `10.2 s`.
fn lasted(ms: f64) -> String {
    match ms < 1000.0 {
        true => format!("{ms:.0} ms"),
        false => format!("{:.1} s", ms / 1000.0),
    }
}

/// An interval as a person writes it: `1s`, `250ms`.
fn every(ms: u64) -> String {
    match ms % 1000 {
        0 => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(error: Option<&str>) -> Event {
        Event::Poll {
            unix: 0.0,
            ok: error.is_none(),
            cost_ms: 1.0,
            error: error.map(String::from),
            derived: Default::default(),
        }
    }

    #[test]
    fn a_failing_poll_is_said_once_and_its_end_with_the_count() {
        let mut n = Narrator::new(None);
        let said: Vec<Option<String>> = [
            poll(None),
            poll(Some("server gone")),
            poll(Some("server gone")),
            poll(Some("server gone")),
            poll(Some("refused")),
            poll(None),
            poll(None),
        ]
        .iter()
        .map(|e| n.tell(e).line)
        .collect();
        assert_eq!(
            said,
            [
                None,
                Some("poll failed: server gone (said once; polls go on)".into()),
                None,
                None,
                Some("poll failed: refused (said once; polls go on)".into()),
                Some("polls answer again, after 1 failed poll".into()),
                None,
            ]
        );
    }

    #[test]
    fn the_first_line_says_what_is_watched_and_why_no_process_is() {
        let e = Event::Started {
            server: "localhost via /s.sock".into(),
            pid: None,
            interval_ms: 1000,
            data_dir: "/d".into(),
            triggers: vec!["threads_running > 8 for 2s".into()],
        };
        let told = Narrator::new(Some("the server is on another machine".into())).tell(&e);
        assert_eq!(
            told.line.as_deref(),
            Some("pileup watch: localhost via /s.sock every 1s, pid none (the server is on another machine), history in /d; triggers: threads_running > 8 for 2s")
        );
        assert_eq!(serde_json::to_value(&told).unwrap()["event"], "started");
        let l = Event::Listening { addr: "127.0.0.1:9105".into(), scheme: "http".into(), profiles_refused: None };
        assert_eq!(told_line(&l), "metrics: http://127.0.0.1:9105/metrics");
    }

    #[test]
    fn a_stall_still_on_at_stop_says_so() {
        let st = |ongoing| Event::Stall {
            began_unix: 1_800_000_000.0,
            ended_unix: 1_800_000_012.5,
            ms: 12_500.0,
            peak_blocked: 0,
            baseline: 0,
            what: Some("lock waits".into()),
            ongoing,
        };
        assert_eq!(
            told_line(&st(true)),
            "stall: lock waits, still on when watch stopped: at least 12.5 s from 20270115-080000.0 to 20270115-080012.5 UTC"
        );
        assert!(told_line(&st(false)).starts_with("stall: lock waits, 12.5 s from"));
        assert_eq!(serde_json::to_value(st(true)).unwrap()["ongoing"], true);
        assert!(serde_json::to_value(st(false)).unwrap().get("ongoing").is_none());
    }

    fn told_line(e: &Event) -> String {
        Narrator::new(Some("none".into())).tell(e).line.unwrap()
    }
}
