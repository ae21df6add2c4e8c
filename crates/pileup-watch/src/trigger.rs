//! Stall triggers: small expressions over raw values, rates and ratios, with
//! "above" and "below" and a hold time, e.g.
//!
//! ```text
//! threads_running > 32 for 1s
//! questions_rate < 0.3 * baseline_5m for 2s
//! poll_failed for 2s
//! innodb_data_pending_reads > 8
//! replica_lag > 30s
//! connection storm: connections_rate > 2 * peak_5m + 8 * spread_5m + 200 for 1s
//! ```
//!
//! `baseline_W` (W = 30s, 5m, 1h, …) stands for the baseline of the metric
//! on the left-hand side over the past W (the watcher supplies its median),
//! so "throughput fell to a third of normal" needs no tuning; `spread_W`
//! for how far it usually strays from it (the watcher supplies a robust
//! standard deviation), and `peak_W` for the highest it usually reaches
//! (its 99th percentile), so "far above anything usual" needs none either.
//! Either side is a sum of products. An optional `NAME: ` before the
//! expression names what the trigger catches (a stall class), for the
//! history and the captures list.
//! A missing value makes a comparison false: only `poll_failed` fires on a
//! server that does not answer, and it does.
//!
//! Written by hand: the grammar is a dozen lines and no expression crate
//! offers the `for` hold or the baseline term.

use std::fmt;

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("trigger `{expr}`: {why}")]
pub struct ParseError {
    pub expr: String,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Term {
    Num(f64),
    Metric(String),
    /// Baseline of the left-hand metric over this many seconds.
    Baseline(f64),
    /// How far the left-hand metric usually strays from its baseline over
    /// this many seconds.
    Spread(f64),
    /// The highest the left-hand metric usually reaches over this many
    /// seconds (its 99th percentile).
    Peak(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Gt,
    Ge,
    Lt,
    Le,
}

#[derive(Debug, Clone, PartialEq)]
enum Cond {
    PollFailed,
    /// Each side a sum of products.
    Cmp {
        lhs: Vec<Vec<Term>>,
        op: Op,
        rhs: Vec<Vec<Term>>,
    },
}

/// A parsed trigger.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    pub text: String,
    /// What it catches, when the text names it (`NAME: expression`).
    pub name: Option<String>,
    cond: Cond,
    /// How long the condition must hold before the trigger fires (seconds).
    pub hold: f64,
}

/// What the evaluator can ask about the present.
pub trait Context {
    fn value(&self, metric: &str) -> Option<f64>;
    /// What is usual for `metric` over the past `window_secs`; `None` until
    /// the history allows it.
    fn usual(&self, metric: &str, window_secs: f64) -> Option<Usual>;
    fn poll_failed(&self) -> bool;
}

/// Fewest values a baseline is judged from.
pub const MIN_BASELINE_VALUES: usize = 10;

/// What is usual for a metric over a window: the terms `baseline_W`,
/// `spread_W` and `peak_W` stand for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usual {
    /// The median.
    pub baseline: f64,
    /// 1.4826 times the median absolute deviation: a standard deviation
    /// that a few stalls in the window do not inflate.
    pub spread: f64,
    /// The 99th percentile: the highest it usually reaches, so bursts it
    /// makes every few minutes (a job that opens every table once a
    /// minute) are part of its usual.
    pub peak: f64,
}

impl Usual {
    /// From the window's values (sorted in place, once for all three);
    /// `None` with fewer than [`MIN_BASELINE_VALUES`].
    pub fn of(values: &mut [f64]) -> Option<Usual> {
        if values.len() < MIN_BASELINE_VALUES {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let baseline = values[values.len() / 2];
        let mut dev: Vec<f64> = values.iter().map(|v| (v - baseline).abs()).collect();
        dev.sort_by(f64::total_cmp);
        let p99 = ((values.len() as f64) * 0.99).ceil() as usize;
        Some(Usual { baseline, spread: 1.4826 * dev[dev.len() / 2], peak: values[p99.clamp(1, values.len()) - 1] })
    }
}

/// Parse `500ms`, `2s`, `5m`, `1h` into seconds.
pub fn parse_duration(s: &str) -> Option<f64> {
    let (n, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        return None;
    };
    n.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).map(|v| v * mul)
}

