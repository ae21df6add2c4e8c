//! `pileup bench` end to end at small scale: every experiment against a
//! real MariaDB sandbox and a real PostgreSQL cluster started by pileup,
//! the plots checked by xmllint and rendered by Chromium, the knee's
//! profile naming what the binary lets it name; the refusal of a server
//! that is not a sandbox, and a server that dies mid-run; crash recovery
//! timed on sandboxes killed under load.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

/// One small run of every experiment: its scratch directory (results in
/// `results/`) and the reports.
fn run_all() -> (Scratch, PathBuf, Vec<serde_json::Value>) {
    let dir = scratch("bench-all");
    let out = dir.join("results/");
    let o = out.to_str().unwrap().to_string();
    let r = pileup(&[
        "bench",
        "all",
        "--sandbox",
        "--threads",
        "1,6",
        "--duration",
        "1.5s",
        "--warmup",
        "0.5s",
        "--rounds",
        "2",
        "--tables",
        "60",
        "--rows",
        "3000",
        "--format",
        "json",
        "-o",
        &o,
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["schema_version"], 1, "several experiments are one versioned object");
    (dir, out, v["experiments"].as_array().unwrap().clone())
}

#[test]
fn every_experiment_runs_end_to_end_beside_postgresql_with_plots_profiles_and_compare() {
    let (_scratch, dir, reports) = run_all();
    curves(&reports);
    knee_profiles(&dir, &reports);
    plots(&dir);
    compare(&dir);
}

fn experiment<'a>(reports: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    reports.iter().find(|r| r["experiment"] == name).unwrap_or_else(|| panic!("{name} ran"))
}

fn series<'a>(r: &'a serde_json::Value, label_has: &str) -> &'a serde_json::Value {
    r["series"].as_array().unwrap().iter().find(|s| s["label"].as_str().unwrap().contains(label_has)).unwrap_or_else(
        || {
            panic!(
                "a series {label_has:?} in {}",
                r["series"].as_array().unwrap().iter().map(|s| s["label"].to_string()).collect::<Vec<_>>().join(", ")
            )
        },
    )
}

/// Every curve measured, with its settings and the machine's.
fn curves(reports: &[serde_json::Value]) {
    let names: Vec<&str> = reports.iter().map(|r| r["experiment"].as_str().unwrap()).collect();
    assert_eq!(names, ["hot-row", "accept", "table-open", "point-select", "range", "durability"]);
    for r in reports {
        let name = r["experiment"].as_str().unwrap();
        assert!(r["stopped"].is_null(), "{name}: {}", r["stopped"]);
        assert!(r["machine"]["cores"].as_u64().unwrap() >= 1 && !r["machine"]["kernel"].as_str().unwrap().is_empty());
        let maria = &r["systems"][0];
        assert_eq!(maria["name"], "MariaDB");
        assert!(maria["version"].as_str().unwrap().contains("MariaDB"), "{maria}");
        assert!(maria["settings"]["innodb_flush_log_at_trx_commit"].is_string(), "{name}: durability stated");
        for s in r["series"].as_array().unwrap() {
            let points = s["points"].as_array().unwrap();
            assert_eq!(
                points.iter().map(|p| p["threads"].as_u64().unwrap()).collect::<Vec<_>>(),
                [1, 6],
                "{name}: {}",
                s["label"]
            );
            for p in points {
                assert_eq!(p["rounds"].as_array().unwrap().len(), 2);
                let (min, med, max) =
                    (p["min"].as_f64().unwrap(), p["median"].as_f64().unwrap(), p["max"].as_f64().unwrap());
                assert!(med > 0.0 && min <= med && med <= max, "{name}: {} {p}", s["label"]);
                assert!(p["driver_cores"].as_f64().unwrap() > 0.0, "the driver's own CPU: {p}");
                assert!(p["server_cores"].as_f64().unwrap() > 0.0, "the server's CPU: {p}");
            }
        }
        assert!(!r["findings"].as_array().unwrap().is_empty(), "{name} says what it shows");
    }
    // The comparisons with PostgreSQL ran on the cluster pileup started.
    for name in ["accept", "point-select", "range", "durability"] {
        let r = experiment(reports, name);
        let pg = &r["systems"][1];
        assert_eq!(pg["name"], "PostgreSQL", "{name}");
        assert!(pg["version"].as_str().unwrap().starts_with("15"), "{pg}");
        assert_eq!(pg["settings"]["fsync"], "on");
    }
    assert_eq!(
        experiment(reports, "accept")["series"].as_array().unwrap().len(),
        3,
        "MariaDB, PostgreSQL trust and SCRAM"
    );
    // Durability is stated per curve, and compared at equal durability.
    let d = experiment(reports, "durability");
    assert_eq!(series(d, "=1)")["settings"]["innodb_flush_log_at_trx_commit"], "1");
    assert_eq!(series(d, "synchronous_commit=on")["settings"]["synchronous_commit"], "on");
    let f = d["findings"].to_string();
    assert!(f.contains("At the same durability (log flushed at every commit)"), "{f}");
    // Table opens are counted from the server's Opened_tables.
    let t = experiment(reports, "table-open");
    let opens = series(t, "table_open_cache=10")["points"][1]["counter_per_s"].as_f64().unwrap();
    let cached = series(t, "every table cached")["points"][1]["counter_per_s"].as_f64().unwrap();
    assert!(opens > 100.0 && cached < opens / 10.0, "uncached {opens}/s, cached {cached}/s");
    // And once more with the statistics tables out of the open path, the
    // server's default put back afterwards (the sandbox's is not NEVER).
    assert_eq!(series(t, "use_stat_tables=NEVER")["settings"]["use_stat_tables"], "NEVER");
    assert_ne!(series(t, "table_open_cache=10")["settings"]["use_stat_tables"], "NEVER");
}

