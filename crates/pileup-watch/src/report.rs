//! Report: one self-contained `report.html` per capture (no network needed
//! to view it): the verdict first, time charts of the key metrics around the
//! trigger, the flame graph of the stall's stacks, stack groups with the
//! connections and statements behind them, lock waits, the processlist and
//! InnoDB status. Rebuilt from the capture's files by `pileup report DIR`,
//! and again by the watcher once the metrics after the stall are in.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::capture::{stamp, RowLockWait};
use crate::store::Row;

/// What a capture saved besides stacks and metrics (`evidence.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvidenceFile {
    pub trigger: String,
    pub unix: f64,
    pub verdict: String,
    pub sql_error: Option<String>,
    pub stacks_error: Option<String>,
    pub processlist: Vec<BTreeMap<String, String>>,
    pub row_lock_waits: Vec<RowLockWait>,
    pub root_blockers: Vec<(u64, usize)>,
    pub mdl: Option<Vec<(u64, String, String, String)>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct MetricRow {
    unix: f64,
    ok: bool,
    cost_ms: f64,
    error: Option<String>,
    derived: BTreeMap<String, f64>,
}

pub fn write_metrics(dir: &Path, history: &[Row]) -> Result<()> {
    let rows: Vec<MetricRow> = history
        .iter()
        .map(|r| MetricRow {
            unix: r.unix,
            ok: r.ok,
            cost_ms: r.cost_ms,
            error: r.error.clone(),
            derived: r.derived.clone(),
        })
        .collect();
    pileup_files::write_private(&dir.join("metrics.json"), |w| Ok(serde_json::to_writer(w, &rows)?))?;
    Ok(())
}

/// Charts drawn, in order: (metric, title).
const CHARTS: &[(&str, &str)] = &[
    ("questions_rate", "Questions per second"),
    ("threads_running", "Threads running"),
    ("pl_waiting_lock", "Connections waiting for a metadata, table or global lock"),
    ("innodb_row_lock_current_waits", "Connections waiting for a row lock"),
    ("pl_active_longest_s", "Longest running statement (s)"),
    ("poll_cost_ms", "Poll time (ms): how long the server took to answer"),
    ("innodb_rows_read_rate", "InnoDB rows read per second"),
    ("innodb_buffer_pool_reads_rate", "Buffer pool reads from disk per second"),
    ("os_cpu_busy_pct", "Host CPU busy (%)"),
    ("mysqld_cpu_cores", "Server CPU (cores)"),
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// An inline SVG line chart of `metric` against seconds from the trigger,
/// with failed polls marked in red at the bottom.
fn chart(rows: &[MetricRow], metric: &str, title: &str, t0: f64) -> Option<String> {
    let pts: Vec<(f64, f64)> = rows.iter().filter_map(|r| r.derived.get(metric).map(|v| (r.unix - t0, *v))).collect();
    if pts.len() < 2 {
        return None;
    }
    let (w, h, pad) = (640.0, 140.0, 36.0);
    let xmin = rows.iter().map(|r| r.unix - t0).fold(f64::INFINITY, f64::min).min(0.0);
    let xmax = rows.iter().map(|r| r.unix - t0).fold(f64::NEG_INFINITY, f64::max).max(1.0);
    let ymax = pts.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let x = |t: f64| pad + (t - xmin) / (xmax - xmin) * (w - 2.0 * pad);
    let y = |v: f64| h - pad / 2.0 - v / ymax * (h - pad);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<figure><figcaption>{}</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{}">"#,
        esc(title),
        esc(title)
    );
    let _ = write!(s, r##"<rect x="0" y="0" width="{w}" height="{h}" fill="#fafafa"/>"##);
    let _ = write!(
        s,
        r##"<line x1="{0}" y1="4" x2="{0}" y2="{1}" stroke="#d33" stroke-width="1.5"/><text x="{2}" y="14" font-size="11" fill="#d33">trigger</text>"##,
        x(0.0),
        h - pad / 2.0,
        x(0.0) + 4.0
    );
    let poly: Vec<String> = pts.iter().map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v))).collect();
    let _ = write!(s, r##"<polyline fill="none" stroke="#1565c0" stroke-width="1.6" points="{}"/>"##, poly.join(" "));
    for r in rows.iter().filter(|r| !r.ok) {
        let _ = write!(
            s,
            r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="#d33"><title>poll failed: {}</title></circle>"##,
            x(r.unix - t0),
            h - pad / 2.0,
            esc(r.error.as_deref().unwrap_or(""))
        );
    }
    let _ = write!(
        s,
        r##"<text x="2" y="{:.1}" font-size="10" fill="#555">{}</text><text x="2" y="{:.1}" font-size="10" fill="#555">0</text><text x="{pad}" y="{h}" font-size="10" fill="#555">{:+.0}s</text><text x="{:.1}" y="{h}" font-size="10" fill="#555" text-anchor="end">{:+.0}s</text></svg></figure>"##,
        y(ymax / 1.1) + 4.0,
        fmt_num(ymax / 1.1),
        h - pad / 2.0,
        xmin,
        w - pad,
        xmax
    );
    Some(s)
}