fn term(tok: &str) -> Result<Term, String> {
    if let Some(w) = tok.strip_prefix("baseline_") {
        return parse_duration(w)
            .filter(|&s| s > 0.0)
            .map(Term::Baseline)
            .ok_or_else(|| format!("`{tok}`: a baseline window looks like baseline_5m"));
    }
    if let Some(w) = tok.strip_prefix("spread_") {
        return parse_duration(w)
            .filter(|&s| s > 0.0)
            .map(Term::Spread)
            .ok_or_else(|| format!("`{tok}`: a spread window looks like spread_5m"));
    }
    if let Some(w) = tok.strip_prefix("peak_") {
        return parse_duration(w)
            .filter(|&s| s > 0.0)
            .map(Term::Peak)
            .ok_or_else(|| format!("`{tok}`: a peak window looks like peak_5m"));
    }
    if let Ok(v) = tok.parse::<f64>() {
        return Ok(Term::Num(v));
    }
    if tok.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        // a number with a time unit (replica_lag > 30s)
        return parse_duration(tok).map(Term::Num).ok_or_else(|| format!("`{tok}` is not a number"));
    }
    if tok.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Ok(Term::Metric(tok.to_ascii_lowercase()));
    }
    Err(format!("`{tok}` is not a number, metric name, baseline_WINDOW, spread_WINDOW or peak_WINDOW"))
}

/// A sum of products: `a * b + c`.
fn sum(toks: &[&str]) -> Result<Vec<Vec<Term>>, String> {
    toks.split(|t| *t == "+").map(product).collect()
}

fn product(toks: &[&str]) -> Result<Vec<Term>, String> {
    if toks.is_empty() {
        return Err("missing operand".into());
    }
    let mut out = vec![];
    for (i, t) in toks.iter().enumerate() {
        if i % 2 == 1 {
            if *t != "*" {
                return Err(format!("expected * between terms, found `{t}`"));
            }
        } else {
            out.push(term(t)?);
        }
    }
    if toks.len().is_multiple_of(2) {
        return Err("expression ends with *".into());
    }
    Ok(out)
}

impl Trigger {
    pub fn parse(text: &str) -> Result<Trigger, ParseError> {
        let err = |why: String| ParseError { expr: text.to_string(), why };
        // Tokens: split on whitespace, and make operators stand alone.
        let (name, expr) = match text.split_once(": ") {
            Some((n, e)) if !n.trim().is_empty() => (Some(n.trim().to_string()), e),
            _ => (None, text),
        };
        let spaced = expr.replace(">=", " >= ").replace("<=", " <= ").replace('*', " * ").replace('+', " + ");
        let spaced = spaced
            .split_whitespace()
            .flat_map(|t| {
                if t == ">=" || t == "<=" {
                    vec![t.to_string()]
                } else {
                    t.replace('>', " > ").replace('<', " < ").split_whitespace().map(String::from).collect()
                }
            })
            .collect::<Vec<_>>();
        let mut toks: Vec<&str> = spaced.iter().map(String::as_str).collect();
        let mut hold = 0.0;
        if let Some(p) = toks.iter().position(|t| *t == "for") {
            if p + 2 != toks.len() {
                return Err(err("`for` must be followed by one duration at the end".into()));
            }
            hold = parse_duration(toks[p + 1])
                .ok_or_else(|| err(format!("`{}` is not a duration (500ms, 2s, 5m)", toks[p + 1])))?;
            toks.truncate(p);
        }
        if toks == ["poll_failed"] {
            return Ok(Trigger { text: text.to_string(), name, cond: Cond::PollFailed, hold });
        }
        let Some(opi) = toks.iter().position(|t| matches!(*t, ">" | "<" | ">=" | "<=")) else {
            return Err(err("expected a comparison (>, <, >=, <=) or poll_failed".into()));
        };
        let op = match toks[opi] {
            ">" => Op::Gt,
            ">=" => Op::Ge,
            "<" => Op::Lt,
            _ => Op::Le,
        };
        let lhs = sum(&toks[..opi]).map_err(err)?;
        let rhs = sum(&toks[opi + 1..]).map_err(err)?;
        let has_metric = |v: &[Vec<Term>]| v.iter().flatten().any(|t| matches!(t, Term::Metric(_)));
        if !has_metric(&lhs) {
            return Err(err("the left-hand side must name a metric".into()));
        }
        if lhs.iter().flatten().any(|t| matches!(t, Term::Baseline(_) | Term::Spread(_) | Term::Peak(_))) {
            return Err(err("baseline_W, spread_W and peak_W belong on the right-hand side".into()));
        }
        Ok(Trigger { text: text.to_string(), name, cond: Cond::Cmp { lhs, op, rhs }, hold })
    }

