//! The text report: a summary, a profile table with the efficiency
//! columns, then the top classes in detail (every attribute's total, min,
//! max, mean, p95 and p99; hosts, users, databases; the slowest sample with
//! its logged EXPLAIN).

use std::fmt::Write;

use super::{id, unavailable, utc, View};
use crate::attr::{Unit, A, ATTRS, FLAGS};
use crate::class::Class;
use crate::fleet::merge::Hosts;
use crate::rank::{self, Rank};
use crate::Digest;

fn secs(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0}s")
    } else if v >= 1.0 {
        format!("{v:.2}s")
    } else if v >= 0.001 {
        format!("{:.2}ms", v * 1e3)
    } else if v > 0.0 {
        format!("{:.0}us", v * 1e6)
    } else {
        "0".into()
    }
}

fn count(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn bytes(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1}G", v / (1024.0 * 1024.0 * 1024.0))
    } else if v >= 1024.0 * 1024.0 {
        format!("{:.1}M", v / (1024.0 * 1024.0))
    } else if v >= 1024.0 {
        format!("{:.1}k", v / 1024.0)
    } else {
        format!("{v:.0}")
    }
}

fn value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Seconds => secs(v),
        Unit::Count => count(v),
        Unit::Bytes => bytes(v),
    }
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), count)
}

pub(super) fn one_line(s: &[u8], max: usize) -> String {
    let s = String::from_utf8_lossy(s);
    let mut out: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.chars().count() > max {
        out = out.chars().take(max.saturating_sub(1)).collect::<String>() + "…";
    }
    out
}

/// The text report.
pub fn render(d: &Digest, v: &View, hosts: Option<&Hosts>) -> String {
    let mut o = String::new();
    let total = d.total_time();
    summary(&mut o, d, v, total);
    let classes: Vec<&Class> =
        if v.rank == Rank::Time { d.classes.iter().collect() } else { rank::order(&d.classes, v.rank) };
    let ranked: Vec<&Class> = classes.into_iter().filter(|c| rank::score(c, v.rank).is_some()).take(v.limit).collect();
    let about = Rank::ALL.iter().find(|r| r.1 == v.rank).map_or("", |r| r.2);
    let _ = writeln!(o, "\n# Profile, ranked by {about}");
    if v.rank == Rank::Optimizer {
        let _ = writeln!(
            o,
            "# (not ranked: classes whose mean time outside the engine is under {}, and those that sort or use a temporary table)",
            secs(rank::OPTIMIZER_FLOOR_S)
        );
    }
    let share = |c: &Class| format!("{:.1}%", if total > 0.0 { c.sum(A::QueryTime) / total * 100.0 } else { 0.0 });
    let mean = |c: &Class| c.stat(A::QueryTime).map_or("-".into(), |s| secs(s.mean()));
    let mut cols: Vec<Col> = vec![
        ("Time", 9, "  ", Box::new(|c: &Class| secs(c.sum(A::QueryTime)))),
        ("Time%", 6, " ", Box::new(share)),
        // A fleet's day can call a class billions of times.
        ("Calls", if v.profile_only { 10 } else { 8 }, "  ", Box::new(|c: &Class| c.count.to_string())),
        ("Mean", 8, "  ", Box::new(mean)),
    ];
    if v.profile_only {
        cols.push(("Max", 8, "  ", Box::new(|c: &Class| c.stat(A::QueryTime).map_or("-".into(), |s| secs(s.max)))));
        let per_call = |c: &Class| ratio(c.stat(A::RowsExamined).map(|s| s.sum / c.count.max(1) as f64));
        cols.push(("Exam/call", 9, "  ", Box::new(per_call)));
        if let Some((title, f)) = rank_figure(v.rank) {
            cols.push((title, 9, "  ", Box::new(f)));
        }
        if let Some(h) = hosts {
            let on = |c: &Class| h.by_class.get(&c.fingerprint).map_or(0, Vec::len).to_string();
            cols.push(("Hosts", 5, "  ", Box::new(on)));
        }
    } else {
        let p95 = |c: &Class| c.stat(A::QueryTime).map_or("-".into(), |s| secs(s.quantile(0.95, false)));
        cols.push(("p95", 8, "  ", Box::new(p95)));
        // The efficiency columns: what those rankings score by.
        for (r, width) in [(Rank::Examined, 9), (Rank::Pages, 9), (Rank::Optimizer, 8), (Rank::Spill, 5)] {
            if let Some((title, f)) = rank_figure(r) {
                cols.push((title, width, "  ", Box::new(f)));
            }
        }
    }
    profile(&mut o, &ranked, &cols);
    if ranked.is_empty() {
        let _ = writeln!(o, "#   (no class logged what this ranking needs)");
    }
    if !v.profile_only {
        for (i, c) in ranked.iter().enumerate() {
            detail(&mut o, i + 1, c, total, d);
        }
    }
    o
}

