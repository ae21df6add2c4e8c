//! What the curves and the profiles say, in sentences: where each curve
//! bends and whether the machine or the server was the limit there, the
//! experiment's comparison as a ratio, and what the profile names as the
//! place the time goes (and what it cannot name). Pure functions of a
//! report.

use crate::knee::Shape;
use crate::name::{Name, THREAD_CONCURRENCY_LIMIT};
use crate::profile::KneeProfile;
use crate::report::{rate, ExperimentReport, Point, Series};
use crate::words::threads;

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

fn best(s: &Series) -> Option<&Point> {
    s.points.iter().filter(|p| p.median.is_finite()).max_by(|a, b| a.median.total_cmp(&b.median))
}

fn at(s: &Series, threads: u32) -> Option<&Point> {
    s.points.iter().find(|p| p.threads == threads)
}

fn find<'a>(r: &'a ExperimentReport, label_has: &[&str]) -> Option<&'a Series> {
    r.series.iter().find(|s| label_has.iter().all(|w| s.label.contains(w)))
}

/// Whether two lock names are the same lock: a class of locks is named
/// with how many addresses it had (`condition variable class: 20
/// addresses, …`), which grows with threads; the rest names the class.
fn same_lock(a: &str, b: &str) -> bool {
    fn key(n: &str) -> String {
        match n.find(" address") {
            Some(end) => {
                let start = n[..end]
                    .char_indices()
                    .rev()
                    .find(|(_, c)| !c.is_ascii_digit())
                    .map(|(i, c)| i + c.len_utf8())
                    .unwrap_or(0);
                format!("{}N{}", &n[..start], &n[end..].replacen(" addresses", " address", 1))
            }
            None => n.to_string(),
        }
    }
    key(a) == key(b)
}

/// Whether two points' spreads overlap (a difference within noise).
fn overlap(a: &Point, b: &Point) -> bool {
    a.min <= b.max && b.min <= a.max
}

/// "N× as much as", "N% more than", "N% less than": a against b, as the
/// ratio of medians; only "more than" or "less than" where one of them is
/// nothing (a ratio to nothing is no figure).
fn ratio(a: f64, b: f64) -> String {
    if !(a.is_finite() && b.is_finite()) || a <= 0.0 || b <= 0.0 {
        return match a.partial_cmp(&b) {
            Some(std::cmp::Ordering::Greater) => "more than".into(),
            Some(std::cmp::Ordering::Less) => "less than".into(),
            _ => "as much as".into(),
        };
    }
    let r = a / b;
    if r >= 2.0 {
        format!("{r:.1}× as much as")
    } else if r >= 1.0 {
        format!("{:.0}% more than", (r - 1.0) * 100.0)
    } else if r > 0.5 {
        format!("{:.0}% less than", (1.0 - r) * 100.0)
    } else {
        format!("{:.1}× less than", 1.0 / r)
    }
}

/// Every finding of a report.
pub fn findings(name: Name, r: &ExperimentReport) -> Vec<String> {
    let mut out = vec![];
    for s in &r.series {
        out.extend(curve(s, r.machine.cores, &r.unit));
    }
    out.extend(comparison(name, r));
    out.extend(profiles(name, &r.profiles));
    out
}

