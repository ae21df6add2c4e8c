//! The report: per shape, a table of every work (each dump's compression,
//! each load's binary log setting) with both tools' medians and ranges,
//! the ratio of medians, CPU-seconds per GB for the tool and the server,
//! and what bound each run (cores, device, or the work left for one core
//! at the end).

use std::fmt::Write;

use pileup_bench_drivers::median;

use super::data::Shape;
use super::measure::Measured;
use super::rounds::{Cell, Cells, TOOLS};

/// A figure's median with its range: `3.27 [3.10–3.52]`.
fn spread(v: &[f64]) -> String {
    let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(*x), b.max(*x)));
    if v.is_empty() {
        return "–".into();
    }
    format!("{:.2} [{lo:.2}–{hi:.2}]", median(v))
}

fn med(c: &Cell, f: impl Fn(&Measured) -> f64) -> f64 {
    median(&c.runs.iter().map(f).collect::<Vec<_>>())
}

/// CPU-seconds per GB, tool + server.
fn per_gb(c: &Cell, gb: f64) -> (f64, f64) {
    (med(c, |m| m.tool_cpu_s) / gb, med(c, |m| m.server_cpu_s) / gb)
}

/// What bound a cell's runs: the device when it was busy for most of the
/// wall time, the cores when both were, the server's file syncs when its
/// threads were waiting in them for half the cores' time (the statements
/// then wait on the device's sync latency, one at a time, while the device
/// and the cores idle), otherwise the work left for one core at the end
/// when that was a tenth of the run or more.
pub fn bound(c: &Cell, cores: f64) -> String {
    let wall = med(c, |m| m.wall_s);
    let device = med(c, |m| m.device_busy_s) / wall;
    let busy = med(c, |m| m.tool_cpu_s + m.server_cpu_s) / wall;
    let tail = med(c, |m| m.one_core_tail_s);
    let alone = if c.index_alone_s.is_empty() { 0.0 } else { median(&c.index_alone_s) };
    let waits: Vec<f64> = c.file_work.iter().map(|w| w.sync_wait_s).collect();
    let syncing = if waits.is_empty() { 0.0 } else { median(&waits) / wall };
    if alone >= 0.1 * wall {
        format!(
            "the index build of {} alone for the last {alone:.1} s ({busy:.1} cores on average, device {:.0}%)",
            c.index_tables.join(", "),
            device * 100.0
        )
    } else if device >= 0.6 {
        format!("device ({:.0}% busy)", device * 100.0)
    } else if busy >= 0.8 * cores {
        format!("CPU ({busy:.1} of {cores:.0} cores)")
    } else if syncing >= 0.5 * cores {
        format!(
            "the server's file syncs ({syncing:.1} of its threads in one on average; {busy:.1} cores, device {:.0}%)",
            device * 100.0
        )
    } else if tail >= 0.1 * wall {
        format!("one core for the last {tail:.1} s ({busy:.1} cores on average, device {:.0}%)", device * 100.0)
    } else {
        format!("neither ({busy:.1} cores, device {:.0}%)", device * 100.0)
    }
}

/// The writer's worst round trips at the dumps' start, against its worst
/// over 3 s with nothing running (`idle_ms`), and pileup's lock's hold.
fn writers(cells: &Cells, idle_ms: &[f64]) -> String {
    let all = |tool: &str, f: fn(&Cell) -> &Vec<f64>| -> Vec<f64> {
        cells
            .iter()
            .filter(|((w, t), _)| w.starts_with("dump ") && *t == tool)
            .flat_map(|(_, c)| f(c).clone())
            .collect()
    };
    format!(
        "\nA writer committing a one-row update every millisecond, at nice −10 with the server thread serving it: its worst round trip in each dump's first 3 s was {} ms with pileup and {} ms with mydumper (over every compression; {} ms over 3 s with no dump running). pileup's snapshot lock was held {} ms.\n",
        spread(&all(TOOLS[0], |c| &c.writer_ms)),
        spread(&all(TOOLS[1], |c| &c.writer_ms)),
        spread(idle_ms),
        spread(&all(TOOLS[0], |c| &c.lock_held_ms)),
    )
}