    /// Refuse a trigger naming a metric pileup never derives: it could never
    /// fire, and a typo should not be found out during the stall it missed.
    pub fn check_metrics(&self) -> Result<(), ParseError> {
        for m in self.metrics() {
            if !crate::derive::is_metric(m) {
                let hint = match crate::derive::suggest(m) {
                    Some(s) => format!("did you mean {s}? "),
                    None => String::new(),
                };
                return Err(ParseError {
                    expr: self.text.clone(),
                    why: format!("unknown metric {m} ({hint}pileup watch --list-metrics lists them)"),
                });
            }
        }
        Ok(())
    }

    /// Refuse a trigger naming a metric this server cannot have (`cannot`:
    /// what [`crate::derive::unavailable`] found): it could never fire.
    pub fn check_available(&self, cannot: &[crate::derive::Availability]) -> Result<(), ParseError> {
        for m in self.metrics() {
            if let Some(a) = cannot.iter().find(|a| a.metrics.split(", ").any(|x| x == m)) {
                return Err(ParseError {
                    expr: self.text.clone(),
                    why: format!("{m} cannot exist on this server: {}", a.why),
                });
            }
        }
        Ok(())
    }

    /// The metrics this trigger reads (for the collector to keep).
    pub fn metrics(&self) -> Vec<&str> {
        match &self.cond {
            Cond::PollFailed => vec![],
            Cond::Cmp { lhs, rhs, .. } => lhs
                .iter()
                .chain(rhs)
                .flatten()
                .filter_map(|t| if let Term::Metric(m) = t { Some(m.as_str()) } else { None })
                .collect(),
        }
    }

    /// Is the condition true now? Unknown values make it false.
    pub fn holds(&self, ctx: &dyn Context) -> bool {
        match &self.cond {
            Cond::PollFailed => ctx.poll_failed(),
            Cond::Cmp { lhs, op, rhs } => {
                let left_metric =
                    lhs.iter().flatten().find_map(|t| if let Term::Metric(m) = t { Some(m.as_str()) } else { None });
                // The left metric's usual, asked once per window.
                let asked = std::cell::RefCell::new(Vec::<(f64, Option<Usual>)>::new());
                let usual = |w: f64| -> Option<Usual> {
                    if let Some(u) = asked.borrow().iter().find(|a| a.0 == w) {
                        return u.1;
                    }
                    let u = ctx.usual(left_metric?, w);
                    asked.borrow_mut().push((w, u));
                    u
                };
                let product = |v: &[Term]| -> Option<f64> {
                    v.iter().try_fold(1.0, |acc, t| {
                        Some(
                            acc * match t {
                                Term::Num(n) => *n,
                                Term::Metric(m) => ctx.value(m)?,
                                Term::Baseline(w) => usual(*w)?.baseline,
                                Term::Spread(w) => usual(*w)?.spread,
                                Term::Peak(w) => usual(*w)?.peak,
                            },
                        )
                    })
                };
                let eval =
                    |v: &[Vec<Term>]| -> Option<f64> { v.iter().try_fold(0.0, |acc, p| Some(acc + product(p)?)) };
                match (eval(lhs), eval(rhs)) {
                    (Some(a), Some(b)) => match op {
                        Op::Gt => a > b,
                        Op::Ge => a >= b,
                        Op::Lt => a < b,
                        Op::Le => a <= b,
                    },
                    _ => false,
                }
            }
        }
    }
}

impl Trigger {
    /// What it catches: its name, else its text.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.text)
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A trigger's state across polls: fires once when its condition has held
/// for `hold` seconds, and re-arms when the condition clears.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Armed {
    since: Option<f64>,
    fired: bool,
    /// Polls that have seen the condition since it began to hold.
    polls: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Condition false.
    Idle,
    /// True, but not yet for long enough.
    Pending,
    /// Fired at this poll.
    Fire,
    /// Still true after firing (the stall goes on).
    Ongoing,
}

impl Armed {
    /// When the condition became true (the stall's onset as polls saw it).
    pub fn since(&self) -> Option<f64> {
        self.since
    }

    /// The condition holds and the trigger has not fired yet.
    pub fn in_hold(&self) -> bool {
        self.since.is_some() && !self.fired
    }

    /// How many polls have seen the condition since it began to hold.
    pub fn polls(&self) -> u32 {
        self.polls
    }