/// The lines above the profile: what was read, its span, and what the
/// log lacks.
fn summary(o: &mut String, d: &Digest, v: &View, total: f64) {
    let (first, last) = d.classes.iter().chain(d.other.as_ref()).fold((None::<i64>, None::<i64>), |(f, l), c| {
        (
            match (f, c.first) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            match (l, c.last) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        )
    });
    let _ = writeln!(
        o,
        "# {} statements in {} classes, {} of statement time, from {}",
        d.events,
        d.classes.len() + usize::from(d.other.is_some()),
        secs(total),
        if d.inputs.len() == 1 { d.inputs[0].clone() } else { format!("{} inputs", d.inputs.len()) },
    );
    if let (Some(f), Some(l)) = (first, last) {
        let _ = writeln!(o, "# {} to {} (UTC)", utc(f), utc(l));
    }
    if let Some(oc) = &d.other {
        let _ = writeln!(
            o,
            "# {} statements of further fingerprints are counted together as \"other\": more than --max-classes {} classes",
            oc.count, d.max_classes
        );
    }
    if d.problem_count > 0 {
        let _ = writeln!(
            o,
            "# {} in the input (entries skipped or values left out):",
            pileup_output::plural(d.problem_count, "problem", "problems")
        );
        for p in d.problems.iter().take(5) {
            let _ = writeln!(o, "#   {}:{}: {}", p.file, p.line, p.what);
        }
        if d.problem_count > 5 {
            let _ = writeln!(o, "#   … (--format json lists the first {})", d.problems.len());
        }
    }
    for u in unavailable(d, v) {
        let _ = writeln!(o, "# no {}: {}", u.attr, u.why);
    }
    for n in &d.notes {
        let _ = writeln!(o, "# note: {n}");
    }
}

/// A ranking's column of the profile: its title, and a class's figure.
type Figure = (&'static str, fn(&Class) -> String);

/// What a ranking scores a class by, as the profile shows it: its
/// column's title and the figure (none for time and count, which the
/// profile always shows).
fn rank_figure(r: Rank) -> Option<Figure> {
    let figure: Figure = match r {
        Rank::Time | Rank::Count => return None,
        Rank::Examined => ("Exam/row", |c| ratio(rank::examined_per_row(c))),
        Rank::Pages => ("Pages/row", |c| ratio(rank::pages_per_row(c))),
        Rank::Optimizer => {
            ("Outside%", |c| rank::optimizer_share(c).map_or("-".into(), |s| format!("{:.0}%", s * 100.0)))
        }
        Rank::Spill => ("Spill", |c| rank::spills(c).to_string()),
        Rank::Lock => ("Lock", |c| secs(c.sum(A::LockTime) + c.sum(A::RowLockWait))),
    };
    Some(figure)
}

/// A column of the profile: its title, width, the space before it, and a
/// class's figure.
type Col<'a> = (&'static str, usize, &'static str, Box<dyn Fn(&Class) -> String + 'a>);

/// The profile table: a class a line, `cols` between its rank and id and
/// its statement.
fn profile(o: &mut String, ranked: &[&Class], cols: &[Col]) {
    let _ = write!(o, "# {:>4}  {:<18}", "Rank", "Class");
    for (title, width, gap, _) in cols {
        let _ = write!(o, "{gap}{title:>width$}");
    }
    let _ = writeln!(o, "  Statement");
    for (i, c) in ranked.iter().enumerate() {
        let _ = write!(o, "# {:>4}  {:<18}", i + 1, id(&c.fingerprint));
        for (_, width, gap, f) in cols {
            let _ = write!(o, "{gap}{:>width$}", f(c));
        }
        let _ = writeln!(o, "  {}", one_line(&c.fingerprint, 70));
    }
}