fn fmt_num(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// (Re)write `report.html` from the files in a capture directory.
pub fn write_html(dir: &Path) -> Result<()> {
    let ev: EvidenceFile = serde_json::from_slice(
        &std::fs::read(dir.join("evidence.json"))
            .with_context(|| format!("{}: not a pileup capture (no evidence.json)", dir.display()))?,
    )?;
    let rows: Vec<MetricRow> =
        std::fs::read(dir.join("metrics.json")).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).ok();
    let mut h = String::new();
    let _ = write!(
        h,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>pileup capture: {}</title><style>
body{{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1300px}}
.verdict{{font-size:18px;background:#fff3e0;border-left:6px solid #e65100;padding:12px 16px;margin:8px 0 16px}}
.charts{{display:flex;flex-wrap:wrap;gap:12px}} figure{{margin:0}} figcaption{{font-weight:600;font-size:13px}}
pre{{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}} h2{{margin-top:28px}}
img.flame{{max-width:100%;border:1px solid #ddd}}
</style></head><body>"#,
        esc(&ev.trigger)
    );
    let _ = write!(h, "<h1>pileup capture</h1><div class=\"verdict\" id=\"verdict\">{}</div>", esc(&ev.verdict));
    let _ = write!(h, "<p>Trigger <code>{}</code> fired at {} UTC.", esc(&ev.trigger), stamp(ev.unix));
    if let Some(e) = &ev.sql_error {
        let _ = write!(h, " SQL did not answer: {}.", esc(e));
    }
    if let Some(e) = &ev.stacks_error {
        let _ = write!(h, " Stacks were not captured: {}.", esc(e));
    }
    h.push_str(" This file holds query text: keep it private.</p>");
    h.push_str("<h2>Metrics around the trigger</h2><div class=\"charts\">");
    let charts: Vec<String> = CHARTS.iter().filter_map(|(m, t)| chart(&rows, m, t, ev.unix)).collect();
    if charts.is_empty() {
        h.push_str("<p>No metric history was recorded before this capture.</p>");
    }
    for c in charts {
        h.push_str(&c);
    }
    h.push_str("</div>");
    if !ev.root_blockers.is_empty() {
        h.push_str("<h2>Row lock waits</h2><table><tr><th>blocking connection</th><th>transactions waiting</th></tr>");
        for (b, n) in &ev.root_blockers {
            let _ = write!(h, "<tr><td>{b}</td><td>{n}</td></tr>");
        }
        h.push_str("</table>");
    }
    if let Some(m) = &ev.mdl {
        h.push_str(
            "<h2>Metadata locks</h2><table><tr><th>connection</th><th>mode</th><th>type</th><th>object</th></tr>",
        );
        for (t, mode, ty, obj) in m {
            let _ = write!(h, "<tr><td>{t}</td><td>{}</td><td>{}</td><td>{}</td></tr>", esc(mode), esc(ty), esc(obj));
        }
        h.push_str("</table>");
    }
    if let Ok(svg) = std::fs::read(dir.join("flamegraph.svg")) {
        let b64 = base64::engine::general_purpose::STANDARD.encode(svg);
        let _ = write!(h, "<h2>Flame graph of the stall's stacks</h2><p>Rooted at each thread's role. The interactive version is <code>flamegraph.svg</code> next to this file.</p><img class=\"flame\" alt=\"flame graph\" src=\"data:image/svg+xml;base64,{b64}\">");
    }
    if let Some(t) = read("stacks.txt") {
        let _ =
            write!(h, "<h2>Stack groups, with the connections and statements behind them</h2><pre>{}</pre>", esc(&t));
    }
    if !ev.processlist.is_empty() {
        h.push_str("<h2>Processlist</h2><table><tr><th>id</th><th>user</th><th>db</th><th>command</th><th>time</th><th>state</th><th>statement</th></tr>");
        for r in ev.processlist.iter().take(200) {
            let g = |k: &str| esc(r.get(k).map(String::as_str).unwrap_or(""));
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                g("id"),
                g("user"),
                g("db"),
                g("command"),
                g("time"),
                g("state"),
                g("info")
            );
        }
        h.push_str("</table>");
    }
    if let Some(s) = read("innodb_status.txt") {
        let _ = write!(
            h,
            "<h2>InnoDB status</h2><details><summary>SHOW ENGINE INNODB STATUS</summary><pre>{}</pre></details>",
            esc(&s)
        );
    }
    h.push_str("</body></html>\n");
    pileup_files::write_private_bytes(&dir.join("report.html"), h.as_bytes())?;
    Ok(())
}

/// Refresh a capture's metrics from the store (now including what came
/// after the trigger) and rebuild its report.
pub fn refresh(dir: &Path, store: &crate::store::Store, before: f64, after: f64) -> Result<()> {
    let ev: EvidenceFile = serde_json::from_slice(&std::fs::read(dir.join("evidence.json"))?)?;
    let rows = store.range(ev.unix - before, ev.unix + after)?;
    write_metrics(dir, &rows)?;
    write_html(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_marks_trigger_and_failed_polls() {
        let rows: Vec<MetricRow> = (0..20)
            .map(|i| MetricRow {
                unix: 100.0 + i as f64,
                ok: i != 15,
                cost_ms: 1.0,
                error: (i == 15).then(|| "timeout".into()),
                derived: [("questions_rate".to_string(), if i < 10 { 1000.0 } else { 50.0 })].into(),
            })
            .collect();
        let c = chart(&rows, "questions_rate", "Questions <per> second", 110.0).unwrap();
        assert!(c.contains("<polyline") && c.contains("trigger") && c.contains("poll failed: timeout"));
        assert!(c.contains("Questions &lt;per&gt; second"));
        assert_eq!(c.matches("<circle").count(), 1);
        assert!(chart(&rows, "missing_metric", "x", 110.0).is_none());
    }
}
