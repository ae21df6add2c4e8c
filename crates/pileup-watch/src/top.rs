//! `pileup top`: a live terminal view of the derived metrics with sparklines,
//! the busiest statements and the current stall state — what innotop and
//! `mysqladmin ext -ri1` give, with the ratios they lack. `--once` prints the
//! same as text for scripts. Quit with q, Esc or Ctrl-C.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::error::Result;
use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;

use crate::derive::{availability, derive, Availability, DeriveOptions, Snapshot};
use crate::poll::Poller;
use crate::trigger::{Armed, Context, Step, Trigger};

/// Metrics shown, in order: (metric, label).
pub const SHOWN: &[(&str, &str)] = &[
    ("questions_rate", "Questions/s"),
    ("com_select_rate", "SELECT/s"),
    ("com_insert_rate", "INSERT/s"),
    ("com_update_rate", "UPDATE/s"),
    ("com_delete_rate", "DELETE/s"),
    ("threads_running", "Threads running"),
    ("threads_connected", "Threads connected"),
    ("pl_active", "Statements running"),
    ("pl_active_longest_s", "Longest statement (s)"),
    ("pl_waiting_lock", "Waiting: MDL/table/global"),
    ("innodb_row_lock_current_waits", "Waiting: row locks"),
    ("rows_read_rate", "Rows read/s"),
    ("rows_read_per_row_sent", "Rows read per row sent"),
    ("rows_read_per_query", "Rows read per query"),
    ("physical_reads_per_row_read", "Disk reads per row read"),
    ("innodb_buffer_pool_reads_rate", "Buffer pool disk reads/s"),
    ("innodb_data_pending_reads", "Pending reads"),
    ("innodb_os_log_fsyncs_rate", "Log fsyncs/s"),
    ("replica_lag", "Replica lag (s)"),
    ("os_cpu_busy_pct", "Host CPU busy %"),
    ("mysqld_cpu_cores", "Server CPU (cores)"),
    ("poll_cost_ms", "Poll time (ms)"),
];

const SPARK_LEN: usize = 60;

/// A statement running now.
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    pub id: u64,
    pub user: String,
    pub secs: f64,
    pub state: String,
    pub info: String,
}

/// Everything the view shows, updated each interval.
#[derive(Default)]
pub struct TopState {
    pub server: String,
    series: BTreeMap<String, VecDeque<f64>>,
    pub last: BTreeMap<String, f64>,
    pub busiest: Vec<Running>,
    pub poll_ok: bool,
    pub error: Option<String>,
    /// Triggers currently firing or pending, with their state.
    pub stall: Vec<(String, Step)>,
    triggers: Vec<(Trigger, Armed)>,
    /// What this server's counters cannot give, judged once from the first
    /// poll that derived rates.
    pub availability: Option<Vec<Availability>>,
    /// Short stalls of the last [`SHORT_STALLS_SHOWN_SECS`]: a trigger's
    /// condition that cleared before its hold, seen by top's own polls.
    seen_stalls: VecDeque<crate::scan::Stall>,
    /// …and those a `pileup watch` on the same data directory recorded
    /// (pile-ups between its polls included), set by the caller.
    pub watch_stalls: Vec<crate::scan::Stall>,
}

/// The last polls left out of a trigger's baseline, spread and peak.
const RECENT_POLLS: usize = 5;

/// How far back top lists short stalls.
pub const SHORT_STALLS_SHOWN_SECS: f64 = 600.0;

struct Ctx<'a>(&'a TopState, bool);

impl Context for Ctx<'_> {
    fn value(&self, m: &str) -> Option<f64> {
        self.0.last.get(m).copied()
    }
    /// The view keeps SPARK_LEN points: theirs, the last [`RECENT_POLLS`]
    /// left out (a stall's own first polls are not its usual), stand in for
    /// the window's.
    fn usual(&self, m: &str, _w: f64) -> Option<crate::trigger::Usual> {
        let s = self.0.series.get(m)?;
        crate::trigger::Usual::of(&mut s.iter().take(s.len().saturating_sub(RECENT_POLLS)).copied().collect::<Vec<_>>())
    }
    fn poll_failed(&self) -> bool {
        self.1
    }
}