/// One shape's section.
pub fn shape(s: &Shape, bytes: u64, cells: &Cells, idle_ms: &[f64], threads: usize, rounds: usize) -> String {
    let gb = bytes as f64 / 1e9;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut md = format!(
        "\n### {}: {}\n\n{} rows in {} tables, {:.2} GB (`data_length + index_length`), buffer pool {} MiB; {threads} threads; {rounds} rounds, the tools' order alternating; median [min–max]\n\n",
        s.name,
        s.about,
        s.rows(),
        s.tables.len(),
        gb,
        s.pool_mib
    );
    md.push_str("| work | pileup (s) | mydumper / myloader (s) | pileup faster by | CPU s/GB, tool + server: pileup | mydumper / myloader | pileup's CPU per GB / the anchor's | files (MB) | peak RSS (MiB) | bound by: pileup; mydumper / myloader |\n|---|---|---|---|---|---|---|---|---|---|\n");
    let works = ["dump plain", "dump gzip", "dump zstd", "load binlog off", "load binlog on"];
    for w in works.iter().filter(|w| cells.keys().any(|(k, _)| k == *w)) {
        let p = cells.get(&(w.to_string(), TOOLS[0]));
        let a = cells.get(&(w.to_string(), TOOLS[1]));
        let _ = writeln!(md, "{}", row(w, p, a, gb, cores));
    }
    md.push_str(&writers(cells, idle_ms));
    md.push_str(&file_work(cells, s.tables.len()));
    md
}

