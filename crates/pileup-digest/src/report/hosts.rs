//! The hosts dimension of a fleet's merged digest: each host's statement
//! time and top classes, and for each top class the hosts it costs most
//! on.

use std::fmt::Write;

use serde_json::{json, Value};

use super::{id, utc, View};
use crate::class::Class;
use crate::fleet::merge::{Cost, Hosts};
use crate::rank;
use crate::Digest;

/// Classes named per host, and hosts per class.
const TOP: usize = 3;

fn share(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.0}%", part / whole * 100.0)
    } else {
        "-".into()
    }
}

fn secs(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}s")
    } else if v >= 1.0 {
        format!("{v:.2}s")
    } else {
        format!("{:.2}ms", v * 1e3)
    }
}

/// The top classes of the view, as the profile ranks them.
fn ranked<'a>(d: &'a Digest, v: &View) -> Vec<&'a Class> {
    rank::order(&d.classes, v.rank).into_iter().filter(|c| rank::score(c, v.rank).is_some()).take(v.limit).collect()
}

/// One host's line: its time, share and top classes.
fn host_line(h: &Hosts, name: &str, cost: Cost, total: f64) -> String {
    let top: Vec<String> = h
        .top_of(name, TOP)
        .into_iter()
        .map(|(fp, c)| format!("{} {}", &id(fp)[..10], share(c.time, cost.time)))
        .collect();
    format!("{:>9} {:>5} {:>9}  {}", secs(cost.time), share(cost.time, total), cost.count, top.join(", "))
}

/// A class's hosts, most time first: `db-a 60% (7.40s), db-b 30% (3.70s), 2 more`.
fn class_hosts(h: &Hosts, c: &Class) -> String {
    let Some(hs) = h.by_class.get(&c.fingerprint) else { return String::new() };
    let time: f64 = hs.iter().map(|(_, c)| c.time).sum();
    let mut parts: Vec<String> =
        hs.iter().take(TOP).map(|(n, k)| format!("{n} {} ({})", share(k.time, time), secs(k.time))).collect();
    if hs.len() > TOP {
        parts.push(format!("{} more", hs.len() - TOP));
    }
    parts.join(", ")
}

/// The text section.
pub fn text(h: &Hosts, d: &Digest, v: &View) -> String {
    let mut o = String::new();
    let total = d.total_time();
    let _ = write!(o, "\n# Hosts: {}", h.hosts.len());
    if let Some((a, b)) = h.span {
        let _ = write!(o, ", minutes {} to {} (UTC)", utc(a), utc(b + 60));
    }
    let width = h.hosts.keys().map(|k| k.chars().count()).max().unwrap_or(4).clamp(4, 40);
    let _ = writeln!(
        o,
        "\n# {:<width$} {:>9} {:>5} {:>9}  top classes (share of the host's time)",
        "host", "time", "share", "count"
    );
    let mut hosts: Vec<(&String, Cost)> = h.hosts.iter().map(|(n, x)| (n, x.total)).collect();
    hosts.sort_by(|a, b| b.1.time.total_cmp(&a.1.time).then_with(|| a.0.cmp(b.0)));
    for (name, cost) in hosts {
        let _ = writeln!(o, "  {name:<width$} {}", host_line(h, name, cost, total));
    }
    let _ = writeln!(o, "\n# Where the top classes cost (share of the class's time)");
    for c in ranked(d, v) {
        let _ = writeln!(o, "  {}  {}", id(&c.fingerprint), class_hosts(h, c));
    }
    o
}

/// Each host's entry for the JSON report.
pub fn json(h: &Hosts) -> Value {
    let hosts: Vec<Value> = h
        .hosts
        .iter()
        .map(|(name, x)| {
            // Not read (the profile alone): unknown, not none.
            let labels = h.labels.then(|| {
                x.labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect::<serde_json::Map<_, _>>()
            });
            let top: Vec<Value> = h
                .top_of(name, 10)
                .into_iter()
                .map(|(fp, c)| json!({"id": id(fp), "count": c.count, "time": round(c.time)}))
                .collect();
            json!({
                "host": name,
                "labels": labels,
                "count": x.total.count,
                "time": round(x.total.time),
                "minutes": x.minutes.len(),
                "top_classes": top,
            })
        })
        .collect();
    json!({
        "first_minute": h.span.map(|s| utc(s.0)),
        "last_minute": h.span.map(|s| utc(s.1)),
        "hosts": hosts,
    })
}

