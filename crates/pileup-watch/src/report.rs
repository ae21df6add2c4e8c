//! Report: one self-contained `report.html` per capture (no network needed
//! to view it): the verdict first, time charts of the key metrics around the
//! trigger, the flame graph of the stall's stacks, stack groups with the
//! connections and statements behind them, lock waits, the processlist and
//! InnoDB status. Rendered from the capture's files as
//! [`crate::capture_dir::read`] gives them back, by `pileup report DIR` and
//! again by the watcher once the metrics after the stall are in; and the
//! text report, `report.txt`.

use std::fmt::Write as _;
use std::path::Path;

use crate::error::Result;
use base64::Engine;
use pileup_output::{render, Format, Options};

use crate::capture_dir::{Capture, MetricRow};
use crate::evidence::{pl_summary, stamp, stamp_tenths, Evidence};
use crate::holder::{LockPileup, Sureness, EXACT_HINT};
use crate::verdict::root_blockers;

/// Charts drawn, in order: (metric, title).
const CHARTS: &[(&str, &str)] = &[
    ("questions_rate", "Questions per second"),
    ("threads_running", "Threads running"),
    ("pl_waiting_lock", "Connections waiting for a metadata, table or global lock"),
    ("innodb_row_lock_current_waits", "Connections waiting for a row lock"),
    ("pl_active_longest_s", "Longest running statement (s)"),
    ("poll_cost_ms", "Poll time (ms): how long the server took to answer"),
    ("rows_read_rate", "Rows read per second"),
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

/// The thread scan's pile-up that a stall beginning at `onset` is: one
/// under way then (the onset is timed to the poll or to the scan, so up to
/// one scan interval either side).
fn stall_around<'a>(
    stalls: &'a [crate::scan::Stall],
    onset: f64,
    (trigger, unix): (&str, f64),
) -> Option<&'a crate::scan::Stall> {
    // The longest of the pile-up the scan timed under way at the onset and
    // the episode of the trigger that fired (which may begin after a
    // pile-up the scan saw first); only without either, the longest
    // episode of another trigger under way (a capture of repeated short
    // stalls is about the scan's pile-up: a trigger's episode of the same
    // pile-up, timed only to its polls, ends later).
    let fired = |st: &crate::scan::Stall| {
        st.what.as_deref().is_some_and(|w| trigger == w || trigger.starts_with(&format!("{w}:")))
            && st.began_unix <= unix
            && st.ended_unix >= unix
    };
    let under_way = |st: &&crate::scan::Stall| st.began_unix <= onset + 0.15 && st.ended_unix > onset;
    let longest = |a: &&crate::scan::Stall, b: &&crate::scan::Stall| a.ms().total_cmp(&b.ms());
    stalls
        .iter()
        .filter(|st| fired(st) || (under_way(st) && st.what.is_none()))
        .max_by(longest)
        .or_else(|| stalls.iter().filter(under_way).max_by(longest))
}

/// The report's sections on what waited: row locks, stall classes, the
/// scan's pile-ups, the lock pile-up and the metadata locks.
fn waits_html(c: &Capture) -> String {
    let ev = &c.evidence;
    let mut h = String::new();
    if !ev.root_blockers.is_empty() {
        h.push_str("<h2>Row lock waits</h2><table><tr><th>blocking connection</th><th>transactions waiting</th></tr>");
        for (b, n) in &ev.root_blockers {
            let _ = write!(h, "<tr><td>{b}</td><td>{n}</td></tr>");
        }
        h.push_str("</table>");
    }
    if !ev.stall_classes.is_empty() {
        h.push_str("<h2>Stall classes, in the order they showed</h2><table><tr><th>class</th><th>from (UTC)</th><th>evidence</th></tr>");
        for f in &ev.stall_classes {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(f.class.name()),
                f.first_unix.map(stamp_tenths).unwrap_or_default(),
                esc(&f.evidence)
            );
        }
        h.push_str("</table>");
    }
    if !c.stalls.is_empty() {
        h.push_str("<h2>Stalls around it</h2><p>Pile-ups the thread scan saw, and stall signatures that cleared before their trigger's hold.</p><table><tr><th>began (UTC)</th><th>ended (UTC)</th><th>length</th><th>what</th></tr>");
        for st in &c.stalls {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.0} ms</td><td>{}</td></tr>",
                stamp_tenths(st.began_unix),
                stamp_tenths(st.ended_unix),
                st.ms(),
                esc(&st.describe())
            );
        }
        h.push_str("</table>");
    }
    if let Some(p) = &ev.lock_pileup {
        let _ = write!(h, "<h2>Lock pile-up</h2><p>{}</p>", esc(&pileup_text(p).replace('\n', " ")));
        if !p.holders.is_empty() {
            h.push_str("<table><tr><th>holder</th><th>why</th></tr>");
            for x in &p.holders {
                let _ = write!(h, "<tr><td>{}</td><td>{}</td></tr>", esc(&x.summary), esc(&x.reason));
            }
            h.push_str("</table>");
        }
    }
    if let Some(m) = &ev.metadata_locks {
        let _ = write!(
            h,
            "<h2>Metadata locks</h2><p>From {}.</p><table><tr><th>connection</th><th>mode</th><th>namespace</th><th>object</th><th>status</th></tr>",
            esc(&m.source)
        );
        for l in &m.locks {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                l.conn,
                esc(&l.mode),
                esc(&l.namespace),
                esc(&l.object),
                if l.granted { "granted" } else { "waiting" }
            );
        }
        h.push_str("</table>");
    }
    h
}