fn detail(o: &mut String, n: usize, c: &Class, total: f64, d: &Digest) {
    let _ = writeln!(
        o,
        "\n# Class {n}: {}, {} calls, {:.1}% of the time",
        id(&c.fingerprint),
        c.count,
        if total > 0.0 { c.sum(A::QueryTime) / total * 100.0 } else { 0.0 }
    );
    if let (Some(f), Some(l)) = (c.first, c.last) {
        let _ = writeln!(o, "# Seen {} to {}", utc(f), utc(l));
    }
    let _ = writeln!(
        o,
        "# {:<17} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "Attribute", "total", "min", "max", "mean", "p95", "p99"
    );
    for (i, s) in c.stats().filter(|(_, s)| s.sum != 0.0) {
        let a = &ATTRS[i];
        let int = a.unit != Unit::Seconds;
        let _ = writeln!(
            o,
            "# {:<17} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            a.name,
            value(s.sum, a.unit),
            value(s.min, a.unit),
            value(s.max, a.unit),
            value(s.mean(), a.unit),
            value(s.quantile(0.95, int), a.unit),
            value(s.quantile(0.99, int), a.unit),
        );
    }
    let flags: Vec<String> = FLAGS
        .iter()
        .zip(&c.flags)
        .filter(|(_, (seen, yes))| *seen > 0 && *yes > 0)
        .map(|((name, _), (seen, yes))| format!("{name} {:.0}%", *yes as f64 / *seen as f64 * 100.0))
        .collect();
    if !flags.is_empty() {
        let _ = writeln!(o, "# Plan: {}", flags.join(", "));
    }
    let signals = [
        rank::examined_per_row(c).map(|v| format!("{} rows examined per row", count(v))),
        rank::pages_per_row(c).map(|v| format!("{} pages per row", count(v))),
        rank::optimizer_share(c).map(|v| format!("{:.0}% of the time outside the engine", v * 100.0)),
    ];
    let signals: Vec<String> = signals.into_iter().flatten().collect();
    if !signals.is_empty() {
        let _ = writeln!(o, "# Reads: {}", signals.join(", "));
    }
    for (label, f) in [("Databases", &c.dbs), ("Hosts", &c.hosts), ("Users", &c.users)] {
        let mut vals: Vec<String> = f
            .sorted()
            .into_iter()
            .map(|(v, n)| format!("{} ({n})", if v.is_empty() { "(none)".to_string() } else { v }))
            .collect();
        if f.others > 0 {
            vals.push(format!("others ({})", f.others));
        }
        // A fleet's stored rows keep no client hosts or users.
        if !vals.is_empty() {
            let _ = writeln!(o, "# {label}: {}", vals.join(", "));
        }
    }
    let (input, line) = c.sample.at;
    let _ = writeln!(o, "# Fingerprint: {}", one_line(&c.fingerprint, 4000));
    if c.sample.query.is_empty() {
        return;
    }
    if line == 0 {
        // From performance_schema: a sample, not timed.
        let _ = writeln!(o, "# Sample ({}):", d.inputs.get(input).map_or("?", String::as_str));
    } else {
        let _ = writeln!(
            o,
            "# Slowest sample ({}, {}:{}{}):",
            secs(c.sample.query_time),
            d.inputs.get(input).map_or("?", String::as_str),
            line,
            c.sample.ts.map(|t| format!(", {}", utc(t))).unwrap_or_default()
        );
    }
    if !c.sample.db().is_empty() {
        let _ = writeln!(o, "USE `{}`;", String::from_utf8_lossy(c.sample.db()).replace('`', "``"));
    }
    let _ = writeln!(o, "{};", String::from_utf8_lossy(&c.sample.query));
    for l in c.sample.explain_lines() {
        let _ = writeln!(o, "# explain: {}", String::from_utf8_lossy(l));
    }
}