/// Where one curve bends, and what bound it there.
fn curve(s: &Series, cores: usize, unit: &str) -> Option<String> {
    let b = best(s)?;
    let last = s.points.last()?;
    // Where the curve bends; one that does not bend is read at its end.
    let (knee, there) = match s.knee_threads.and_then(|k| at(s, k)) {
        Some(k) => (k, "At the knee"),
        None => (last, "At the most threads"),
    };
    let mut t = format!(
        "{}: best {} {unit} at {}; {} at {}",
        s.label,
        rate(b.median),
        threads(b.threads),
        rate(last.median),
        threads(last.threads)
    );
    if let Some(shape) = s.shape {
        t.push_str(&format!(" ({})", shape.describe()));
    }
    t.push('.');
    let busy = knee.server_cores.map(|c| c + knee.driver_cores);
    // A curve still rising, or bent at its first point, says nothing of
    // a limit inside the server.
    let bent = s.shape != Some(Shape::Rising) && s.points.first().is_some_and(|p| p.threads != knee.threads);
    if knee.cpu_bound {
        t.push_str(&format!(
            " {there} ({}) the machine's {cores} cores were the limit (server {:.2}, driver {:.2} cores): on more cores the curve would go on rising until something inside the server stops it.",
            threads(knee.threads),
            knee.server_cores.unwrap_or(0.0),
            knee.driver_cores
        ));
    } else if let (Some(busy), true) = (busy, bent) {
        t.push_str(&format!(
            " {there} ({}) {busy:.2} of {cores} cores were busy: the limit is inside the server (a lock, a queue or the disk), not the CPUs.",
            threads(knee.threads)
        ));
    }
    if knee.driver_cores > 0.5 * cores as f64 {
        t.push_str(&format!(
            " The driver itself used {:.2} cores there: on this machine it competes with the server for CPU.",
            knee.driver_cores
        ));
    }
    Some(t)
}

/// The experiment's own comparison.
fn comparison(name: Name, r: &ExperimentReport) -> Vec<String> {
    match name {
        Name::HotRow => hot_row(r),
        Name::Accept => accept(r),
        Name::TableOpen => table_open(r),
        Name::PointSelect => point_select(r),
        Name::Range => range(r),
        Name::Durability => durability(r),
    }
}

/// The most threads both series ran, their medians there, and whether
/// those overlap (equal within noise).
fn both(a: &Series, b: &Series) -> Option<(u32, f64, f64, bool)> {
    let t = a.points.last()?.threads;
    let (pa, pb) = (at(a, t)?, at(b, t)?);
    Some((t, pa.median, pb.median, overlap(pa, pb)))
}

/// Deadlock detection on against off at the most threads.
fn hot_row(r: &ExperimentReport) -> Vec<String> {
    let mut out = vec![];
    if let (Some(on), Some(off)) = (find(r, &["detection on"]), find(r, &["detection off"])) {
        if let Some((t, a, b, same)) = both(on, off) {
            out.push(if same {
                format!(
                    "At {} deadlock detection on and off are equal within noise ({} and {} {}).",
                    threads(t),
                    rate(a),
                    rate(b),
                    r.unit
                )
            } else {
                format!(
                    "At {} deadlock detection on does {} off ({} against {}).",
                    threads(t),
                    ratio(a, b),
                    rate(a),
                    rate(b)
                )
            });
        }
    }
    out
}

/// MariaDB's best connection rate against each PostgreSQL series'.
fn accept(r: &ExperimentReport) -> Vec<String> {
    let mut out = vec![];
    let maria = find(r, &["MariaDB"]).and_then(best);
    for pg in r.series.iter().filter(|s| s.system == "PostgreSQL") {
        if let (Some(m), Some(p)) = (maria, best(pg)) {
            out.push(format!(
                "MariaDB accepts {} connections/s at best, {} {} ({}).",
                rate(m.median),
                ratio(m.median, p.median),
                pg.label,
                rate(p.median)
            ));
        }
    }
    out
}