/// The processlist as a table (its first 200 rows).
fn processlist_html(ev: &crate::capture_dir::EvidenceFile) -> String {
    let mut h = String::new();
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
    h
}

/// The self-contained `report.html` of a capture read back.
pub fn render_html(c: &Capture) -> String {
    let (ev, rows) = (&c.evidence, &c.metrics);
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
    if let Some(o) = ev.onset_unix {
        let _ = write!(h, " The stall began at {} UTC", stamp_tenths(o));
        match stall_around(&c.stalls, o, (&ev.trigger, ev.unix)) {
            Some(st) => {
                let _ = write!(
                    h,
                    " and ended at {} UTC, {:.1} s later (threads held up, as the thread scan saw them).",
                    stamp_tenths(st.ended_unix),
                    st.ended_unix - o
                );
            }
            None => h.push('.'),
        }
    }
    if let Some(e) = &ev.sql_error {
        let _ = write!(h, " SQL did not answer: {}.", esc(e));
    }
    if let Some(r) = &ev.sql_read {
        let _ = write!(h, " The SQL evidence: {}.", esc(r));
    }
    if let Some(e) = &ev.stacks_error {
        let _ = write!(h, " Stacks were not captured: {}.", esc(e));
    }
    h.push_str(" This file holds query text: keep it private.</p>");
    h.push_str("<h2>Metrics around the trigger</h2><div class=\"charts\">");
    let charts: Vec<String> = CHARTS.iter().filter_map(|(m, t)| chart(rows, m, t, ev.unix)).collect();
    if charts.is_empty() {
        h.push_str(if c.missing.iter().any(|m| m == "metrics.json") {
            "<p>The capture's metric history (metrics.json) is missing or cannot be read.</p>"
        } else {
            "<p>No metric history was recorded before this capture.</p>"
        });
    }
    for c in charts {
        h.push_str(&c);
    }
    h.push_str("</div>");
    if rows.iter().any(|r| r.derived.contains_key("questions_rate")) {
        for a in crate::derive::availability(|m| rows.iter().any(|r| r.derived.contains_key(m))) {
            let _ = write!(h, "<p class=\"note\">Not on this server: {}: {}</p>", esc(a.metrics), esc(a.why));
        }
    }
    h.push_str(&waits_html(c));
    if let Some(svg) = &c.flamegraph_svg {
        let b64 = base64::engine::general_purpose::STANDARD.encode(svg);
        let _ = write!(h, "<h2>Flame graph of the stall's stacks</h2><p>Rooted at each thread's role. The interactive version is <code>flamegraph.svg</code> next to this file.</p><img class=\"flame\" alt=\"flame graph\" src=\"data:image/svg+xml;base64,{b64}\">");
    }
    if let Some(t) = &c.stacks_txt {
        let _ =
            write!(h, "<h2>Stack groups, with the connections and statements behind them</h2><pre>{}</pre>", esc(t));
    }
    h.push_str(&processlist_html(ev));
    if let Some(s) = &c.innodb_status {
        let _ = write!(
            h,
            "<h2>InnoDB status</h2><details><summary>SHOW ENGINE INNODB STATUS</summary><pre>{}</pre></details>",
            esc(s)
        );
    }
    h.push_str("</body></html>\n");
    h
}