/// Unicode block sparkline of the values (scaled to their own maximum).
pub fn spark(values: &VecDeque<f64>) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().fold(0.0f64, f64::max);
    values
        .iter()
        .map(|&v| {
            if max <= 0.0 || !v.is_finite() {
                BARS[0]
            } else {
                BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

pub fn fmt(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v.abs() >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

impl TopState {
    pub fn new(server: String, triggers: Vec<Trigger>) -> TopState {
        TopState {
            server,
            triggers: triggers.into_iter().map(|t| (t, Armed::default())).collect(),
            ..Default::default()
        }
    }

    pub fn update(
        &mut self,
        now: f64,
        ok: bool,
        error: Option<String>,
        derived: BTreeMap<String, f64>,
        busiest: Vec<Running>,
    ) {
        self.poll_ok = ok;
        self.error = error;
        self.last = derived;
        if self.availability.is_none() && ok && self.last.contains_key("questions_rate") {
            self.availability = Some(availability(|m| self.last.contains_key(m)));
        }
        // The metrics shown, and those the triggers judge against their own
        // recent values.
        let mut kept: std::collections::BTreeSet<String> = SHOWN.iter().map(|(k, _)| k.to_string()).collect();
        kept.extend(self.triggers.iter().flat_map(|(t, _)| t.metrics()).map(String::from));
        for k in kept {
            let v = self.last.get(&k).copied().unwrap_or(f64::NAN);
            let s = self.series.entry(k).or_default();
            s.push_back(v);
            while s.len() > SPARK_LEN {
                s.pop_front();
            }
        }
        self.busiest = busiest;
        let mut triggers = std::mem::take(&mut self.triggers);
        let ctx = Ctx(self, !ok);
        let mut short = vec![];
        self.stall = triggers
            .iter_mut()
            .filter_map(|(t, a)| {
                // A condition that held and cleared, before its hold or
                // after firing: a stall, from its first hold to now.
                let held_since = a.since();
                let st = a.step(t, now, &ctx);
                if let (Some(began), Step::Idle) = (held_since, st) {
                    short.push(crate::scan::Stall {
                        began_unix: began,
                        ended_unix: now,
                        peak_blocked: 0,
                        baseline: 0,
                        what: Some(t.label().to_string()),
                    });
                }
                (st != Step::Idle).then(|| (t.text.clone(), st))
            })
            .collect();
        self.triggers = triggers;
        self.seen_stalls.extend(short);
        while self.seen_stalls.front().is_some_and(|s| now - s.ended_unix > SHORT_STALLS_SHOWN_SECS) {
            self.seen_stalls.pop_front();
        }
    }

    /// Short stalls of the last ten minutes, oldest first: top's own and
    /// the watcher's (a stall both saw is listed once).
    pub fn short_stalls(&self) -> Vec<crate::scan::Stall> {
        let mut v: Vec<crate::scan::Stall> = self.watch_stalls.clone();
        for s in &self.seen_stalls {
            let same = |w: &crate::scan::Stall| {
                w.what == s.what && w.began_unix <= s.ended_unix && s.began_unix <= w.ended_unix
            };
            if !v.iter().any(same) {
                v.push(s.clone());
            }
        }
        v.sort_by(|a, b| a.began_unix.total_cmp(&b.began_unix));
        v
    }

    /// The line under the stall line: how many short stalls, and the last.
    fn short_stalls_line(&self) -> Option<String> {
        let v = self.short_stalls();
        let last = v.last()?;
        let lasted = match last.ms() {
            ms if ms < 1000.0 => format!("{ms:.0} ms"),
            ms => format!("{:.1} s", ms / 1000.0),
        };
        Some(format!(
            "stalls ended in the last {} min: {} (last: {}, {lasted} from {} to {} UTC)",
            SHORT_STALLS_SHOWN_SECS / 60.0,
            v.len(),
            last.describe(),
            crate::evidence::stamp_tenths(last.began_unix),
            crate::evidence::stamp_tenths(last.ended_unix)
        ))
    }

    fn stall_line(&self) -> String {
        let firing: Vec<&str> = self
            .stall
            .iter()
            .filter(|(_, s)| matches!(s, Step::Fire | Step::Ongoing))
            .map(|(t, _)| t.as_str())
            .collect();
        let pending: Vec<&str> =
            self.stall.iter().filter(|(_, s)| *s == Step::Pending).map(|(t, _)| t.as_str()).collect();
        if !firing.is_empty() {
            format!("STALL: {}", firing.join("; "))
        } else if !pending.is_empty() {
            format!("watching: {}", pending.join("; "))
        } else {
            "no stall".into()
        }
    }

    /// The view as JSON (`--once --json`): the stall line's triggers, every
    /// metric's last value, the busiest statements and what the server
    /// cannot give.
    pub fn json(&self) -> serde_json::Value {
        let step = |s: &Step| match s {
            Step::Idle => "idle",
            Step::Pending => "pending",
            Step::Fire => "fired",
            Step::Ongoing => "ongoing",
        };
        serde_json::json!({
            "server": self.server,
            "poll_ok": self.poll_ok,
            "poll_error": self.error,
            "stall": self.stall_line().starts_with("STALL"),
            "short_stalls": self.short_stalls(),
            "triggers": self.stall.iter().map(|(t, s)| serde_json::json!({"trigger": t, "state": step(s)})).collect::<Vec<_>>(),
            "metrics": self.last,
            "busiest": self.busiest.iter().map(|r| serde_json::json!({
                "id": r.id, "user": r.user, "seconds": r.secs, "state": r.state, "info": r.info,
            })).collect::<Vec<_>>(),
            "not_available": self.availability.iter().flatten().map(|a| serde_json::json!({
                "metrics": a.metrics, "why": a.why,
            })).collect::<Vec<_>>(),
        })
    }

    /// The view as plain text (`--once`).
    pub fn text(&self) -> String {
        let mut out = format!("pileup top — {} — {}\n", self.server, self.stall_line());
        if let Some(l) = self.short_stalls_line() {
            out.push_str(&format!("{l}\n"));
        }
        if let Some(e) = &self.error {
            out.push_str(&format!("poll failed: {e}\n"));
        }
        for a in self.availability.iter().flatten() {
            out.push_str(&format!("not on this server: {}: {}\n", a.metrics, a.why));
        }
        // No sparklines: a snapshot has two polls, not a trend.
        for (k, label) in SHOWN {
            if let Some(v) = self.last.get(*k) {
                out.push_str(&format!("{label:<26} {:>12}\n", fmt(*v)));
            }
        }
        out.push_str("\nbusiest statements:\n");
        if self.busiest.is_empty() {
            out.push_str("  (none running)\n");
        }
        for r in &self.busiest {
            out.push_str(&format!("  {:>8} {:<12} {:>8.1}s {:<24} {}\n", r.id, r.user, r.secs, r.state, r.info));
        }
        out
    }

    pub fn draw(&self, f: &mut Frame) {
        let notes: Vec<String> = self
            .availability
            .iter()
            .flatten()
            .map(|a| format!("not on this server: {}: {}", a.metrics, a.why))
            .collect();
        let [head, metrics, stmts, foot] = Layout::vertical([
            Constraint::Length(4),
            Constraint::Length(SHOWN.len() as u16 + 2),
            Constraint::Min(4),
            Constraint::Length(1 + notes.len() as u16),
        ])
        .areas(f.area());
        let stall = self.stall_line();
        let style = if stall.starts_with("STALL") {
            Style::default().fg(Color::White).bg(Color::Red).add_modifier(Modifier::BOLD)
        } else {
            Style::default().fg(Color::Green)
        };
        let mut lines = vec![Line::styled(stall, style)];
        if let Some(l) = self.short_stalls_line() {
            lines.push(Line::styled(l, Style::default().fg(Color::Yellow)));
        }
        if let Some(e) = &self.error {
            lines.push(Line::styled(format!("poll failed: {e}"), Style::default().fg(Color::Red)));
        }
        f.render_widget(
            Paragraph::new(lines).block(Block::bordered().title(format!(" pileup top — {} ", self.server))),
            head,
        );
        let rows: Vec<Row> = SHOWN
            .iter()
            .map(|(k, label)| {
                let v = self.last.get(*k).copied();
                let sp = self.series.get(*k).map(spark).unwrap_or_default();
                Row::new(vec![label.to_string(), v.map(fmt).unwrap_or_else(|| "-".into()), sp])
            })
            .collect();
        let t = Table::new(rows, [Constraint::Length(26), Constraint::Length(12), Constraint::Min(10)])
            .block(Block::bordered().title(" metrics (last 60 polls) "));
        f.render_widget(t, metrics);
        let srows: Vec<Row> = self
            .busiest
            .iter()
            .map(|r| {
                Row::new(vec![
                    r.id.to_string(),
                    r.user.clone(),
                    format!("{:.1}s", r.secs),
                    r.state.clone(),
                    r.info.clone(),
                ])
            })
            .collect();
        let st = Table::new(
            srows,
            [
                Constraint::Length(8),
                Constraint::Length(12),
                Constraint::Length(9),
                Constraint::Length(24),
                Constraint::Min(20),
            ],
        )
        .header(
            Row::new(vec!["id", "user", "time", "state", "statement"])
                .style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(" busiest statements "));
        f.render_widget(st, stmts);
        let mut foot_lines: Vec<Line> =
            notes.into_iter().map(|n| Line::styled(n, Style::default().fg(Color::DarkGray))).collect();
        foot_lines.push(Line::raw("q: quit"));
        f.render_widget(Paragraph::new(foot_lines), foot);
    }
}

/// Running statements, longest first (MariaDB `TIME_MS`, else `TIME`).
fn busiest(conn: &mut mysql::Conn) -> Result<Vec<Running>> {
    let q = "SELECT ID, USER, TIME, STATE, INFO FROM information_schema.PROCESSLIST \
             WHERE COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump') AND ID <> CONNECTION_ID() AND INFO IS NOT NULL ORDER BY TIME DESC LIMIT 15";
    let rows: Vec<(u64, Option<String>, Option<f64>, Option<String>, Option<String>)> = conn.query(q)?;
    Ok(rows
        .into_iter()
        .map(|(id, u, t, s, i)| Running {
            id,
            user: u.unwrap_or_default(),
            secs: t.unwrap_or(0.0),
            state: s.unwrap_or_default(),
            info: pileup_engine::one_line(&i.unwrap_or_default(), 200),
        })
        .collect())
}

/// `top --once`'s snapshot as the output layer writes it: its text and
/// its JSON ([`TopState::json`]).
impl serde::Serialize for TopState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.json().serialize(s)
    }
}

impl pileup_output::Report for TopState {
    fn tool(&self) -> &'static str {
        "top"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        w.write_all(self.text().as_bytes())
    }
}

/// Run the dashboard; with `once`, return one text snapshot after two
/// polls instead.
pub fn run(
    spec: ConnSpec,
    pid: Option<i32>,
    interval: Duration,
    triggers: Vec<Trigger>,
    once: bool,
    watch_store: Option<&std::path::Path>,
) -> Result<Option<TopState>> {
    let timeout = interval.clamp(Duration::from_millis(500), Duration::from_secs(5));
    let mut poller = Poller::new(spec.clone(), pid, timeout);
    let mut sql: Option<mysql::Conn> = None;
    let mut state = TopState::new(spec.describe(), triggers);
    let mut prev: Option<Snapshot> = None;
    let mut store: Option<crate::store::Store> = None;
    let mut step = |state: &mut TopState| {
        let p = poller.poll();
        let cur = Snapshot { at: p.unix, values: p.values.clone() };
        let d = derive(prev.as_ref().unwrap_or(&cur), &cur, &DeriveOptions::default());
        if p.ok {
            prev = Some(cur);
        }
        if sql.is_none() {
            let mut quick = spec.clone();
            quick.timeout = timeout;
            sql = quick.connect().ok();
            if let Some(c) = sql.as_mut() {
                let n = pileup_conn::session_questions(c).unwrap_or(0);
                poller.own_work(n, 1);
            }
        }
        let asked = sql.is_some();
        let b = match sql.as_mut().map(busiest) {
            Some(Ok(b)) => b,
            Some(Err(_)) => {
                sql = None;
                vec![]
            }
            None => vec![],
        };
        // The busiest-statements query (when one was sent) and its
        // connection are top's own.
        poller.own_work(u64::from(asked), u32::from(sql.is_some()));
        // A watcher's history on this host: its short stalls too, when it
        // is this server's. The store is opened once it exists, and kept.
        if store.is_none() {
            store =
                watch_store.filter(|d| d.join("pileup.db").exists()).and_then(|d| crate::store::Store::open(d).ok());
        }
        let ours = |st: &crate::store::Store| matches!((st.server(), poller.identity()), (Some(a), Some(b)) if a == b);
        if let Some(st) = store.as_ref().filter(|st| ours(st)) {
            state.watch_stalls = st.stalls(p.unix - SHORT_STALLS_SHOWN_SECS, p.unix + 1.0).unwrap_or_default();
        }
        state.update(p.unix, p.ok, p.error, d, b);
    };
    if once {
        step(&mut state);
        std::thread::sleep(interval);
        step(&mut state);
        return Ok(Some(state));
    }
    ratatui::run(|terminal| -> Result<()> {
        let mut next = Instant::now();
        loop {
            if Instant::now() >= next {
                step(&mut state);
                next += interval;
                if next < Instant::now() {
                    next = Instant::now() + interval;
                }
            }
            terminal.draw(|f| state.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let TermEvent::Key(k) = event::read()? {
                    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                        return Ok(());
                    }
                }
            }
        }
    })?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_and_numbers() {
        let v: VecDeque<f64> = [0.0, 1.0, 2.0, 4.0, 8.0].into();
        assert_eq!(spark(&v), "▁▂▃▅█");
        assert_eq!(spark(&[0.0, 0.0].into()), "▁▁");
        assert_eq!(fmt(1234567.0), "1.23M");
        assert_eq!(fmt(12345.0), "12.3k");
        assert_eq!(fmt(42.0), "42");
        assert_eq!(fmt(0.0123), "0.012");
    }

    #[test]
    fn stall_state_follows_triggers() {
        let t = vec![Trigger::parse("threads_running > 8").unwrap(), Trigger::parse("poll_failed").unwrap()];
        let mut s = TopState::new("test".into(), t);
        s.update(1.0, true, None, [("threads_running".to_string(), 2.0)].into(), vec![]);
        assert!(s.text().contains("no stall"));
        s.update(
            2.0,
            true,
            None,
            [("threads_running".to_string(), 20.0)].into(),
            vec![Running {
                id: 5,
                user: "app".into(),
                secs: 3.5,
                state: "Updating".into(),
                info: "UPDATE t SET a=1".into(),
            }],
        );
        let txt = s.text();
        assert!(txt.contains("STALL: threads_running > 8"), "{txt}");
        assert!(txt.contains("UPDATE t SET a=1") && txt.contains("3.5s"));
        s.update(3.0, false, Some("timed out".into()), BTreeMap::new(), vec![]);
        assert!(s.text().contains("STALL: poll_failed") && s.text().contains("poll failed: timed out"));
    }

    #[test]
    fn a_condition_that_clears_before_its_hold_is_listed_as_a_short_stall() {
        let t = vec![Trigger::parse("connection storm: connections_rate > 100 for 1s").unwrap()];
        let mut s = TopState::new("test".into(), t);
        let rate = |v: f64| BTreeMap::from([("connections_rate".to_string(), v)]);
        s.update(1.0, true, None, rate(0.0), vec![]);
        s.update(2.0, true, None, rate(900.0), vec![]);
        assert!(s.text().contains("watching: connection storm"), "{}", s.text());
        s.update(2.5, true, None, rate(0.0), vec![]);
        let txt = s.text();
        assert!(txt.contains("stalls ended in the last 10 min: 1 (last: connection storm, 500 ms from "), "{txt}");
        // The same stall in a watcher's history is listed once; its
        // pile-ups between polls are listed too.
        s.watch_stalls = vec![
            crate::scan::Stall {
                began_unix: 1.9,
                ended_unix: 2.3,
                peak_blocked: 0,
                baseline: 0,
                what: Some("connection storm".into()),
            },
            crate::scan::Stall { began_unix: 2.6, ended_unix: 2.9, peak_blocked: 20, baseline: 1, what: None },
        ];
        assert_eq!(s.short_stalls().len(), 2);
        assert_eq!(s.json()["short_stalls"].as_array().unwrap().len(), 2);
        // Ten minutes on, forgotten.
        s.watch_stalls.clear();
        s.update(700.0, true, None, rate(0.0), vec![]);
        assert!(s.short_stalls().is_empty());
    }
}
