//! A self-contained `report.html` (no network needed to view it, styled
//! like `pileup watch`'s capture reports): the summary, the profile, and
//! for each top class its attributes, a histogram of its statement times,
//! when it ran, and its slowest sample with the logged EXPLAIN.

use std::fmt::Write;

use super::{id, unavailable, utc, View};
use crate::attr::{Unit, A, ATTRS, FLAGS};
use crate::class::Class;
use crate::rank::{self, Rank};
use crate::Digest;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn secs(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 1.0 {
        format!("{v:.2} s")
    } else if v >= 0.001 {
        format!("{:.2} ms", v * 1e3)
    } else {
        format!("{:.0} µs", v * 1e6)
    }
}

fn num(v: f64, unit: Unit) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    match unit {
        Unit::Seconds => secs(v),
        _ if v.fract() == 0.0 => format!("{v:.0}"),
        _ => format!("{v:.1}"),
    }
}

/// Bars of the statement-time histogram (log buckets, as kept).
fn histogram(c: &Class) -> Option<String> {
    let st = c.stat(A::QueryTime)?;
    let b: Vec<(f64, u32)> = st.hist.buckets().collect();
    if b.is_empty() {
        return None;
    }
    let (w, h, pad) = (420.0, 120.0, 24.0);
    let max = b.iter().map(|x| x.1).max().unwrap_or(1) as f64;
    let bw = (w - 2.0 * pad) / b.len() as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<figure><figcaption>Statement time: how many took how long</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="statement time histogram"><rect width="{w}" height="{h}" fill="#fafafa"/>"##
    );
    for (i, (lo, n)) in b.iter().enumerate() {
        let bh = (f64::from(*n) / max) * (h - 2.0 * pad);
        let x = pad + i as f64 * bw;
        let _ = write!(
            s,
            r##"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="#1565c0"><title>{n} at {} and above</title></rect>"##,
            h - pad - bh,
            (bw - 1.0).max(1.0),
            esc(&secs(*lo))
        );
    }
    let (first, last) = (b[0].0, b[b.len() - 1].0);
    let _ = write!(
        s,
        r##"<text x="{pad}" y="{}" font-size="11">{}</text><text x="{}" y="{}" font-size="11" text-anchor="end">{}</text></svg></figure>"##,
        h - 6.0,
        esc(&secs(first)),
        w - pad,
        h - 6.0,
        esc(&secs(last))
    );
    Some(s)
}

/// Statements per slice of time, as columns.
fn timeline(c: &Class) -> Option<String> {
    let p = &c.series.points;
    if p.len() < 2 {
        return None;
    }
    let (w, h, pad) = (420.0, 120.0, 24.0);
    let width = i64::try_from(c.series.width).unwrap_or(i64::MAX);
    let (t0, t1) = (p[0].0, p[p.len() - 1].0 + width);
    let max = p.iter().map(|x| x.1).max().unwrap_or(1) as f64;
    let x = |t: i64| pad + (t - t0) as f64 / (t1 - t0) as f64 * (w - 2.0 * pad);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<figure><figcaption>When it ran: statements per {} s</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="statements over time"><rect width="{w}" height="{h}" fill="#fafafa"/>"##,
        width
    );
    for &(start, n, t) in p {
        let bh = (f64::from(n) / max) * (h - 2.0 * pad);
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="#2e7d32"><title>{} UTC: {n} statements, {}</title></rect>"##,
            x(start),
            h - pad - bh,
            (x(start + width) - x(start) - 1.0).max(1.0),
            utc(start),
            esc(&secs(f64::from(t)))
        );
    }
    let _ = write!(
        s,
        r##"<text x="{pad}" y="{}" font-size="11">{}</text><text x="{}" y="{}" font-size="11" text-anchor="end">{}</text></svg></figure>"##,
        h - 6.0,
        utc(t0),
        w - pad,
        h - 6.0,
        utc(t1)
    );
    Some(s)
}

/// The report; `advice`, the advisor's findings when it ran.
/// A fleet's parts of the page (`--from`, `--compare-to`).
#[derive(Default)]
pub struct Fleet<'a> {
    pub hosts: Option<&'a crate::fleet::merge::Hosts>,
    pub changes: Option<&'a crate::fleet::compare::Changes>,
}