/// The advisor's findings as text.
pub fn render_advice(advice: &[crate::advise::Advice]) -> String {
    use crate::advise::experiment::Standing;
    let ms = |v: Option<f64>| v.filter(|v| v.is_finite()).map_or_else(|| "-".to_string(), |v| format!("{v:.2} ms"));
    let mut o = String::from(
        "\n# Plan advice (measured on the server named: interleaved rounds, medians, 95% intervals of the speed-up)\n",
    );
    for a in advice {
        let _ = writeln!(o, "\n# {} {}", a.id, one_line(a.fingerprint.as_bytes(), 100));
        if a.optimization_ms.is_some() || a.execution_ms.is_some() {
            let _ =
                writeln!(o, "#   ANALYZE: optimization {}, execution {}", ms(a.optimization_ms), ms(a.execution_ms));
        }
        if let Some(p) = &a.plan {
            let _ = writeln!(o, "#   plan: {p}");
        }
        if let Some(s) = &a.skipped {
            let _ = writeln!(o, "#   {s}");
            continue;
        }
        if a.rounds > 0 {
            let spent = if a.budget_spent { " (the budget ended them)" } else { "" };
            let _ = writeln!(o, "#   as logged: {} rows; {} rounds{spent}", a.rows.unwrap_or(0), a.rounds);
        }
        for (i, v) in a.variants.iter().enumerate() {
            let what = match (&v.error, v.same_rows, v.same_plan, v.standing) {
                (Some(e), _, _, _) => format!("failed: {}", one_line(e.as_bytes(), 100)),
                (None, _, true, None) => "same plan: not timed, never advised".into(),
                (None, Some(false), _, _) => "other rows: never advised".into(),
                (None, _, _, Some(st)) => {
                    let word = match st {
                        Standing::Faster => "faster",
                        Standing::Slower => "slower",
                        Standing::WithinNoise | Standing::Open => "within noise",
                    };
                    format!(
                        "{} {}, {word}; saves {} a run",
                        ms(v.median_ms),
                        speed_up(v.ratio, v.ratio_interval),
                        ms(v.saving_ms)
                    )
                }
                _ => "not timed".into(),
            };
            let mark = if a.best == Some(i) { "=>" } else { "  " };
            let plan = match (v.same_plan, v.standing) {
                (true, None) => String::new(),
                (true, Some(_)) => " [same plan, less to choose]".into(),
                (false, _) => format!(" [{}]", v.plan.as_deref().unwrap_or("-")),
            };
            let _ = writeln!(o, "# {mark} {}{plan}: {what}", v.change);
        }
        let _ = writeln!(o, "#   advice: {}", advice_line(a));
    }
    o
}

/// A speed-up with its interval: `5.82x [5.10x, 6.31x]`.
pub(super) fn speed_up(r: Option<f64>, interval: Option<(f64, f64)>) -> String {
    let r = r.map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"));
    match interval {
        Some((lo, hi)) => format!("{r} [{lo:.2}x, {hi:.2}x]"),
        None => format!("{r} [too few rounds for an interval]"),
    }
}

/// The advice in a line: the variant settled faster, or why none is.
fn advice_line(a: &crate::advise::Advice) -> String {
    use crate::advise::experiment::Standing;
    if let Some(v) = a.best.map(|i| &a.variants[i]) {
        let hourly = v.saving_s_per_hour.map(|s| format!(", {s:.1} s per hour of the log")).unwrap_or_default();
        return format!(
            "{}: {} faster with the same rows, {:.2} ms a run saved{hourly}",
            v.change,
            speed_up(v.ratio, v.ratio_interval),
            v.saving_ms.unwrap_or(0.0)
        );
    }
    let timed: Vec<&crate::advise::Variant> = a.variants.iter().filter(|v| v.standing.is_some()).collect();
    if timed.is_empty() {
        return "none: no variant changes the plan".into();
    }
    let best = timed.iter().max_by(|x, y| x.ratio.unwrap_or(0.0).total_cmp(&y.ratio.unwrap_or(0.0)));
    match best {
        Some(v) if v.standing == Some(Standing::WithinNoise) || v.standing == Some(Standing::Open) => format!(
            "none: within noise (the closest, {}: {}, saving {} a run)",
            v.change,
            speed_up(v.ratio, v.ratio_interval),
            v.saving_ms.filter(|x| x.is_finite()).map_or("-".into(), |x| format!("{x:.2} ms"))
        ),
        _ => "none: every variant with another plan was slower".into(),
    }
}