    pub fn step(&mut self, t: &Trigger, now: f64, ctx: &dyn Context) -> Step {
        if !t.holds(ctx) {
            *self = Armed::default();
            return Step::Idle;
        }
        let since = *self.since.get_or_insert(now);
        self.polls += 1;
        if self.fired {
            Step::Ongoing
        } else if now - since + 1e-9 >= t.hold {
            self.fired = true;
            Step::Fire
        } else {
            Step::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_trigger_on_a_metric_the_server_cannot_have_is_refused() {
        // MariaDB 10.11: Rows_read, no Innodb_rows_* (MDEV-28539).
        let cannot = crate::derive::unavailable(&|k| k != "innodb_rows_read");
        let t = Trigger::parse("innodb_rows_read_rate > 5 for 1s").unwrap();
        let e = t.check_available(&cannot).unwrap_err();
        assert!(e.why.starts_with("innodb_rows_read_rate cannot exist on this server") && e.why.contains("MDEV-28539"));
        assert!(Trigger::parse("rows_read_rate > 5 for 1s").unwrap().check_available(&cannot).is_ok());
        assert!(t.check_available(&crate::derive::unavailable(&|_| true)).is_ok(), "MySQL has them");
    }

    use super::*;
    use std::collections::HashMap;

    struct Ctx {
        v: HashMap<&'static str, f64>,
        base: Option<f64>,
        failed: bool,
    }
    impl Context for Ctx {
        fn value(&self, m: &str) -> Option<f64> {
            self.v.get(m).copied()
        }
        fn usual(&self, _m: &str, _w: f64) -> Option<Usual> {
            self.base.map(|b| Usual { baseline: b, spread: b / 10.0, peak: b * 1.5 })
        }
        fn poll_failed(&self) -> bool {
            self.failed
        }
    }
    fn ctx(kv: &[(&'static str, f64)], base: Option<f64>, failed: bool) -> Ctx {
        Ctx { v: kv.iter().copied().collect(), base, failed }
    }

    #[test]
    fn parses_the_documented_examples() {
        for t in [
            "threads_running > 32 for 1s",
            "questions_rate < 0.3 * baseline_5m for 2s",
            "poll_failed for 2s",
            "innodb_data_pending_reads>8",
            "replica_lag > 30s",
        ] {
            Trigger::parse(t).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(Trigger::parse("threads_running > 32 for 1500ms").unwrap().hold, 1.5);
        assert!(Trigger::parse("replica_lag > 2m").unwrap().holds(&ctx(&[("replica_lag", 121.0)], None, false)));
        for bad in [
            "threads_running",
            "32 > 5",
            "x > baseline_zz",
            "x > 3 for",
            "x > 3 for 1s extra",
            "x > * 3",
            "baseline_5m < x",
            "x >> 3",
            "a-b > 1",
            "x > 3 +",
            "x + spread_5m > 3",
            "x > spread_zz",
            "x > peak_",
            "peak_5m < x",
        ] {
            assert!(Trigger::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn evaluation_above_below_baseline_and_missing() {
        let t = Trigger::parse("questions_rate < 0.3 * baseline_5m").unwrap();
        assert!(t.holds(&ctx(&[("questions_rate", 100.0)], Some(1000.0), false)));
        assert!(!t.holds(&ctx(&[("questions_rate", 400.0)], Some(1000.0), false)));
        assert!(!t.holds(&ctx(&[("questions_rate", 100.0)], None, false)), "no baseline yet: no trigger");
        assert!(!t.holds(&ctx(&[], Some(1000.0), true)), "a failed poll is not a throughput collapse");
        let p = Trigger::parse("poll_failed").unwrap();
        assert!(p.holds(&ctx(&[], None, true)) && !p.holds(&ctx(&[], None, false)));
        assert_eq!(Trigger::parse("a * 2 >= b").unwrap().metrics(), vec!["a", "b"]);
    }

    #[test]
    fn baseline_and_spread_shrug_off_a_few_outliers() {
        let mut v: Vec<f64> = (0..20).map(|i| 100.0 + (i % 5) as f64).collect();
        v.extend([5000.0, 9000.0]);
        let u = Usual::of(&mut v).unwrap();
        assert_eq!(u.baseline, 102.0);
        assert!((u.spread - 1.4826).abs() < 1e-9, "{}", u.spread);
        assert!(Usual::of(&mut [1.0; 9]).is_none());
        assert_eq!(Usual::of(&mut [0.0; 12]), Some(Usual { baseline: 0.0, spread: 0.0, peak: 0.0 }));
    }

    #[test]
    fn a_peak_takes_in_bursts_that_recur_but_not_one_in_a_hundred() {
        // Five minutes of polls, zero but for a burst of 300 a minute: the
        // bursts are the usual peak, and the median and spread do not see them.
        let mut v: Vec<f64> = (0..300).map(|i| if i % 60 == 0 { 300.0 } else { 0.0 }).collect();
        assert_eq!(Usual::of(&mut v), Some(Usual { baseline: 0.0, spread: 0.0, peak: 300.0 }));
        let mut once: Vec<f64> = (0..300).map(|i| if i == 7 { 300.0 } else { 1.0 }).collect();
        assert_eq!(Usual::of(&mut once).map(|u| u.peak), Some(1.0));
        assert_eq!(Usual::of(&mut [5.0; 10]).map(|u| u.peak), Some(5.0));
        assert!(Usual::of(&mut [5.0; 9]).is_none());
        let t = Trigger::parse("lock waits: pl_waiting_lock > peak_5m + 6 * spread_5m + 3 for 1s").unwrap();
        // Peak 15 (base 10 × 1.5), spread 1: the line is 15 + 6 + 3.
        assert!(t.holds(&ctx(&[("pl_waiting_lock", 24.5)], Some(10.0), false)));
        assert!(!t.holds(&ctx(&[("pl_waiting_lock", 23.5)], Some(10.0), false)));
    }

    #[test]
    fn a_band_around_the_baseline_is_a_sum_of_products_and_a_name_labels_it() {
        let t = Trigger::parse("table-open storm: opened_tables_rate > 2 * baseline_5m + 8 * spread_5m + 100 for 1s")
            .unwrap();
        assert_eq!(t.name.as_deref(), Some("table-open storm"));
        assert_eq!(t.label(), "table-open storm");
        assert_eq!(t.metrics(), vec!["opened_tables_rate"]);
        assert_eq!(t.hold, 1.0);
        // Baseline 1000, spread 100: the line is 2000 + 800 + 100.
        assert!(t.holds(&ctx(&[("opened_tables_rate", 2950.0)], Some(1000.0), false)));
        assert!(!t.holds(&ctx(&[("opened_tables_rate", 2850.0)], Some(1000.0), false)));
        // A metric always at zero: the constant is the line.
        assert!(t.holds(&ctx(&[("opened_tables_rate", 101.0)], Some(0.0), false)));
        assert!(!t.holds(&ctx(&[("opened_tables_rate", 99.0)], Some(0.0), false)));
        assert!(!t.holds(&ctx(&[("opened_tables_rate", 1e9)], None, false)), "no history yet: no trigger");
        assert_eq!(Trigger::parse("a > 1").unwrap().label(), "a > 1");
        assert!(Trigger::parse("x + y > 3").unwrap().holds(&ctx(&[("x", 2.0), ("y", 2.0)], None, false)));
    }

    #[test]
    fn a_rate_compares_with_a_share_of_another_metric() {
        let t = Trigger::parse("mysqld_rss_growth_rate > 0.02 * memory_limit_bytes for 5s").unwrap();
        let gib = 1024.0 * 1024.0 * 1024.0;
        assert!(t.holds(&ctx(
            &[("mysqld_rss_growth_rate", 0.5 * gib), ("memory_limit_bytes", 16.0 * gib)],
            None,
            false
        )));
        assert!(!t.holds(&ctx(
            &[("mysqld_rss_growth_rate", 0.1 * gib), ("memory_limit_bytes", 16.0 * gib)],
            None,
            false
        )));
        assert!(!t.holds(&ctx(&[("mysqld_rss_growth_rate", 0.5 * gib)], None, false)), "no limit known: no trigger");
        assert_eq!(t.hold, 5.0);
    }

    #[test]
    fn fires_once_after_the_hold_and_rearms() {
        let t = Trigger::parse("threads_running > 32 for 2s").unwrap();
        let hi = ctx(&[("threads_running", 40.0)], None, false);
        let lo = ctx(&[("threads_running", 5.0)], None, false);
        let mut a = Armed::default();
        assert_eq!(a.step(&t, 0.0, &hi), Step::Pending);
        assert_eq!(a.step(&t, 1.0, &hi), Step::Pending);
        assert!(a.in_hold());
        assert_eq!(a.step(&t, 2.0, &hi), Step::Fire);
        assert!(!a.in_hold(), "fired");
        assert_eq!(a.step(&t, 3.0, &hi), Step::Ongoing);
        assert_eq!(a.step(&t, 4.0, &lo), Step::Idle);
        assert!(!a.in_hold());
        assert_eq!(a.step(&t, 5.0, &hi), Step::Pending);
        // No hold: fires at the first poll that sees it.
        let t0 = Trigger::parse("threads_running > 32").unwrap();
        assert_eq!(Armed::default().step(&t0, 9.0, &hi), Step::Fire);
    }
}