/// Table opens through the small cache, with the statistics tables left out, and with every table cached.
fn table_open(r: &ExperimentReport) -> Vec<String> {
    let mut out = vec![];
    if let Some(small) = r.series.first().and_then(|s| best(s).map(|p| (s, p))) {
        if let Some(opens) = small.1.counter_per_s {
            out.push(format!(
                "Through the small cache the server opened {} tables/s at best ({}).",
                rate(opens),
                threads(small.1.threads)
            ));
        }
        let never = find(r, &["use_stat_tables=NEVER"]);
        if let Some((never, p)) = never.and_then(|s| best(s).map(|p| (s, p))) {
            let same = at(small.0, p.threads).is_some_and(|q| overlap(p, q));
            let opens = p.counter_per_s.map(|o| format!(", opening {} tables/s", rate(o))).unwrap_or_default();
            out.push(if same {
                format!(
                    "With the statistics tables left out of the open path ({}) the reads run at {} {} at {}{opens}: equal within noise, so reading statistics is not what opening a table costs here.",
                    never.label.rsplit(", ").next().unwrap_or_default(),
                    rate(p.median),
                    r.unit,
                    threads(p.threads)
                )
            } else {
                format!(
                    "With the statistics tables left out of the open path (use_stat_tables=NEVER) the reads run at {} {} at best{opens}: {} with them read{}.",
                    rate(p.median),
                    r.unit,
                    ratio(p.median, small.1.median),
                    if p.median > small.1.median { " (the published figures were 13.5 opens/s, and 105/s without)" } else { "" }
                )
            });
        }
        // Whether the Aria open in the open path is the statistics
        // tables': its lock waits under the default, none without.
        let aria = |label: &str| {
            r.profiles.iter().filter(|k| k.series == label).any(|k| {
                k.locks.as_ref().is_some_and(|l| {
                    l.locks.iter().any(|x| x.waits > 0 && x.waited_in.iter().any(|f| f.starts_with("ha_maria::open")))
                })
            })
        };
        if let Some(never) = never {
            let profiled = |label: &str| r.profiles.iter().any(|k| k.series == label && k.locks.is_some());
            if profiled(&never.label) && aria(&small.0.label) && !aria(&never.label) {
                out.push("The Aria mutex waited on in ha_maria::open under the default is gone with the statistics not read: the Aria tables opened inside each InnoDB table's open are the engine-independent statistics tables (mysql.table_stats, column_stats, index_stats).".into());
            }
        }
        if let Some(cached) = find(r, &["every table cached"]).and_then(best) {
            out.push(format!(
                "With every table cached the same reads run at {} {}: {} uncached.",
                rate(cached.median),
                r.unit,
                ratio(cached.median, small.1.median)
            ));
        }
    }
    out
}

/// Autocommit against ten statements in one transaction, per system.
fn point_select(r: &ExperimentReport) -> Vec<String> {
    let mut out = vec![];
    for sys in ["MariaDB, prepared", "PostgreSQL, plain", "PostgreSQL, prepared"] {
        if let (Some(auto), Some(trx)) = (find(r, &[sys, "autocommit"]), find(r, &[sys, "per transaction"])) {
            if let Some((t, a, b, same)) = both(auto, trx) {
                let t = threads(t);
                let cost = b / a - 1.0;
                out.push(if same {
                    format!("{sys}: at {t} autocommit (a snapshot per statement) and ten statements in a REPEATABLE READ transaction (one snapshot) are equal within noise.")
                } else if cost > 0.0 {
                    format!(
                        "{sys}: at {t} ten statements in a REPEATABLE READ transaction (one snapshot, and a BEGIN and COMMIT) do {} autocommit (a snapshot per statement): up to {} of autocommit's time goes to its snapshots.",
                        ratio(b, a),
                        pct(cost / (1.0 + cost))
                    )
                } else {
                    format!(
                        "{sys}: at {t} ten statements in a REPEATABLE READ transaction (one snapshot) do {} autocommit (a snapshot per statement): the BEGIN and COMMIT round trips cost more than the snapshots they save.",
                        ratio(b, a)
                    )
                });
            }
        }
    }
    out
}