/// A lock pile-up in words: what waits, behind whom, and how the holder
/// was found.
fn pileup_text(p: &LockPileup) -> String {
    let waits = if p.waiting == 1 { "waits" } else { "wait" };
    let mut s = format!(
        "{} {waits} for a {}, the oldest for {:.1} s",
        pileup_output::plural(p.waiting, "connection", "connections"),
        p.class.describe(),
        p.oldest_s
    );
    if let Some((c, stmt)) = &p.head {
        let _ = write!(s, "; first in the queue: connection {c}, `{}`", pileup_engine::one_line(stmt, 120));
    }
    let _ = match p.sureness {
        Some(Sureness::Exact) => write!(s, "; holder read {}", p.why),
        Some(_) => write!(s, "; holder inferred: {}; {EXACT_HINT}", p.why),
        None => write!(s, "; holder not found: {}; {EXACT_HINT}", p.why),
    };
    s
}

/// A capture as the output layer writes it: `report.txt`, the page, or
/// its evidence, metrics and stalls as JSON (`pileup report DIR -f ...`).
impl pileup_output::Report for Capture {
    fn tool(&self) -> &'static str {
        "report"
    }
    fn text(&self, _o: &Options, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        match &self.report_txt {
            Some(t) => w.write_all(t.as_bytes()),
            None => writeln!(w, "{}", self.evidence.verdict),
        }
    }
    fn html(&self, _o: &Options, w: &mut dyn std::io::Write) -> Option<std::io::Result<()>> {
        Some(w.write_all(render_html(self).as_bytes()))
    }
}

/// Rebuild a capture's `report.html` from its files (`pileup report DIR`).
pub fn rebuild(dir: &Path) -> Result<()> {
    crate::capture_dir::write_report_html(dir, &render_html(&crate::capture_dir::read(dir)?))
}

/// What `pileup report` reads from a capture directory, run over arbitrary
/// bytes given as its `evidence.json`, `metrics.json` and `stalls.json`,
/// and the report rendered from it: for the fuzzer
/// (`fuzz/fuzz_targets/capture.rs`) and the replay of its kept corpus.
/// Whether it was read as a capture.
pub fn garbled_capture(dir: &Path, data: &[u8]) -> bool {
    for name in ["evidence.json", "metrics.json", "stalls.json"] {
        let _ = std::fs::write(dir.join(name), data);
    }
    match crate::capture_dir::read(dir) {
        Ok(c) => {
            let _ = render_html(&c);
            true
        }
        Err(_) => false,
    }
}

/// Refresh a capture's metrics from the store (now including what came
/// after the trigger) and rebuild its report.
pub fn refresh(dir: &Path, store: &crate::store::Store, before: f64, after: f64) -> Result<()> {
    let c = crate::capture_dir::read(dir)?;
    let rows = store.range(c.evidence.unix - before, c.evidence.unix + after)?;
    crate::capture_dir::write_metrics(dir, &rows)?;
    let stalls = store.stalls(c.evidence.unix - before, c.evidence.unix + after)?;
    crate::capture_dir::write_stalls(dir, &stalls)?;
    // report.txt was written at the capture, before the stall ended.
    if let Some((o, st)) =
        c.evidence.onset_unix.and_then(|o| Some((o, stall_around(&stalls, o, (&c.evidence.trigger, c.evidence.unix))?)))
    {
        let path = dir.join("report.txt");
        if let Ok(txt) = std::fs::read_to_string(&path) {
            pileup_files::write_private_bytes(&path, with_stall_end(&txt, o, st.ended_unix).as_bytes())?;
        }
    }
    rebuild(dir)
}