pub fn render(
    d: &Digest,
    v: &View,
    advice: Option<&[crate::advise::Advice]>,
    indexes: Option<&crate::advise::index::IndexAdvice>,
    fleet: Fleet,
) -> String {
    let total = d.total_time();
    let ranked: Vec<&Class> = rank::order(&d.classes, v.rank)
        .into_iter()
        .filter(|c| rank::score(c, v.rank).is_some())
        .take(v.limit)
        .collect();
    let about = Rank::ALL.iter().find(|r| r.1 == v.rank).map_or("", |r| r.2);
    let mut h = String::new();
    let _ = write!(
        h,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>pileup digest</title><style>
body{{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1300px}}
.summary{{font-size:16px;background:#e3f2fd;border-left:6px solid #1565c0;padding:12px 16px;margin:8px 0 16px}}
.charts{{display:flex;flex-wrap:wrap;gap:12px}} figure{{margin:0}} figcaption{{font-weight:600;font-size:13px}}
pre{{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px;white-space:pre-wrap}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}} td.n{{text-align:right}} h2{{margin-top:28px}}
.note{{color:#6d4c41}}
</style></head><body><h1>pileup digest</h1>"#
    );
    let _ = write!(
        h,
        r#"<div class="summary" id="summary">{} statements in {} classes, {} of statement time, from {}.</div>"#,
        d.events,
        d.classes.len() + usize::from(d.other.is_some()),
        esc(&secs(total)),
        esc(&d.inputs.join(", "))
    );
    if let Some(o) = &d.other {
        let _ = write!(
            h,
            r#"<p class="note">{} statements of further fingerprints are counted together as "other": more than {} classes (--max-classes).</p>"#,
            o.count, d.max_classes
        );
    }
    if d.problem_count > 0 {
        let _ = write!(
            h,
            r#"<p class="note">{} in the input:</p><ul>"#,
            pileup_output::plural(d.problem_count, "problem", "problems")
        );
        for p in &d.problems {
            let _ = write!(h, "<li>{}:{}: {}</li>", esc(&p.file), p.line, esc(&p.what));
        }
        h.push_str("</ul>");
    }
    for u in unavailable(d, v) {
        let _ = write!(h, r#"<p class="note">No {}: {}</p>"#, esc(u.attr), esc(u.why));
    }
    for n in &d.notes {
        let _ = write!(h, r#"<p class="note">{}</p>"#, esc(n));
    }
    let _ = write!(
        h,
        "<h2>Profile, ranked by {}</h2><table id=\"profile\"><tr><th>rank</th><th>class</th><th>time</th><th>share</th><th>calls</th><th>mean</th><th>p95</th><th>rows examined per row</th><th>pages per row</th><th>outside the engine</th><th>spills</th><th>statement</th></tr>",
        esc(about)
    );
    for (i, c) in ranked.iter().enumerate() {
        let qt = c.stat(A::QueryTime);
        let _ = write!(
            h,
            "<tr><td class=n>{}</td><td><a href=\"#c{}\">{}</a></td><td class=n>{}</td><td class=n>{:.1}%</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td><code>{}</code></td></tr>",
            i + 1,
            i + 1,
            id(&c.fingerprint),
            esc(&secs(c.sum(A::QueryTime))),
            if total > 0.0 { c.sum(A::QueryTime) / total * 100.0 } else { 0.0 },
            c.count,
            qt.as_ref().map_or("-".into(), |s| esc(&secs(s.mean()))),
            qt.as_ref().map_or("-".into(), |s| esc(&secs(s.quantile(0.95, false)))),
            rank::examined_per_row(c).map_or("-".into(), |v| format!("{v:.1}")),
            rank::pages_per_row(c).map_or("-".into(), |v| format!("{v:.1}")),
            rank::optimizer_share(c).map_or("-".into(), |v| format!("{:.0}%", v * 100.0)),
            rank::spills(c),
            esc(&String::from_utf8_lossy(&c.fingerprint).chars().take(160).collect::<String>())
        );
    }
    h.push_str("</table>");
    for (i, c) in ranked.iter().enumerate() {
        h.push_str(&class_section(d, i, c, total));
    }
    h.push_str(&sections(d, v, advice, indexes, fleet));
    h.push_str("</body></html>\n");
    h
}

/// One class's section: its share of the time, charts, attributes, plan
/// flags, where it came from, its slowest sample and that sample's EXPLAIN.
fn class_section(d: &Digest, i: usize, c: &Class, total: f64) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<h2 id=\"c{}\">Class {}: {}</h2><p>{} calls, {:.1}% of the time{}.</p><pre>{}</pre><div class=\"charts\">",
        i + 1,
        i + 1,
        id(&c.fingerprint),
        c.count,
        if total > 0.0 { c.sum(A::QueryTime) / total * 100.0 } else { 0.0 },
        match (c.first, c.last) {
            (Some(f), Some(l)) => format!(", seen {} to {} UTC", utc(f), utc(l)),
            _ => String::new(),
        },
        esc(&String::from_utf8_lossy(&c.fingerprint))
    );
    for fig in [histogram(c), timeline(c)].into_iter().flatten() {
        h.push_str(&fig);
    }
    h.push_str("</div><table><tr><th>attribute</th><th>total</th><th>min</th><th>max</th><th>mean</th><th>p95</th><th>p99</th></tr>");
    for (a, s) in c.stats().filter(|(_, s)| s.sum != 0.0) {
        let at = &ATTRS[a];
        let int = at.unit != Unit::Seconds;
        let _ = write!(
            h,
            "<tr><td title=\"{}\">{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>",
            esc(at.about),
            at.name,
            esc(&num(s.sum, at.unit)),
            esc(&num(s.min, at.unit)),
            esc(&num(s.max, at.unit)),
            esc(&num(s.mean(), at.unit)),
            esc(&num(s.quantile(0.95, int), at.unit)),
            esc(&num(s.quantile(0.99, int), at.unit))
        );
    }
    h.push_str("</table>");
    let flags: Vec<String> = FLAGS
        .iter()
        .zip(&c.flags)
        .filter(|(_, (seen, yes))| *seen > 0 && *yes > 0)
        .map(|((name, about), (seen, yes))| {
            format!("<span title=\"{}\">{name} {:.0}%</span>", esc(about), f64::from(*yes) / f64::from(*seen) * 100.0)
        })
        .collect();
    if !flags.is_empty() {
        let _ = write!(h, "<p>Plan: {}</p>", flags.join(", "));
    }
    let few = |f: &crate::class::Few| {
        f.sorted()
            .into_iter()
            .map(|(v, n)| format!("{} ({n})", esc(if v.is_empty() { "(none)" } else { &v })))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = write!(h, "<p>Databases: {}. Hosts: {}. Users: {}.</p>", few(&c.dbs), few(&c.hosts), few(&c.users));
    let (input, line) = c.sample.at;
    if c.sample.query.is_empty() {
        return h;
    }
    if line == 0 {
        let _ = write!(h, "<p>Sample (from {}):</p>", esc(d.inputs.get(input).map_or("?", String::as_str)));
    } else {
        let _ = write!(
            h,
            "<p>Slowest sample: {} ({}:{}):</p>",
            esc(&secs(c.sample.query_time)),
            esc(d.inputs.get(input).map_or("?", String::as_str)),
            line
        );
    }
    let _ = write!(h, "<pre>{}</pre>", esc(&String::from_utf8_lossy(&c.sample.query)));
    let explain: Vec<&[u8]> = c.sample.explain_lines().collect();
    if !explain.is_empty() {
        h.push_str("<table class=\"explain\">");
        for (k, l) in explain.iter().enumerate() {
            let cell = if k == 0 { "th" } else { "td" };
            h.push_str("<tr>");
            for col in String::from_utf8_lossy(l).split('\t') {
                let _ = write!(h, "<{cell}>{}</{cell}>", esc(col));
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
    }
    h
}

/// The sections after the classes: advice, index advice, a fleet's hosts
/// and changes.
fn sections(
    d: &Digest,
    v: &View,
    advice: Option<&[crate::advise::Advice]>,
    indexes: Option<&crate::advise::index::IndexAdvice>,
    fleet: Fleet,
) -> String {
    let mut h = String::new();
    if let Some(adv) = advice {
        let _ = write!(h, "<h2 id=\"advice\">Plan advice</h2><pre>{}</pre>", esc(&super::text::render_advice(adv)));
    }
    if let Some(ix) = indexes {
        let _ = write!(
            h,
            "<h2 id=\"index-advice\">Index advice</h2><pre>{}</pre>",
            esc(&super::indexes::render_index_advice(ix))
        );
    }
    if let Some(hs) = fleet.hosts {
        h.push_str(&super::hosts::html(hs, d, v, esc));
    }
    if let Some(c) = fleet.changes {
        let text = super::hosts::changes_text(c, v.limit);
        let _ = write!(h, "<h2 id=\"changes\">Changes</h2><pre>{}</pre>", esc(&text));
    }
    h
}