/// The server's file syncs and extensions per table in each load, median
/// of the rounds perf counted; empty when it counted none.
fn file_work(cells: &Cells, tables: usize) -> String {
    let per_table = |c: &Cell| -> Option<(f64, f64, f64)> {
        if c.file_work.is_empty() {
            return None;
        }
        let syncs: Vec<f64> = c.file_work.iter().map(|w| w.syncs as f64 / tables as f64).collect();
        let ext: Vec<f64> = c.file_work.iter().map(|w| w.extensions as f64 / tables as f64).collect();
        let wait: Vec<f64> = c.file_work.iter().map(|w| w.sync_wait_s).collect();
        Some((median(&syncs), median(&ext), median(&wait)))
    };
    let mut parts = vec![];
    for (work, word) in [("load binlog off", "binary log off"), ("load binlog on", "binary log on")] {
        let got: Vec<Option<(f64, f64, f64)>> =
            TOOLS.iter().map(|t| cells.get(&(work.to_string(), *t)).and_then(per_table)).collect();
        if let [Some((ps, pe, pw)), Some((as_, ae, aw))] = got[..] {
            parts.push(format!(
                "{word}: pileup {ps:.0} syncs and {pe:.0} extensions a table, its threads {pw:.1} s in syncs; myloader {as_:.0} and {ae:.0}, {aw:.1} s"
            ));
        }
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(
        "\nThe server's file syncs (`fdatasync`, `fsync`) and file extensions (`fallocate`) during each load, recorded at the kernel's syscall tracepoints (`perf record` of the whole server process: its background flushing and the writer's commits are in the count, so a longer load counts more of them), median per table (and the seconds the server's threads spent in syncs, summed over threads): {}.\n",
        parts.join("; ")
    )
}

fn row(work: &str, p: Option<&Cell>, a: Option<&Cell>, gb: f64, cores: f64) -> String {
    let wall =
        |c: Option<&Cell>| c.map_or("–".into(), |c| spread(&c.runs.iter().map(|m| m.wall_s).collect::<Vec<_>>()));
    let cpu = |c: Option<&Cell>| {
        c.map_or("–".into(), |c| {
            let (t, s) = per_gb(c, gb);
            format!("{t:.2} + {s:.2} = {:.2}", t + s)
        })
    };
    let faster = match (p, a) {
        (Some(p), Some(a)) => format!("{:.2}×", med(a, |m| m.wall_s) / med(p, |m| m.wall_s)),
        _ => "–".into(),
    };
    let cpu_ratio = match (p, a) {
        (Some(p), Some(a)) => {
            let (pt, ps) = per_gb(p, gb);
            let (at, as_) = per_gb(a, gb);
            format!("{:.2}", (pt + ps) / (at + as_))
        }
        _ => "–".into(),
    };
    let files = |c: Option<&Cell>| {
        c.filter(|c| !c.out_bytes.is_empty()).map_or("–".into(), |c| {
            format!("{:.0}", median(&c.out_bytes.iter().map(|b| *b as f64).collect::<Vec<_>>()) / 1e6)
        })
    };
    let rss = |c: Option<&Cell>| c.map_or("–".into(), |c| format!("{:.0}", med(c, |m| m.tool_rss_mib)));
    let bound_by = |c: Option<&Cell>| c.map_or("–".into(), |c| bound(c, cores));
    let what = match work {
        "dump plain" => "dump, plain",
        "dump gzip" => "dump, gzip (pileup level 1, mydumper level 6)",
        "dump zstd" => "dump, zstd level 1 (pileup only)",
        "load binlog off" => "load, binary log off",
        "load binlog on" => "load, binary log on",
        other => other,
    };
    format!(
        "| {what} | {} | {} | {faster} | {} | {} | {cpu_ratio} | {} / {} | {} / {} | {}; {} |",
        wall(p),
        wall(a),
        cpu(p),
        cpu(a),
        files(p),
        files(a),
        rss(p),
        rss(a),
        bound_by(p),
        bound_by(a)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(wall: f64, tool: f64, server: f64, device: f64, tail: f64) -> Cell {
        let m = Measured {
            wall_s: wall,
            tool_cpu_s: tool,
            server_cpu_s: server,
            tool_rss_mib: 10.0,
            device_busy_s: device,
            one_core_tail_s: tail,
        };
        Cell { runs: vec![m; 3], out_bytes: vec![1_000_000; 3], ..Default::default() }
    }

    #[test]
    fn file_work_is_per_table_for_both_tools_or_not_said() {
        use super::super::measure::FileWork;
        let mut cells = Cells::new();
        let w = |syncs, extensions| FileWork { syncs, extensions, sync_wait_s: 0.0 };
        let c = |v: Vec<FileWork>| Cell { file_work: v, ..cell(1.0, 1.0, 1.0, 0.0, 0.0) };
        cells.insert(("load binlog off".into(), TOOLS[0]), c(vec![w(3800, 1760), w(4000, 1760), w(9000, 1760)]));
        assert_eq!(file_work(&cells, 40), "", "said only beside the anchor's");
        cells.insert(("load binlog off".into(), TOOLS[1]), c(vec![w(4200, 1800)]));
        let said = file_work(&cells, 40);
        assert!(
            said.ends_with("binary log off: pileup 100 syncs and 44 extensions a table, its threads 0.0 s in syncs; myloader 105 and 45, 0.0 s.\n"),
            "{said}"
        );
    }

    #[test]
    fn what_bound_a_run_is_named_from_its_figures() {
        assert!(bound(&cell(10.0, 2.0, 2.0, 7.0, 0.0), 2.0).starts_with("device (70% busy)"));
        assert!(bound(&cell(10.0, 8.0, 9.0, 1.0, 0.0), 2.0).starts_with("CPU (1.7 of 2 cores)"));
        assert!(bound(&cell(10.0, 3.0, 6.0, 1.0, 4.0), 2.0).starts_with("one core for the last 4.0 s"));
        assert!(bound(&cell(10.0, 3.0, 6.0, 1.0, 0.5), 2.0).starts_with("neither"));
        let mut c = cell(10.0, 3.0, 6.0, 1.0, 4.0);
        c.index_alone_s = vec![3.0, 3.5, 0.0];
        c.index_tables = vec!["d.big".into()];
        assert!(bound(&c, 2.0).starts_with("the index build of d.big alone for the last 3.0 s"), "{}", bound(&c, 2.0));
        c.index_alone_s = vec![0.5, 0.0, 0.0];
        assert!(bound(&c, 2.0).starts_with("one core for the last 4.0 s"), "a short build is not the critical path");
        // Threads waiting in file syncs 12 s of a 10 s run: on average 1.2
        // of them.
        let w = |s| super::super::measure::FileWork { syncs: 1000, extensions: 10, sync_wait_s: s };
        let mut c = cell(10.0, 3.0, 6.0, 5.0, 4.0);
        c.file_work = vec![w(12.0), w(11.0), w(13.0)];
        assert!(
            bound(&c, 2.0)
                .starts_with("the server's file syncs (1.2 of its threads in one on average; 0.9 cores, device 50%)"),
            "{}",
            bound(&c, 2.0)
        );
        c.file_work = vec![w(8.0); 3];
        assert!(bound(&c, 2.0).starts_with("one core for the last 4.0 s"), "less than half the cores' time in syncs");
    }

    #[test]
    fn a_row_s_ratios_are_of_its_own_medians() {
        let (p, a) = (cell(2.0, 1.0, 1.0, 0.0, 0.0), cell(4.0, 3.0, 1.0, 0.0, 0.0));
        let r = row("dump plain", Some(&p), Some(&a), 2.0, 2.0);
        assert!(r.contains("| 2.00× |"), "{r}");
        // (0.5 + 0.5) / (1.5 + 0.5)
        assert!(r.contains("| 0.50 |"), "{r}");
        assert!(r.contains("0.50 + 0.50 = 1.00") && r.contains("1.50 + 0.50 = 2.00"), "{r}");
    }
}