/// `report.txt` with a `stall ended:` line after its `stall began:` line
/// (replacing an earlier one): the end is known only after the capture.
fn with_stall_end(report: &str, onset: f64, ended: f64) -> String {
    let line = format!("stall ended: {} UTC, {:.1} s after it began", stamp_tenths(ended), ended - onset);
    let mut out = String::with_capacity(report.len() + line.len() + 1);
    for l in report.split_inclusive('\n') {
        if l.starts_with("stall ended: ") {
            continue;
        }
        out.push_str(l);
        if l.starts_with("stall began: ") {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// The text report (`report.txt`): the verdict first, then the row lock
/// convoy, the metrics before the trigger and the stacks in pt-pmp format.
pub fn render_text(ev: &Evidence, v: &str) -> Result<String> {
    let mut rep = String::new();
    writeln!(rep, "VERDICT: {v}")?;
    writeln!(rep)?;
    writeln!(rep, "trigger: {} at {} UTC", ev.trigger, stamp(ev.unix))?;
    if let Some(o) = ev.onset_unix {
        writeln!(rep, "stall began: {} UTC", stamp_tenths(o))?;
    }
    if let Some(e) = &ev.sql_error {
        writeln!(rep, "SQL: did not answer ({e})")?;
    }
    if let Some(r) = &ev.sql_read {
        writeln!(rep, "SQL evidence: {r}")?;
    }
    if let Some(e) = &ev.stacks_error {
        writeln!(rep, "stacks: not captured ({e})")?;
    }
    if let Some(g) = &ev.growth {
        memory_text(&mut rep, g)?;
        match &ev.growth_heap {
            Some(h) => writeln!(rep, "  {}", h.line())?,
            None => writeln!(rep, "  resident heap: unknown (the server's mappings could not be read)")?,
        }
    }
    if !ev.row_lock_waits.is_empty() {
        writeln!(
            rep,
            "\nrow lock waits: {} edges; transactions blocking others without waiting themselves:",
            ev.row_lock_waits.len()
        )?;
        for (b, n) in root_blockers(&ev.row_lock_waits) {
            let q = ev.row_lock_waits.iter().find(|w| w.blocking_conn == b).and_then(|w| w.blocking_query.clone());
            writeln!(
                rep,
                "  {} — {n} waiting; its current statement: {}",
                pl_summary(ev, b),
                q.map(|q| format!("`{q}`")).unwrap_or_else(|| "none (idle in transaction)".into())
            )?;
        }
        let mut direct: Vec<String> = ev
            .row_lock_waits
            .iter()
            .map(|w| format!("conn {} `{}`", w.waiting_conn, w.waiting_query.as_deref().unwrap_or("")))
            .collect();
        direct.sort();
        direct.dedup();
        writeln!(rep, "  waiting: {}", direct.iter().take(10).cloned().collect::<Vec<_>>().join("; "))?;
    }
    let found = crate::classes::findings(ev);
    if !found.is_empty() {
        writeln!(rep, "\nstall classes, in the order they showed:")?;
        for f in &found {
            let at = f.first_unix.map(|t| format!(" (from {} UTC)", stamp_tenths(t))).unwrap_or_default();
            writeln!(rep, "  {}{at}", f.line())?;
        }
    }
    if let Some(p) = crate::holder::analyse(ev) {
        writeln!(rep, "\nlock pile-up: {}", pileup_text(&p))?;
        for x in &p.holders {
            writeln!(rep, "  {} — {}", x.summary, x.reason)?;
        }
    }
    if !ev.history.is_empty() {
        writeln!(rep, "\nmetrics before the trigger (per poll):")?;
        writeln!(rep, "  {:>19} {:>4} {:>12} {:>8} {:>10}", "time", "ok", "questions/s", "running", "poll ms")?;
        for r in ev.history.iter().rev().take(15).rev() {
            let g = |k: &str| r.derived.get(k).map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
            writeln!(
                rep,
                "  {:>19} {:>4} {:>12} {:>8} {:>10.1}",
                stamp(r.unix),
                if r.ok { "yes" } else { "NO" },
                g("questions_rate"),
                g("threads_running"),
                r.cost_ms
            )?;
        }
    }
    if let Some(p) = &ev.profile {
        let mut text = Vec::new();
        render(&pileup_profile::ProfileReport(p), Format::Text, &Options::default(), &mut text)?;
        writeln!(rep, "\nstacks ({} samples, pt-pmp format):\n{}", p.samples.len(), String::from_utf8_lossy(&text))?;
    }
    Ok(rep)
}

/// The memory growth traced for a memory trigger: the statements and
/// stacks that grew the server most.
fn memory_text(rep: &mut String, t: &pileup_growth::GrowthTrace) -> std::fmt::Result {
    let g = &t.growth;
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    let touched = g.totals.anon_bytes + g.totals.file_bytes;
    writeln!(
        rep,
        "\nmemory growth traced for {:.1} s: {} first touched, address space {} grown and {} given back (memory.json, memory.svg)",
        t.elapsed_s,
        mib(touched),
        mib(g.totals.mapped),
        mib(g.totals.released)
    )?;
    for s in g.by_statement.iter().take(5) {
        writeln!(rep, "  {:>10} (held {}) connection {:?}: `{}`", mib(s.grown), mib(s.held), s.connections, s.example)?;
    }
    for s in g.by_stack.iter().take(5) {
        let f: Vec<&str> = s.frames.iter().map(String::as_str).take(8).collect();
        writeln!(rep, "  {:>10} sampled through {}", mib(s.grown), f.join(" ← "))?;
    }
    Ok(())
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

    #[test]
    fn a_stall_ends_with_the_scans_pile_up_that_it_is() {
        let st = |b, e| crate::scan::Stall { began_unix: b, ended_unix: e, peak_blocked: 30, baseline: 0, what: None };
        let stalls = [st(90.0, 90.4), st(100.1, 103.7), st(110.0, 111.0)];
        // Onset at the poll just before the scan saw it, or from the scan itself.
        let none = ("", 0.0);
        assert_eq!(stall_around(&stalls, 100.0, none).unwrap().ended_unix, 103.7);
        assert_eq!(stall_around(&stalls, 100.1, none).unwrap().ended_unix, 103.7);
        assert!(stall_around(&stalls, 104.0, none).is_none());
        assert!(stall_around(&stalls, 99.5, none).is_none());
        // The fired trigger's stall, begun after the scan's pile-up, is the
        // longer: it is the one the capture is about.
        let fired = crate::scan::Stall { what: Some("lock waits".into()), ..st(100.6, 110.2) };
        let stalls = [st(100.1, 100.5), fired];
        let around = stall_around(&stalls, 100.1, ("lock waits: pl_waiting_lock > 3 for 1s", 101.8)).unwrap();
        assert_eq!(around.ended_unix, 110.2);
        // Repeated short stalls: the capture is fired by the scan's 400 ms
        // pile-up (its beginning is the onset); a trigger's episode of the
        // same pile-up, timed to its 1 s polls, began before it and ended
        // later.
        let episode = crate::scan::Stall { what: Some("threads_running".into()), ..st(100.0, 101.4) };
        let stalls = [episode.clone(), st(100.2, 100.6)];
        let short = ("short stalls: 3 in 10 min, this one 400 ms", 100.7);
        assert_eq!(stall_around(&stalls, 100.2, short).unwrap().ended_unix, 100.6);
        // Without it, the longest under way at the onset.
        assert_eq!(stall_around(&stalls[..1], 100.2, short).unwrap().ended_unix, 101.4);
        // The fired trigger's episode, shorter than the scan's pile-up
        // under way: the pile-up.
        let fired = crate::scan::Stall { what: Some("lock waits".into()), ..st(100.0, 101.4) };
        let stalls = [fired, st(100.2, 104.0)];
        assert_eq!(stall_around(&stalls, 100.2, ("lock waits: x", 101.0)).unwrap().ended_unix, 104.0);
    }

    #[test]
    fn the_stall_end_follows_its_beginning_once() {
        let rep = "VERDICT: x\n\ntrigger: t at 2026-11-25 10:00:00 UTC\nstall began: 2026-11-25 10:00:00.0 UTC\nmore\n";
        let once = with_stall_end(rep, 1_795_600_000.0, 1_795_600_003.7);
        let lines: Vec<&str> = once.lines().collect();
        assert!(lines[3].starts_with("stall began: "), "{once}");
        assert!(lines[4].starts_with("stall ended: ") && lines[4].ends_with("UTC, 3.7 s after it began"), "{once}");
        assert_eq!(lines[5], "more");
        let twice = with_stall_end(&once, 1_795_600_000.0, 1_795_600_004.2);
        assert_eq!(twice.matches("stall ended: ").count(), 1, "{twice}");
        assert!(twice.contains("4.2 s after it began"), "{twice}");
        assert_eq!(with_stall_end("VERDICT: x\n", 1.0, 2.0), "VERDICT: x\n", "no beginning, no end");
    }
}