/// A class's hosts for the JSON report, most time first.
pub fn servers(h: &Hosts, fingerprint: &[u8]) -> Value {
    let hs = h.by_class.get(fingerprint).map(Vec::as_slice).unwrap_or_default();
    Value::Array(hs.iter().map(|(n, c)| json!({"host": n, "count": c.count, "time": round(c.time)})).collect())
}

fn round(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

/// The HTML section: the text section's two tables.
pub fn html(h: &Hosts, d: &Digest, v: &View, esc: impl Fn(&str) -> String) -> String {
    let total = d.total_time();
    let mut s = String::from(
        "<h2 id=\"hosts\">Hosts</h2><table><tr><th>host</th><th>time</th><th>share</th><th>count</th><th>top classes</th></tr>",
    );
    let mut hosts: Vec<(&String, Cost)> = h.hosts.iter().map(|(n, x)| (n, x.total)).collect();
    hosts.sort_by(|a, b| b.1.time.total_cmp(&a.1.time).then_with(|| a.0.cmp(b.0)));
    for (name, cost) in hosts {
        let top: Vec<String> =
            h.top_of(name, TOP).into_iter().map(|(fp, c)| format!("{} {}", id(fp), share(c.time, cost.time))).collect();
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(name),
            secs(cost.time),
            share(cost.time, total),
            cost.count,
            esc(&top.join(", "))
        );
    }
    s.push_str(
        "</table><h2 id=\"class-hosts\">Where the top classes cost</h2><table><tr><th>class</th><th>hosts</th></tr>",
    );
    for c in ranked(d, v) {
        let _ = write!(s, "<tr><td>{}</td><td>{}</td></tr>", id(&c.fingerprint), esc(&class_hosts(h, c)));
    }
    s.push_str("</table>");
    s
}

fn ratio_text(r: Option<crate::fleet::compare::Ratio>) -> String {
    match r {
        Some(r) if r.low.is_finite() => format!("{:.2}x [{:.2}x, {:.2}x]", r.ratio, r.low, r.high),
        Some(r) => format!("{:.2}x", r.ratio),
        None => "-".into(),
    }
}

/// What a change amounts to, in a few words.
fn verdict(c: &crate::fleet::compare::Change) -> &'static str {
    match c.per_execution {
        _ if c.new => "new",
        None => "gone",
        Some(r) if r.low > 1.0 => "slower",
        Some(r) if r.high < 1.0 => "faster",
        Some(r) if !r.has_interval() => "too few host-minutes to settle",
        Some(_) => "within noise",
    }
}

/// The text section of a comparison: the first `limit` classes.
pub fn changes_text(ch: &crate::fleet::compare::Changes, limit: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\n# Changes: {} to {} against {} to {} (UTC; 95% intervals, bootstrap over each class's host-minutes)",
        utc(ch.after.0),
        utc(ch.after.1),
        utc(ch.before.0),
        utc(ch.before.1)
    );
    let _ = writeln!(
        o,
        "# {:<18} {:<26} {:<26} {:>9}  fingerprint",
        "class", "time per execution", "executions per minute", "adds"
    );
    for c in ch.classes.iter().take(limit) {
        let adds = if c.added_s != 0.0 { format!("{:+.3}s", c.added_s) } else { "-".into() };
        let _ = writeln!(
            o,
            "  {:<18} {:<26} {:<26} {:>9}  {}: {}",
            id(c.fingerprint.as_bytes()),
            ratio_text(c.per_execution),
            ratio_text(c.rate),
            adds,
            verdict(c),
            super::text::one_line(c.fingerprint.as_bytes(), 60)
        );
    }
    o
}

/// The JSON of a comparison: every class, with its id and verdict.
pub fn changes_json(ch: &crate::fleet::compare::Changes) -> Value {
    let classes: Vec<Value> = ch
        .classes
        .iter()
        .map(|c| {
            let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("id".into(), Value::String(id(c.fingerprint.as_bytes())));
                m.insert("verdict".into(), Value::String(verdict(c).into()));
            }
            v
        })
        .collect();
    json!({
        "window": {"since": utc(ch.after.0), "until": utc(ch.after.1)},
        "before": {"since": utc(ch.before.0), "until": utc(ch.before.1)},
        "classes": classes,
    })
}
