//! The index advice as text.

use std::fmt::Write;

use super::text::{one_line, speed_up};
use crate::advise::experiment::Standing;
use crate::advise::index::{IndexAdvice, Trial};
use crate::advise::Variant;

fn ms(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "-".to_string(), |v| format!("{v:.2} ms"))
}

fn size(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{:.0} KiB", b as f64 / 1024.0),
    }
}

/// A timing in a line: `12.41 → 0.35 ms: 35.2x [30.1x, 40.0x], faster`.
fn timing(v: &Variant) -> String {
    if let Some(e) = &v.error {
        return format!("failed: {}", one_line(e.as_bytes(), 100));
    }
    if v.same_rows == Some(false) {
        return "other rows: never advised".into();
    }
    let word = match v.standing {
        Some(Standing::Faster) => "faster",
        Some(Standing::Slower) => "slower",
        Some(_) => "within noise",
        None => "not settled",
    };
    let hourly = v.saving_s_per_hour.map(|s| format!(", {s:.1} s per hour of the log")).unwrap_or_default();
    format!(
        "{} → {} ({} rounds): {}, {word}; saves {} a run{hourly}",
        ms(v.base_median_ms),
        ms(v.median_ms),
        v.rounds,
        speed_up(v.ratio, v.ratio_interval),
        ms(v.saving_ms)
    )
}

fn trial(o: &mut String, t: &Trial) {
    let _ = writeln!(o, "#   ({}) on {}: {}", t.columns.join(", "), t.table, t.why);
    if let Some(p) = &t.plan {
        let chosen = if t.chosen { "" } else { " (the optimizer does not choose it)" };
        let _ = writeln!(o, "#     plan with it: {p}{chosen}");
    }
    if let Some(v) = &t.timing {
        let _ = writeln!(o, "#     on the copy, without it → with it: {}", timing(v));
    }
    if let (Some(b), Some(a)) = (t.examined_before, t.examined_after) {
        let _ = writeln!(o, "#     rows examined a run: {b:.0} → {a:.0}");
    }
    if let Some(b) = t.build_s {
        let full = t.build_s_full.map(|f| format!(", about {f:.1} s for the server's table")).unwrap_or_default();
        let sz = match (t.size_bytes, t.size_bytes_full) {
            (Some(s), Some(f)) if f > s => format!("size {} on the copy, about {} on the server; ", size(s), size(f)),
            (Some(s), _) => format!("size {}; ", size(s)),
            _ => String::new(),
        };
        let _ = writeln!(o, "#     {sz}built in {b:.2} s on the copy{full}");
    }
    for e in &t.others {
        let what = e.timing.as_ref().map(timing).unwrap_or_default();
        let _ = writeln!(o, "#     also changes {}: {} → {}: {what}", e.id, e.plan_before, e.plan_after);
    }
    for w in &t.writes {
        let what = match (&w.error, w.ratio) {
            (Some(e), _) => format!("not replayed: {}", one_line(e.as_bytes(), 80)),
            (None, Some(r)) => format!(
                "{} → {} (takes {r:.2}x as long; {} runs each, rolled back), {}",
                ms(w.before_ms),
                ms(w.after_ms),
                w.runs,
                w.standing.unwrap_or("-").replace('_', " ")
            ),
            _ => "-".into(),
        };
        let _ = writeln!(o, "#     write {}: {what}", w.id);
    }
    if let Some(e) = &t.error {
        let _ = writeln!(o, "#     {}", one_line(e.as_bytes(), 160));
    }
    if t.advised {
        let _ = writeln!(o, "#  => {}", t.alter);
    } else {
        let _ = writeln!(o, "#     not advised");
    }
}

/// The index advice: the copy, each class's candidates, then the unused
/// and redundant indexes.
pub fn render_index_advice(a: &IndexAdvice) -> String {
    let mut o = String::from(
        "\n# Index advice (each candidate built on a copy, timed against the statement with it ignored)\n",
    );
    if let Some(c) = &a.copy {
        let sample = c.sample.map_or_else(|| "every row".to_string(), |f| format!("a {:.0}% sample", f * 100.0));
        let _ = writeln!(
            o,
            "# copy: {} ({} scanned on the server), {sample}: {} rows ({}) sent in {:.1} s ({})",
            pileup_output::plural(c.tables, "table", "tables"),
            size(c.scanned_bytes),
            c.rows,
            size(c.bytes),
            c.seconds,
            c.how
        );
    }
    if let Some(s) = &a.skipped {
        let _ = writeln!(o, "# {s}");
    }
    for n in &a.notes {
        let _ = writeln!(o, "# note: {n}");
    }
    for c in &a.classes {
        let _ = writeln!(o, "\n# {} {}", c.id, one_line(c.fingerprint.as_bytes(), 100));
        match (&c.server_plan, &c.copy_plan) {
            (Some(s), Some(p)) if s == p => drop(writeln!(o, "#   plan, on the server and the copy: {s}")),
            (Some(s), Some(p)) => drop(writeln!(o, "#   plan on the server: {s}\n#   plan on the copy: {p}")),
            _ => {}
        }
        if let Some(s) = &c.skipped {
            let _ = writeln!(o, "#   {s}");
        }
        for t in &c.trials {
            trial(&mut o, t);
        }
    }
    for (title, list) in [("Indexes no explained statement uses", &a.unused), ("Redundant indexes", &a.redundant)] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(o, "\n# {title}");
        for n in list {
            let _ = writeln!(o, "#   {}.{} ({}): {}", n.table, n.index, n.columns.join(", "), n.why);
        }
    }
    o
}