/// The knee's profile names what the binary lets it name.
fn knee_profiles(dir: &std::path::Path, reports: &[serde_json::Value]) {
    // hot-row: the profile at the knee and at the most threads, with the
    // waits of the queued updates traced.
    let h = experiment(reports, "hot-row");
    let profiles = h["profiles"].as_array().unwrap();
    assert!(!profiles.is_empty(), "{h:#}");
    for p in profiles {
        assert!(p["connection_samples"].as_u64().unwrap() > 0, "{p:#}");
        assert!(p["locks_error"].is_null(), "the lock profile ran: {p:#}");
        assert!(p["locks"]["waits"].as_u64().unwrap() > 0, "{p:#}");
        // A stripped server: what is unnamed is counted, not guessed.
        let named: Vec<&str> =
            p["server_function"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert!(!named.is_empty(), "{p:#}");
    }
    let text = std::fs::read_to_string(dir.join("hot-row.txt")).unwrap();
    assert!(text.contains("Profile at ") && text.contains("lock waits: "), "{text}");
    // table-open: the open path, named where the binary names it (the
    // table cache's functions, the handler's open), in the threads'
    // innermost server functions or where they waited on a lock.
    let t = experiment(reports, "table-open");
    let open_path = ["open_table", "tc_", "tdc_", "ha_open", "::open"];
    let named: Vec<String> = t["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let fns = p["server_function"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_string());
            let waits = p["locks"]["locks"].as_array().into_iter().flatten().flat_map(|l| {
                l["waited_in"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect::<Vec<_>>()
            });
            fns.chain(waits).collect::<Vec<_>>()
        })
        .collect();
    assert!(named.iter().any(|n| open_path.iter().any(|p| n.contains(p))), "{named:?}");
    // accept: the accept thread's time by the system call it was in.
    let a = experiment(reports, "accept");
    let p = &a["profiles"][0];
    assert!(p["accept_samples"].as_u64().unwrap() > 0, "{p:#}");
    let calls: Vec<&str> = p["accept"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert!(calls.iter().any(|c| c.contains("poll") || c.contains("accept")), "{calls:?}");
    // And its system calls counted exactly: about one accept4 per
    // connection (the load's rate gives the connections; a non-blocking
    // accept4 that finds none waiting adds a few), and the thread's CPU
    // time beside them.
    let sc = &p["accept_syscalls"];
    let per = |name: &str| {
        let n: u64 = sc["tally"]["calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"] == name)
            .map(|c| c["calls"].as_u64().unwrap())
            .sum();
        n as f64 / sc["connections"].as_f64().unwrap()
    };
    // Each wakeup from poll may find no connection waiting (one accept4
    // that returns nothing), so at most one more per poll.
    assert!(per("accept4") >= 0.8 && per("accept4") <= 1.2 + per("poll"), "{sc:#}");
    assert!(sc["tally"]["on_cpu"].as_f64().unwrap() > 0.0, "{sc:#}");
    assert!(a["findings"].to_string().contains("The accept thread at "), "{:#}", a["findings"]);
}

/// The plots are SVG that xmllint parses and Chromium renders.
fn plots(dir: &std::path::Path) {
    for name in ["hot-row", "accept", "table-open", "point-select", "range", "durability"] {
        let svg = dir.join(format!("{name}.svg"));
        assert_eq!(std::fs::metadata(&svg).unwrap().permissions().mode() & 0o777, 0o600);
        let x = Command::new("xmllint").arg("--noout").arg(&svg).output().expect("xmllint");
        assert!(x.status.success(), "{name}: {}", String::from_utf8_lossy(&x.stderr));
        let doc = std::fs::read_to_string(&svg).unwrap();
        assert!(doc.contains("client threads") && doc.contains("pileup bench"), "{name}");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.json"))).unwrap()).unwrap();
        for s in json["series"].as_array().unwrap() {
            assert!(
                doc.contains(s["label"].as_str().unwrap().split(',').next().unwrap()),
                "{name}: legend has {}",
                s["label"]
            );
        }
    }
    let shots = scratch("bench-shot");
    let (console, png) = chromium_screenshot(&dir.join("accept.svg"), &shots);
    assert!(png.starts_with(b"\x89PNG") && png.len() > 5_000, "{console:?}");
}

/// compare pairs two results point by point.
fn compare(dir: &std::path::Path) {
    let a = dir.join("range.json");
    let r = pileup(&["bench", "compare", a.to_str().unwrap(), a.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(text.starts_with("pileup bench compare: range (ranges/s)"), "{text}");
    assert!(text.contains("same versions, settings and machine"), "{text}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&a).unwrap()).unwrap();
    let points = json["series"].as_array().unwrap().len() * 2;
    assert_eq!(text.matches("1.00×  (within noise)").count(), points, "every curve's two points: {text}");
    let other = dir.join("accept.json");
    let r = pileup(&["bench", "compare", a.to_str().unwrap(), other.to_str().unwrap()]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("different experiments (range and accept)"), "{err}");
}

/// `pileup bench EXPERIMENT` on the server at socket `sock`: one thread,
/// one round of a second, no profile, JSON on stdout; then `extra`.
fn one_point(experiment: &str, sock: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "bench",
        experiment,
        "-S",
        sock,
        "-u",
        "root",
        "--threads",
        "1",
        "--duration",
        "1s",
        "--warmup",
        "0s",
        "--rounds",
        "1",
        "--no-profile",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    pileup(&args)
}

#[test]
fn a_server_that_is_not_a_sandbox_is_refused_without_i_know() {
    let sb = sandbox();
    // The same server, no longer recorded as a sandbox.
    std::fs::remove_file(sb.endpoint.dir.join("sandbox.json")).unwrap();
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let r =
        pileup(&["bench", "hot-row", "-S", &sock, "-u", "root", "--threads", "1", "--duration", "1s", "--rounds", "1"]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is not a pileup sandbox") && err.contains("--i-know"), "{err}");
    let r = one_point("hot-row", &sock, &["--i-know"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(v["series"][0]["points"][0]["median"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_globals_a_curve_sets_are_put_back_and_the_schema_dropped() {
    use mysql::prelude::Queryable;
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    let read = |c: &mut mysql::Conn| -> (String, String, String) {
        c.query_first("SELECT @@GLOBAL.table_open_cache, @@GLOBAL.table_definition_cache, @@GLOBAL.use_stat_tables")
            .unwrap()
            .unwrap()
    };
    let before = read(&mut c);
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let r = one_point("table-open", &sock, &["--tables", "20"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    // Every curve ran with its own settings…
    let labels: Vec<&str> = v["series"].as_array().unwrap().iter().map(|s| s["label"].as_str().unwrap()).collect();
    assert_eq!(labels.len(), 3, "{labels:?}");
    assert_eq!(series(&v, "use_stat_tables=NEVER")["settings"]["table_open_cache"], "10");
    // …and the server is left as it was found.
    assert_eq!(read(&mut c), before);
    let schema: Option<String> = c
        .query_first("SELECT schema_name FROM information_schema.schemata WHERE schema_name = 'pileup_bench'")
        .unwrap();
    assert_eq!(schema, None);
}

#[test]
fn a_postgresql_server_of_the_users_is_compared_with_i_know_and_no_password_in_argv() {
    let sb = sandbox();
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    // A PostgreSQL cluster pileup's run did not start: the user's.
    // (Under the sandboxes' directory, which the postgres account can
    // reach; the cluster removes its own directory when dropped.)
    let at = pileup_sandbox::base_dir().join(format!("test-bench-pg-{}", std::process::id()));
    let pg = pileup_sandbox::pg::PgSandbox::start(pileup_sandbox::pg::PgOptions::new(at)).unwrap();
    let info = format!("host={} port={} user=postgres dbname=postgres", pg.socket_dir.display(), pg.port);
    let run = |extra: &[&str]| one_point("range", &sock, &[&["--rows", "1000"], extra].concat());
    // Without --i-know: refused, in one line, before anything is written.
    let r = run(&["--pg", &info]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--pg names a PostgreSQL server pileup did not start") && err.contains("--i-know"), "{err}");
    // A password on the command line: refused, pointing at PGPASSWORD.
    let with_password = format!("{info} password=secret");
    let r = run(&["--pg", &with_password, "--i-know"]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("give it in PGPASSWORD instead") && !err.contains("secret"), "{err}");
    // With --i-know: both servers' curves, PostgreSQL's CPU read from its
    // postmaster on this host, and its schema dropped after.
    let r = run(&["--pg", &info, "--i-know"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["systems"][1]["name"], "PostgreSQL", "{v:#}");
    let p = &series(&v, "PostgreSQL, rows returned")["points"][0];
    assert!(p["median"].as_f64().unwrap() > 0.0 && p["server_cores"].as_f64().unwrap() > 0.0, "{p}");
    let mut c = pg.connect().unwrap();
    let left = c.query("SELECT 1 FROM pg_namespace WHERE nspname = 'pileup_bench'", &[]).unwrap();
    assert!(left.is_empty(), "the schema was dropped");
    // Without either, the comparison is skipped and the report says how
    // to get it.
    let r = run(&[]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(v["findings"].to_string().contains("PostgreSQL was not compared: --sandbox starts"), "{v:#}");
}

#[test]
fn a_server_that_dies_mid_run_is_one_line_and_the_points_are_kept() {
    let sb = sandbox();
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let dir = scratch("bench-dies");
    let json = dir.join("hot-row.json");
    let child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args([
            "bench",
            "hot-row",
            "-S",
            &sock,
            "-u",
            "root",
            "--threads",
            "1,2,4",
            "--duration",
            "2s",
            "--warmup",
            "0s",
        ])
        .args(["--rounds", "1", "--no-profile", "-o", json.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first point is measured by then; the server dies in the second.
    std::thread::sleep(Duration::from_millis(3000));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(sb.pid() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("pileup bench hot-row stopped: ") && err.contains("points measured before"), "{err}");
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(kept["stopped"].is_string(), "{kept:#}");
    let points = kept["series"][0]["points"].as_array().unwrap();
    assert!(!points.is_empty() && points[0]["median"].as_f64().unwrap() > 0.0, "{kept:#}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("STOPPED EARLY"), "{text}");
}

#[test]
fn bad_input_is_one_line() {
    for (args, says) in [
        (vec!["bench", "hot_row", "--sandbox"], "no experiment \"hot_row\""),
        (vec!["bench", "hot-row", "--sandbox", "--threads", "0"], "--threads takes counts from 1 to 1000"),
        (vec!["bench", "hot-row", "--sandbox", "--threads", "2000"], "--threads takes counts from 1 to 1000"),
        (vec!["bench", "all", "--sandbox", "-o", "x.json"], "several experiments write several files"),
        (vec!["bench", "hot-row", "--sandbox", "-o", "x.csv"], "the extension names the format"),
        (vec!["bench", "compare", "a.json"], "compare takes two JSON results"),
        (vec!["bench", "compare", "/nonexistent/a.json", "/nonexistent/b.json"], "reading /nonexistent/a.json"),
        (vec!["bench", "recovery", "--redo-sizes", "1M"], "--redo-sizes takes sizes of 4M or more"),
        (vec!["bench", "recovery", "--dirty", "0"], "--dirty takes page counts of 1 or more"),
        (vec!["bench", "recovery", "--redo-fill", "95"], "--redo-fill takes 1 to 90"),
        (vec!["bench", "recovery", "--i-know"], "recovery kills its server: it runs only on sandboxes it starts"),
    ] {
        let r = pileup(&args);
        assert!(!r.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Servers whose command line names a recovery sandbox's directory.
fn recovery_servers(base: &std::path::Path) -> Vec<i32> {
    let mut pids = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(&format!("{}/recovery-", base.display())) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn crash_recovery_is_timed_against_the_redo_and_dirty_pages_it_left_beside_flushed_first() {
    let dir = scratch("bench-recovery");
    let base = dir.join("sandboxes");
    let out = dir.join("results/");
    let r = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["bench", "recovery", "--redo-sizes", "8M,32M", "--dirty", "300", "--rounds", "2", "--rows", "30000"])
        .args(["--format", "json", "-o", out.to_str().unwrap()])
        .env("PILEUP_SANDBOX_DIR", &base)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 4, "two redo sizes × killed under load and flushed first: {v:#}");
    for p in points {
        let crashes = p["crashes"].as_array().unwrap();
        assert_eq!(crashes.len(), 2, "{p:#}");
        let redo_log = p["redo_log_bytes"].as_u64().unwrap();
        for c in crashes {
            let answered = c["seconds_to_answer"].as_f64().unwrap();
            assert!(answered > 0.0 && answered < 60.0, "{c:#}");
            let log: Vec<&str> = c["phases"].as_array().unwrap().iter().map(|l| l["line"].as_str().unwrap()).collect();
            assert!(log.iter().any(|l| l.contains("ready for connections")), "{log:?}");
            if p["flushed"] == true {
                assert_eq!(c["dirty_at_kill"], 0, "flushed first leaves no dirty page: {c:#}");
                continue;
            }
            // Killed under load: the goal met, and the server's own log says
            // it recovered from a checkpoint, with as much redo and as many
            // pages as the status said were unwritten at the kill.
            assert_eq!(c["reached"], true, "{c:#}");
            assert!(c["dirty_at_kill"].as_u64().unwrap() >= 300, "{c:#}");
            let age = c["checkpoint_age"].as_u64().unwrap();
            assert!(age >= redo_log / 2 && age < redo_log, "half the log written since the checkpoint: {c:#}");
            assert!(log.iter().any(|l| l.contains("Starting crash recovery from checkpoint")), "{log:?}");
            let applied = c["redo_to_apply"].as_u64().unwrap();
            // (A checkpoint between the last read and the kill may have
            // moved it up, never by the whole log.)
            assert!(applied >= age / 2, "the log applies the redo seen at the kill: {applied} against {age}");
            assert!(c["pages_to_recover"].as_u64().unwrap() >= 150, "{c:#}");
        }
    }
    // The figures agree with each other (the library's own check, on the
    // JSON as written).
    let report: pileup_bench::recovery::RecoveryReport = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(pileup_bench::recovery::disagreements(&report), Vec::<String>::new());
    // The recovering server was sampled: its busy samples are classed and
    // its unnamed code is said to be so.
    let profiles = v["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 2, "{v:#}");
    assert!(profiles.iter().all(|p| p["captures"].as_u64().unwrap() > 0), "{profiles:#?}");
    assert!(profiles.iter().any(|p| p["running"].as_u64().unwrap() > 0), "{profiles:#?}");
    // Every format written, 0600; the plot is SVG xmllint parses.
    for f in ["recovery.json", "recovery.svg", "recovery.txt"] {
        assert_eq!(std::fs::metadata(out.join(f)).unwrap().permissions().mode() & 0o777, 0o600, "{f}");
    }
    let x = Command::new("xmllint").arg("--noout").arg(out.join("recovery.svg")).output().expect("xmllint");
    assert!(x.status.success(), "{}", String::from_utf8_lossy(&x.stderr));
    let text = std::fs::read_to_string(out.join("recovery.txt")).unwrap();
    assert!(text.contains("killed under load") && text.contains("flushed first"), "{text}");
    // Nothing left: no server, no sandbox directory.
    assert_eq!(recovery_servers(&base), Vec::<i32>::new());
    let left: Vec<_> =
        std::fs::read_dir(&base).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.iter().all(|n| !n.to_string_lossy().starts_with("recovery-")), "{left:?}");
}

#[test]
fn a_killed_recovery_run_leaves_no_server_running() {
    let dir = scratch("bench-recovery-kill");
    let base = dir.join("sandboxes");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["bench", "recovery", "--redo-sizes", "8M", "--dirty", "300", "--rounds", "50", "--rows", "30000"])
        .args(["--format", "json"])
        .env("PILEUP_SANDBOX_DIR", &base)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once its sandbox runs, mid-crash or mid-load.
    let t0 = std::time::Instant::now();
    while recovery_servers(&base).is_empty() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(3));
    // A crash leaves no server for a moment: wait for the next one.
    while recovery_servers(&base).is_empty() && t0.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!recovery_servers(&base).is_empty(), "the run started its sandbox");
    child.kill().unwrap();
    child.wait().unwrap();
    let t0 = std::time::Instant::now();
    while !recovery_servers(&base).is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(recovery_servers(&base), Vec::<i32>::new(), "the sandbox's server dies with pileup");
}