/// Summing on the server against returning the rows, the concurrency limit, and MariaDB against PostgreSQL.
fn range(r: &ExperimentReport) -> Vec<String> {
    let mut out = vec![];
    let free = r.series.iter().find(|s| {
        s.label.starts_with("MariaDB, rows returned") && !s.label.ends_with(&format!("={THREAD_CONCURRENCY_LIMIT}"))
    });
    if let (Some(data), Some(sum)) = (free, find(r, &["MariaDB, summed"])) {
        if let (Some(a), Some(b)) = (best(data), best(sum)) {
            out.push(format!(
                "MariaDB: summing on the server does {} returning the rows ({} against {} ranges/s at best).",
                ratio(b.median, a.median),
                rate(b.median),
                rate(a.median)
            ));
        }
    }
    let limited = format!("concurrency={THREAD_CONCURRENCY_LIMIT}");
    if let (Some(free), Some(limited)) = (free, find(r, &["MariaDB, rows returned", &limited])) {
        if let Some((t, a, b, same)) = both(limited, free) {
            let t = threads(t);
            out.push(if same {
                format!("At {t} innodb_thread_concurrency={THREAD_CONCURRENCY_LIMIT} and 0 are equal within noise.")
            } else {
                format!("At {t} innodb_thread_concurrency={THREAD_CONCURRENCY_LIMIT} does {} 0.", ratio(a, b))
            });
        }
    }
    if let (Some(m), Some(p)) = (free.and_then(best), find(r, &["PostgreSQL, rows returned"]).and_then(best)) {
        out.push(format!(
            "Returning the rows, MariaDB does {} PostgreSQL at best ({} against {}).",
            ratio(m.median, p.median),
            rate(m.median),
            rate(p.median)
        ));
    }
    out
}

/// MariaDB against PostgreSQL at equal durability, and what flushing at every commit costs.
fn durability(r: &ExperimentReport) -> Vec<String> {
    let mut out = vec![];
    // Equal durability: flushed at every commit; or neither written
    // nor flushed at commit (a crash of the server loses the last
    // second's commits on both).
    let pairs = [
        ("flushed at every commit", "synchronous_commit=on", "flushed at every commit"),
        (
            "written and flushed each second",
            "synchronous_commit=off",
            "not written at commit, flushed in the background",
        ),
    ];
    let pg_fsync = find(r, &["PostgreSQL"]).and_then(|s| s.settings.get("fsync")).map(String::as_str);
    let pg_durable = pg_fsync.is_none_or(|f| f == "on");
    if !pg_durable {
        out.push("PostgreSQL runs with fsync off: none of its commits are durable, so it is not compared with MariaDB at equal durability.".into());
    }
    for (maria, pg, what) in pairs.iter().filter(|_| pg_durable) {
        if let (Some(m), Some(p)) =
            (find(r, &["MariaDB", maria]).and_then(best), find(r, &["PostgreSQL", pg]).and_then(best))
        {
            out.push(format!(
                "At the same durability (log {what}), MariaDB does {} PostgreSQL at best ({} against {} commits/s).",
                ratio(m.median, p.median),
                rate(m.median),
                rate(p.median)
            ));
        }
    }
    if let (Some(a), Some(b)) =
        (find(r, &["MariaDB", "=1)"]).and_then(best), find(r, &["MariaDB", "=2)"]).and_then(best))
    {
        out.push(format!(
            "Flushing the redo log (and the binary log, where it is on) at every commit costs MariaDB {} of its commits/s against flushing once a second.",
            pct(1.0 - a.median / b.median)
        ));
    }
    out
}

/// What the profiles name.
fn profiles(name: Name, ps: &[KneeProfile]) -> Vec<String> {
    let mut out = vec![];
    for k in ps {
        let mut t = format!("At {} ({}), ", threads(k.threads), k.at);
        t.push_str(&format!("{} of the connection threads' samples were on a CPU", pct(k.running_share)));
        if let Some(top) = k.innermost.first() {
            t.push_str(&format!("; the commonest innermost frame was {} ({})", top.name, pct(top.share)));
        }
        if let Some(f) = k.server_function.iter().find(|f| !f.name.contains("+0x")) {
            t.push_str(&format!("; the commonest named server function, {} ({})", f.name, pct(f.share)));
        }
        t.push('.');
        if k.unnamed_share >= 0.2 {
            t.push_str(&format!(
                " {} of the samples stop in server code this binary leaves unnamed (a stripped build's static functions, InnoDB's among them): pileup names them where debug info is found, and does not guess here.",
                pct(k.unnamed_share)
            ));
        }
        out.push(t);
        if let Some(l) = &k.locks {
            let busy: Vec<_> = l.locks.iter().filter(|l| l.busy()).take(2).collect();
            for top in &busy {
                let by = match top.statements.first() {
                    Some(s) => format!(" by threads running `{s}`"),
                    None => String::new(),
                };
                out.push(format!(
                    "Waited on{by}: {} ({}), {} of the traced threads' time, {} waits{}.",
                    top.name,
                    top.kind,
                    pct(top.share),
                    top.waits,
                    if top.waited_in.is_empty() {
                        String::new()
                    } else {
                        format!(", in {}", top.waited_in.join(" ← "))
                    }
                ));
            }
            if busy.is_empty() {
                out.push("No thread at work waited on a contended lock (the condition waits traced were idle threads: pool workers, cached threads).".into());
            }
        }
        if k.innermost.first().is_some_and(|f| f.name.contains("poll") || f.name.contains("recv"))
            && k.server_function.first().is_some_and(|f| f.name.starts_with("vio_") && f.share >= 0.5)
        {
            out.push(format!(
                "Most connection threads were waiting for their client's next statement ({} in {}): each client's round trip, not the server's work, spaced its statements.",
                pct(k.server_function[0].share),
                k.server_function[0].name
            ));
        }
        if name == Name::Accept {
            if let Some(a) = &k.accept_syscalls {
                out.push(format!(
                    "The accept thread at {}, counted exactly: {} of its time in system calls; {}. It made {:.1} system calls per connection. It ran on a CPU {} of the time and was runnable but waiting for one {} (a call that has woken waits for a CPU before it returns, so the two overlap).",
                    threads(k.threads),
                    pct(a.tally.in_syscalls()),
                    a.list(6),
                    a.per_connection(a.tally.total_calls()),
                    pct(a.tally.share(a.tally.on_cpu)),
                    pct(a.tally.share(a.tally.waiting_for_cpu))
                ));
                if a.tally.share(a.tally.waiting_for_cpu) >= 0.5 {
                    out.push(format!(
                        "At {} the accept thread waited for a CPU more than it did anything else: the cores, shared with the connection threads and the load generator, bound the accepts; more cores would carry the curve further.",
                        threads(k.threads)
                    ));
                }
            } else if k.accept_samples > 0 {
                let list: Vec<String> =
                    k.accept.iter().take(5).map(|s| format!("{} {}", s.name, pct(s.share))).collect();
                out.push(format!("The accept thread's samples: {}.", list.join(", ")));
            }
        }
    }
    // Scaling: the same lock at one curve's knee and at its most threads.
    let pairs = ps
        .iter()
        .filter(|k| k.at == "knee")
        .filter_map(|a| ps.iter().find(|b| b.at == "most threads" && b.series == a.series).map(|b| (a, b)));
    for (a, b) in pairs {
        if let (Some(la), Some(lb)) = (&a.locks, &b.locks) {
            if let Some(top) = lb.locks.iter().find(|l| l.busy()) {
                let before = la.locks.iter().find(|l| same_lock(&l.name, &top.name)).map(|l| l.share).unwrap_or(0.0);
                if top.share > before * 1.5 && top.share >= 0.05 {
                    out.push(format!(
                        "Time waiting on {} grows with threads: {} at {}, {} at {} ({}). On a machine with more cores this is where the curve may bend: --threads up to 1000 on a larger machine shows it.",
                        top.name,
                        pct(before),
                        threads(a.threads),
                        pct(top.share),
                        b.threads,
                        b.series
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{LockShare, LockSummary, Share};
    use crate::target::Machine;

    fn point(threads: u32, median: f64, spread: f64, cpu_bound: bool) -> Point {
        Point {
            threads,
            rounds: vec![median],
            median,
            min: median - spread,
            max: median + spread,
            p50_ms: Some(1.0),
            p99_ms: Some(2.0),
            errors: 0,
            driver_cores: 0.4,
            server_cores: Some(1.5),
            cpu_bound,
            counter_per_s: None,
        }
    }

    fn series(label: &str, system: &str, pts: Vec<Point>) -> Series {
        let m: Vec<(u32, f64)> = pts.iter().map(|p| (p.threads, p.median)).collect();
        Series {
            label: label.into(),
            system: system.into(),
            settings: Default::default(),
            knee_threads: crate::knee::knee(&m).map(|i| m[i].0),
            shape: crate::knee::shape(&m),
            points: pts,
        }
    }

    fn report(name: Name, series: Vec<Series>, profiles: Vec<KneeProfile>) -> ExperimentReport {
        ExperimentReport {
            experiment: name.as_str().into(),
            question: String::new(),
            unit: "updates/s".into(),
            started_unix: 0.0,
            machine: Machine { cores: 2, memory_gib: 24.0, kernel: "6.1".into(), cpu: "x".into() },
            driver: String::new(),
            systems: vec![],
            series,
            profiles,
            findings: vec![],
            stopped: None,
            window_s: 10.0,
            warmup_s: 2.0,
            rounds: 3,
        }
    }

    fn knee_profile(at: &str, threads: u32, lock_share: f64) -> KneeProfile {
        KneeProfile {
            series: "deadlock detection on".into(),
            threads,
            at: at.into(),
            seconds: 10.0,
            connection_samples: 1000,
            running_share: 0.2,
            innermost: vec![Share { name: "__futex_abstimed_wait_common".into(), share: 0.7 }],
            server_function: vec![
                Share { name: "mariadbd+0x8c5e10".into(), share: 0.6 },
                Share { name: "mysql_update".into(), share: 0.1 },
            ],
            unnamed_share: 0.6,
            accept: vec![],
            accept_samples: 0,
            accept_syscalls: None,
            accept_syscalls_error: None,
            locks: Some(LockSummary {
                waits: 5000,
                locks: vec![LockShare {
                    name: "lock_sys".into(),
                    kind: "InnoDB latch".into(),
                    waits: 5000,
                    wait_ms: 900.0,
                    share: lock_share,
                    waited_in: vec![],
                    statements: vec!["update hot set n = n + ? where id = ?".into()],
                }],
                notes: vec![],
            }),
            locks_error: None,
            notes: vec![],
        }
    }

    #[test]
    fn hot_row_detection_within_noise_is_said_so() {
        let on = series(
            "deadlock detection on",
            "MariaDB",
            vec![point(1, 10000.0, 500.0, false), point(100, 15000.0, 900.0, false)],
        );
        let off = series(
            "deadlock detection off",
            "MariaDB",
            vec![point(1, 10000.0, 500.0, false), point(100, 15500.0, 900.0, false)],
        );
        let f = findings(Name::HotRow, &report(Name::HotRow, vec![on, off], vec![]));
        assert!(
            f.iter().any(|l| l.starts_with("At 100 threads deadlock detection on and off are equal within noise")),
            "{f:#?}"
        );
    }

    #[test]
    fn a_ratio_to_nothing_is_no_figure() {
        assert_eq!(ratio(3670.0, 0.0), "more than");
        assert_eq!(ratio(0.0, 3670.0), "less than");
        assert_eq!(ratio(f64::NAN, 1.0), "as much as");
        assert_eq!(ratio(30.0, 10.0), "3.0× as much as");
    }

    #[test]
    fn a_collapse_with_detection_is_a_ratio() {
        let on = series(
            "deadlock detection on",
            "MariaDB",
            vec![point(1, 20000.0, 100.0, false), point(100, 639.0, 50.0, false)],
        );
        let off = series(
            "deadlock detection off",
            "MariaDB",
            vec![point(1, 20000.0, 100.0, false), point(100, 10000.0, 100.0, false)],
        );
        let f = findings(Name::HotRow, &report(Name::HotRow, vec![on, off], vec![]));
        assert!(f.iter().any(|l| l.contains("deadlock detection on does 15.6× less than off")), "{f:#?}");
        assert!(f.iter().any(|l| l.contains("collapsing past its knee")), "{f:#?}");
    }

    #[test]
    fn the_machine_or_the_server_is_named_as_the_limit() {
        let cpu = series("a", "MariaDB", vec![point(1, 100.0, 1.0, false), point(10, 500.0, 1.0, true)]);
        let lock = series(
            "b",
            "MariaDB",
            vec![point(1, 50.0, 1.0, false), point(10, 101.0, 1.0, false), point(50, 100.0, 1.0, false)],
        );
        let f = findings(Name::HotRow, &report(Name::HotRow, vec![cpu, lock], vec![]));
        assert!(f[0].contains("the machine's 2 cores were the limit"), "{}", f[0]);
        assert!(f[1].contains("1.90 of 2 cores were busy: the limit is inside the server"), "{}", f[1]);
    }

    #[test]
    fn a_lock_that_grows_with_threads_is_the_projection() {
        let on =
            series("deadlock detection on", "MariaDB", vec![point(1, 100.0, 1.0, false), point(200, 90.0, 1.0, false)]);
        let ps = vec![knee_profile("knee", 1, 0.05), knee_profile("most threads", 200, 0.45)];
        let f = findings(Name::HotRow, &report(Name::HotRow, vec![on], ps));
        assert!(
            f.iter().any(|l| l.starts_with("Time waiting on lock_sys grows with threads: 5% at 1 thread, 45% at 200")),
            "{f:#?}"
        );
        assert!(
            f.iter().any(|l| l.contains("60% of the samples stop in server code this binary leaves unnamed")),
            "{f:#?}"
        );
        assert!(f.iter().any(|l| l.contains("the commonest named server function, mysql_update (10%)")), "{f:#?}");
    }

    #[test]
    fn a_class_of_locks_is_the_same_lock_whatever_its_address_count() {
        let a = "condition variable class: 20 addresses, one waiter each, taken in mariadbd+0xd5ad50";
        let b = "condition variable class: 400 addresses, one waiter each, taken in mariadbd+0xd5ad50";
        let one = "condition variable class: 1 address, one waiter each, taken in mariadbd+0xd5ad50";
        assert!(same_lock(a, b) && same_lock(a, one));
        assert!(!same_lock(a, "condition variable class: 20 addresses, one waiter each, taken in open_table"));
        assert!(same_lock("LOCK_open", "LOCK_open") && !same_lock("LOCK_open", "LOCK_thd_data"));
        // Names are UTF-8: a wide character before the count is kept whole.
        assert!(same_lock("class … 3 addresses", "class … 40 addresses"));
    }

    #[test]
    fn the_accept_threads_counted_calls_are_per_connection() {
        use crate::syscalls::{SyscallTally, SyscallTime};
        let m = series("MariaDB, TCP", "MariaDB", vec![point(1, 5000.0, 100.0, true), point(10, 10000.0, 100.0, true)]);
        let mut k = knee_profile("knee", 10, 0.0);
        let call = |name: &str, calls: u64, seconds: f64| SyscallTime { name: name.into(), calls, seconds };
        k.accept_syscalls = Some(crate::profile::AcceptSyscalls {
            tally: SyscallTally {
                tid: 1,
                seconds: 10.0,
                calls: vec![
                    call("poll", 100_000, 4.0),
                    call("accept4", 100_000, 1.5),
                    call("fcntl", 200_000, 0.5),
                    // A thread started once: too small to list.
                    call("clone3", 1, 0.0001),
                ],
                on_cpu: 3.0,
                waiting_for_cpu: 2.5,
            },
            connections: 100_000.0,
        });
        let f = findings(Name::Accept, &report(Name::Accept, vec![m.clone()], vec![k.clone()]));
        assert!(
            f.iter().any(|l| l.contains(
                "counted exactly: 60% of its time in system calls; poll 40% (1.0/connection), accept4 15% (1.0/connection), fcntl 5% (2.0/connection). It made 4.0 system calls per connection. It ran on a CPU 30% of the time and was runnable but waiting for one 25%"
            )),
            "{f:#?}"
        );
        assert!(!f.iter().any(|l| l.contains("waited for a CPU more than")), "{f:#?}");
        // Starved of CPU: the cores are named as the bound.
        k.accept_syscalls.as_mut().unwrap().tally.waiting_for_cpu = 8.6;
        let f = findings(Name::Accept, &report(Name::Accept, vec![m], vec![k]));
        assert!(
            f.iter()
                .any(|l| l
                    .starts_with("At 10 threads the accept thread waited for a CPU more than it did anything else")),
            "{f:#?}"
        );
    }

    #[test]
    fn statistics_off_the_open_path_are_read_from_the_three_curves() {
        let small = "2000 tables, table_open_cache=10";
        let never = "2000 tables, table_open_cache=10, statistics not read (use_stat_tables=NEVER)";
        let a = series(small, "MariaDB", vec![point(10, 30000.0, 500.0, true)]);
        let b = series(never, "MariaDB", vec![point(10, 37000.0, 500.0, true)]);
        let c = series(
            "2000 tables, every table cached (table_open_cache=2400)",
            "MariaDB",
            vec![point(10, 60000.0, 500.0, true)],
        );
        let profile = |label: &str, aria: bool| {
            let mut k = knee_profile("knee", 10, 0.1);
            k.series = label.into();
            let l = k.locks.as_mut().unwrap();
            l.locks[0].name = "mariadbd .bss+0x38280 (not exported)".into();
            if aria {
                l.locks[0].waited_in =
                    vec!["mariadbd+0xc22af0".into(), "ha_maria::open".into(), "handler::ha_open".into()];
            }
            k
        };
        let f = findings(
            Name::TableOpen,
            &report(Name::TableOpen, vec![a, b, c], vec![profile(small, true), profile(never, false)]),
        );
        assert!(
            f.iter().any(|l| l.contains("(use_stat_tables=NEVER) the reads run at 37.0k")
                && l.contains("23% more than with them read")),
            "{f:#?}"
        );
        assert!(
            f.iter().any(|l| l.starts_with("The Aria mutex waited on in ha_maria::open under the default is gone")),
            "{f:#?}"
        );
        assert!(
            f.iter().any(|l| l.contains("With every table cached the same reads run at 60.0k")
                && l.contains("2.0× as much as uncached")),
            "{f:#?}"
        );
    }

    #[test]
    fn postgresql_without_fsync_is_not_compared_at_equal_durability() {
        let m = series(
            "MariaDB, redo log flushed at every commit (innodb_flush_log_at_trx_commit=1)",
            "MariaDB",
            vec![point(10, 15000.0, 100.0, true)],
        );
        let mut p = series(
            "PostgreSQL, WAL flushed at every commit (synchronous_commit=on)",
            "PostgreSQL",
            vec![point(10, 40000.0, 100.0, true)],
        );
        p.settings.insert("fsync".into(), "on".into());
        let f = findings(Name::Durability, &report(Name::Durability, vec![m.clone(), p.clone()], vec![]));
        assert!(f.iter().any(|l| l.starts_with("At the same durability (log flushed at every commit)")), "{f:#?}");
        p.settings.insert("fsync".into(), "off".into());
        let f = findings(Name::Durability, &report(Name::Durability, vec![m, p], vec![]));
        assert!(!f.iter().any(|l| l.starts_with("At the same durability")), "{f:#?}");
        assert!(f.iter().any(|l| l.starts_with("PostgreSQL runs with fsync off")), "{f:#?}");
    }

    #[test]
    fn autocommit_cost_is_read_from_the_pair() {
        let a = series("PostgreSQL, plain, autocommit", "PostgreSQL", vec![point(10, 10000.0, 100.0, true)]);
        let b = series("PostgreSQL, plain, 10 per transaction", "PostgreSQL", vec![point(10, 15000.0, 100.0, true)]);
        let f = findings(Name::PointSelect, &report(Name::PointSelect, vec![a, b], vec![]));
        assert!(
            f.iter().any(|l| l.contains(
                "do 50% more than autocommit (a snapshot per statement): up to 33% of autocommit's time goes to its snapshots"
            )),
            "{f:#?}"
        );
    }
}
