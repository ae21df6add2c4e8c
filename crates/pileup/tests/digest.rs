//! `pileup digest` on slow logs a real MariaDB wrote under sysbench and a
//! workload with planted problems: each problem ranks first by its own
//! signal, pt-query-digest counts the same statements and classes, FLUSH
//! LOGS and rotation lose nothing, bad input is named.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use mysql::prelude::Queryable;
use pileup_sandbox::Sandbox;
use serde_json::Value as J;

/// A sandbox that logs every statement with every detail to `dir/slow.log`.
fn logging_sandbox(dir: &Path) -> (Sandbox, PathBuf) {
    let log = dir.join("slow.log");
    (slow_logging(&log), log)
}

fn fingerprints(d: &J) -> Vec<String> {
    d["classes"].as_array().unwrap().iter().map(|c| c["fingerprint"].as_str().unwrap().to_string()).collect()
}

/// Statements in the log, counted the plain way: every entry has one
/// `# Query_time:` line.
fn entries(log: &Path) -> u64 {
    std::fs::read_to_string(log).unwrap().lines().filter(|l| l.starts_with("# Query_time: ")).count() as u64
}

/// The command lines of the index advisor's copy servers running now.
fn copy_servers() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .filter(|cmd| cmd.contains("mariadbd") && cmd.contains("/advise-"))
        .collect()
}

/// The three planted problems (pileup_sandbox::planted), run `rounds` times
/// with varied literals.
fn planted(sb: &Sandbox, rounds: u32) {
    let mut c = sb.connect().unwrap();
    pileup_sandbox::planted::make(&mut c).unwrap();
    for r in 0..rounds {
        pileup_sandbox::planted::round(&mut c, r).unwrap();
    }
}

#[test]
fn planted_problems_rank_first_by_their_own_signal_and_pt_query_digest_counts_the_same() {
    let dir = scratch("digest");
    let (sb, log) = logging_sandbox(&dir);
    let base = sysbench_prepare(&sb, "oltp_read_only", 1, 2000);
    let mut load = sysbench_start("oltp_read_only", &base, 2, 3);
    planted(&sb, 12);
    assert!(load.wait().unwrap().success());
    sb.sql("SELECT 1").unwrap();

    sb.sql("SET GLOBAL slow_query_log = OFF").unwrap();
    let d = digest_json(&[log.to_str().unwrap()]);
    assert_eq!(d["events"].as_u64().unwrap(), entries(&log), "every entry is a statement");
    assert_eq!(d["problems"]["count"], 0, "{}", d["problems"]);
    let fps = fingerprints(&d);
    assert!(fps.iter().any(|f| f == "select c from sbtest1 where id = ?"), "{fps:?}");

    let first = |rank: &str| {
        let d = digest_json(&["--rank", rank, log.to_str().unwrap()]);
        d["classes"][0].clone()
    };
    let ex = first("examined");
    assert_eq!(ex["fingerprint"], "select id from miss where k = ?", "{ex:#}");
    assert!(ex["signals"]["rows_examined_per_row"].as_f64().unwrap() >= 5000.0, "{ex:#}");
    let opt = first("optimizer");
    assert_eq!(opt["fingerprint"], "select id from dive where a in (?+) and b > ?", "{opt:#}");
    assert!(opt["signals"]["optimizer_share"].as_f64().unwrap() > 0.5, "{opt:#}");
    assert_eq!(opt["count"], 12);
    let sp = first("spill");
    assert_eq!(sp["fingerprint"], "select id, pad from spill where id > ? order by pad", "{sp:#}");
    assert_eq!(sp["flags"]["filesort_on_disk"]["yes"], 12, "{sp:#}");
    // The logged EXPLAIN comes with the sample.
    assert!(sp["sample"]["explain"].as_array().unwrap().len() >= 2, "{sp:#}");

    // The self-contained report.html: the profile, each class's histogram
    // and timeline, rendered by headless Chromium without a console message.
    let html_path = dir.join("report.html");
    let out = pileup(&["digest", "--rank", "examined", "-o", html_path.to_str().unwrap(), log.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(
        html.contains("id=\"profile\"") && html.contains("select id from miss where k = ?") && html.contains("<svg")
    );
    assert!(html.contains("When it ran") && html.contains("Statement time"), "histogram and timeline");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&html_path).unwrap().permissions().mode() & 0o777, 0o600);
    let (console, png) = chromium_screenshot(&html_path, &dir);
    assert!(console.is_empty(), "console messages: {console:?}");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "screenshot of {} bytes", png.len());

    // The advisor, on the same server: the plan forced on its own index, with
    // the other indexes' dives gone, is at least twice as fast, same rows.
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let adv = digest_json(&[
        "--rank",
        "optimizer",
        "--advise",
        "--advise-classes",
        "1",
        "-S",
        &sock,
        "-u",
        "root",
        log.to_str().unwrap(),
    ]);
    let a = &adv["advice"][0];
    assert_eq!(a["fingerprint"], "select id from dive where a in (?+) and b > ?", "{a:#}");
    let best = &a["variants"][a["best"].as_u64().unwrap_or_else(|| panic!("no advice: {a:#}")) as usize];
    assert!(best["change"].as_str().unwrap().contains("FORCE INDEX"), "{a:#}");
    assert_eq!(best["same_rows"], true);
    assert_eq!(best["standing"], "faster");
    // Settled: the interval's lower bound clears the 10% asked for.
    assert!(best["ratio"].as_f64().unwrap() >= 2.0, "{a:#}");
    assert!(best["ratio_interval"][0].as_f64().unwrap() >= 1.1, "{a:#}");
    // Choosing the plan is most of its time: the advice keeps the plan
    // and spares the optimizer the other indexes' dives.
    assert_eq!(best["same_plan"], true, "{a:#}");

    // pt-query-digest on the same log (the advisor's statements are not in
    // it: the log was turned off before): the same statements, the same classes.
    let pt = Command::new("pt-query-digest")
        .args(["--output", "json", "--limit", "100%", "--no-version-check"])
        .arg(&log)
        .output()
        .expect("pt-query-digest (percona-toolkit, make deps)");
    assert!(pt.status.success(), "{}", String::from_utf8_lossy(&pt.stderr));
    let text = String::from_utf8_lossy(&pt.stdout);
    let pt: J = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    let pt_classes = pt["classes"].as_array().unwrap();
    let pt_events: u64 = pt_classes.iter().map(|c| c["query_count"].as_u64().unwrap()).sum();
    assert_eq!(pt_events, d["events"].as_u64().unwrap());
    assert_eq!(
        pt_classes.len(),
        fps.len(),
        "pt: {:?}",
        pt_classes.iter().map(|c| &c["fingerprint"]).collect::<Vec<_>>()
    );
}

#[test]
fn flush_logs_and_rotation_lose_no_statement() {
    let dir = scratch("digest-rot");
    let (sb, log) = logging_sandbox(&dir);
    let mut c = sb.connect().unwrap();
    for i in 0..50 {
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} + 1 AS marker_a")).unwrap();
    }
    // FLUSH LOGS: the server writes its header into the same file.
    c.query_drop("FLUSH SLOW LOGS").unwrap();
    for i in 0..50 {
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} + 1 AS marker_a")).unwrap();
    }
    // Rotation: the file renamed, then reopened as a new one.
    let rotated = dir.join("slow.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    c.query_drop("FLUSH SLOW LOGS").unwrap();
    for i in 0..30 {
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} + 1 AS marker_a")).unwrap();
    }
    let text = std::fs::read_to_string(&rotated).unwrap();
    assert!(text.matches(", Version: ").count() >= 2, "the header was written twice");
    // The rotated file compressed, as logrotate leaves it.
    let gz = dir.join("slow.log.1.gz");
    let mut e = flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::fast());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap();

    let d = digest_json(&[log.to_str().unwrap(), gz.to_str().unwrap()]);
    let marker =
        d["classes"].as_array().unwrap().iter().find(|c| c["fingerprint"] == "select ? + ? as marker_a").unwrap();
    assert_eq!(marker["count"], 130);
    assert_eq!(d["events"].as_u64().unwrap(), entries(&log) + entries(&rotated));
    assert_eq!(d["problems"]["count"], 0, "{}", d["problems"]);
    // No statement carries a server header glued to it.
    for c in d["classes"].as_array().unwrap() {
        assert!(!c["sample"]["query"].as_str().unwrap().contains("Version:"), "{c:#}");
    }

    // The same log zstd-compressed on standard input.
    let zst = zstd::encode_all(text.as_bytes(), 3).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["digest", "--format", "json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&zst).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let s: J = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["events"].as_u64().unwrap(), entries(&rotated));
}

#[test]
fn bad_input_is_named_and_exits_non_zero() {
    let dir = scratch("digest-bad");
    // Missing file, a directory, an unknown output extension, a bad ranking.
    for (args, want) in [
        (vec!["digest", "/nonexistent/slow.log"], "cannot read /nonexistent/slow.log"),
        (vec!["digest", dir.to_str().unwrap()], "is a directory"),
        (vec!["digest", "-o", "x.png", "/dev/null"], "x.png: unknown extension"),
        (vec!["digest", "--rank", "speed", "/dev/null"], "invalid value 'speed' for '--rank"),
    ] {
        let out = pileup(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("Os {") && !err.contains("panicked"), "{err}");
    }
    // Inputs that are not what they seem: a program and its gzip are no
    // slow log (exit 1, one line); an empty file is an empty report and
    // a note (exit 0).
    let ls = std::fs::read("/bin/ls").unwrap();
    let gz = dir.join("ls.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut e, &ls).unwrap();
    std::fs::write(&gz, e.finish().unwrap()).unwrap();
    for f in ["/bin/ls", gz.to_str().unwrap()] {
        let out = pileup(&["digest", f]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{f}: {err}");
        assert_eq!(err.lines().count(), 1, "{f}: {err}");
        assert!(err.contains("is not a slow log"), "{f}: {err}");
    }
    let empty = dir.join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let out = pileup(&["digest", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("empty, no statements"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A log with a garbled value, ending mid-entry: what can be read
    // counts, the garbled value is named by file and line, exit status 3;
    // the last entry, with no statement yet, is a note (a live log ends so
    // while the server writes it), not damage.
    let log = dir.join("cut.log");
    std::fs::write(
        &log,
        "# User@Host: a[a] @ h []\n# Query_time: 0.1  Lock_time: 0  Rows_sent: 1  Rows_examined: 1\nSET timestamp=1;\nselect 1;\n\
         # User@Host: a[a] @ h []\n# Query_time: zz  Lock_time: 0  Rows_sent: 1  Rows_examined: 1\nSET timestamp=2;\nselect 2;\n\
         # User@Host: a[a] @ h []\n# Query_time: 0.1  Lock_time: 0  Rows_sent: 1",
    )
    .unwrap();
    let out = pileup(&["digest", "--format", "json", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    // Under --format json the error is one JSON object on stderr.
    let err: J = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["kind"], "damaged", "{err}");
    assert!(err["error"].as_str().unwrap().contains("cut.log:6: Query_time \"zz\" is not a number"), "{err}");
    let d: J = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["events"], 2);
    assert_eq!(d["problems"]["count"], 1, "{d}");
    let notes = d["notes"].to_string();
    assert!(notes.contains("cut.log:9: the last entry has no statement"), "{notes}");
    // Without the garbled value, the log is read whole: exit status 0.
    let live = dir.join("live.log");
    let text = std::fs::read_to_string(&log).unwrap().replace("Query_time: zz", "Query_time: 0.2");
    std::fs::write(&live, text).unwrap();
    let out = pileup(&["digest", live.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("live.log:9: the last entry has no statement"));

    // Past --max-classes, the rest is one "other" class and the report says so.
    let many = dir.join("many.log");
    let mut s = String::new();
    for i in 0..40 {
        s += &format!("# User@Host: a[a] @ h []\n# Query_time: 0.1\nSET timestamp=1;\nselect c{i} from t;\n");
    }
    std::fs::write(&many, s).unwrap();
    let d = digest_json(&["--max-classes", "10", many.to_str().unwrap()]);
    assert_eq!(d["classes"].as_array().unwrap().len(), 10);
    assert_eq!(d["other"]["count"], 30);
    let out = pileup(&["digest", "--max-classes", "10", many.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("counted together as \"other\""));
    // The report file is private.
    let o = dir.join("r.json");
    let out = pileup(&["digest", "-o", o.to_str().unwrap(), many.to_str().unwrap()]);
    assert!(out.status.success());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&o).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(serde_json::from_slice::<J>(&std::fs::read(&o).unwrap()).is_ok());
}

#[test]
fn follow_reads_a_growing_log_across_rotation_until_interrupted() {
    let dir = scratch("digest-follow");
    let (sb, log) = logging_sandbox(&dir);
    let mut c = sb.connect().unwrap();
    for i in 0..20 {
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} AS followed")).unwrap();
    }
    let child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["digest", "--follow", "--format", "json", log.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Time for pileup to open the log before it is renamed.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    for i in 0..10 {
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} AS followed")).unwrap();
    }
    // Rotated as logrotate does: renamed, then the server reopens its log.
    std::fs::rename(&log, dir.join("slow.log.1")).unwrap();
    c.query_drop("FLUSH SLOW LOGS").unwrap();
    for i in 0..15 {
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} AS followed")).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(800));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: J = serde_json::from_slice(&out.stdout).unwrap();
    let class = d["classes"].as_array().unwrap().iter().find(|c| c["fingerprint"] == "select ? as followed").unwrap();
    assert_eq!(class["count"], 45, "{class:#}");
    assert_eq!(d["problems"]["count"], 0, "{}", d["problems"]);
}

#[test]
fn the_slow_log_table_is_read_as_a_log() {
    let sb = sandbox_with(vec![("slow_query_log", "ON"), ("long_query_time", "0"), ("log_output", "TABLE")]);
    let mut c = sb.connect().unwrap();
    c.query_drop("CREATE DATABASE t1db").unwrap();
    c.query_drop("USE t1db").unwrap();
    for i in 0..25 {
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} + 1 AS from_table")).unwrap();
    }
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let d = digest_json(&["--slow-log-table", "-S", &sock, "-u", "root"]);
    let class =
        d["classes"].as_array().unwrap().iter().find(|c| c["fingerprint"] == "select ? + ? as from_table").unwrap();
    assert_eq!(class["count"], 25, "{class:#}");
    assert_eq!(class["databases"][0]["value"], "t1db");
    assert_eq!(class["users"][0]["value"], "root");
    assert!(class["attributes"]["query_time"]["sum"].as_f64().unwrap() > 0.0, "{class:#}");
    assert_eq!(class["attributes"]["rows_sent"]["sum"], 25);
    assert!(d["inputs"][0].as_str().unwrap().starts_with("mysql.slow_log on"), "{}", d["inputs"]);

    // A server that logs to a file now: the rows it wrote before are
    // read, with a note that they are not all.
    c.query_drop("SET GLOBAL log_output = 'FILE'").unwrap();
    let out = pileup(&["digest", "--slow-log-table", "-S", &sock, "-u", "root", "-f", "json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes = d["notes"].to_string();
    assert!(notes.contains("does not write mysql.slow_log now (log_output=FILE)"), "{notes}");
    assert!(d["classes"].as_array().unwrap().iter().any(|c| c["fingerprint"] == "select ? + ? as from_table"));
    // With no rows: one line naming log_output, not an empty report.
    c.query_drop("SET GLOBAL slow_query_log = OFF").unwrap();
    c.query_drop("TRUNCATE TABLE mysql.slow_log").unwrap();
    let out = pileup(&["digest", "--slow-log-table", "-S", &sock, "-u", "root"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.lines().count() == 1 && err.contains("log_output=FILE"), "{err}");
}

#[test]
fn performance_schema_digests_are_read_over_a_window() {
    let sb = sandbox_with(vec![("performance_schema", "ON")]);
    let mut c = sb.connect().unwrap();
    // Before the window: not counted.
    for i in 0..10 {
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} AS ps_marker")).unwrap();
    }
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["digest", "--server", "--duration", "6s", "--format", "json", "-S", &sock, "-u", "root"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Time for pileup's first read of the digests.
    std::thread::sleep(std::time::Duration::from_millis(2000));
    for i in 0..50 {
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} AS ps_marker")).unwrap();
    }
    // DISTINCT, which the digest prints as DISTINCTROW; and executions of
    // a prepared statement, which the digests leave out.
    for _ in 0..5 {
        let _: Vec<(i32,)> = c.query("SELECT DISTINCT a FROM (SELECT 1 AS a) AS t_distinct").unwrap();
    }
    for i in 0..100 {
        let _: Vec<(i32,)> = c.exec("SELECT ? + 1 AS prepared_marker", (i,)).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: J = serde_json::from_slice(&out.stdout).unwrap();
    let class = d["classes"].as_array().unwrap().iter().find(|c| c["fingerprint"] == "select ? as ps_marker");
    let class = class.unwrap_or_else(|| panic!("{:#}", d["classes"]));
    assert_eq!(class["count"], 50, "{class:#}");
    assert_eq!(class["attributes"]["rows_sent"]["sum"], 50);
    assert!(class["attributes"]["query_time"]["sum"].as_f64().unwrap() > 0.0);
    // Sums only: no percentile is made up.
    assert!(class["attributes"]["query_time"]["p95"].is_null(), "{class:#}");
    // The slow log's spelling is the class, whatever the source.
    let distinct: Vec<&str> = d["classes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["fingerprint"].as_str())
        .filter(|f| f.contains("t_distinct"))
        .collect();
    assert!(distinct.len() == 1 && distinct[0].starts_with("select distinct a"), "{distinct:?}");
    // What performance_schema did not see is said, with where to look.
    let notes = d["notes"].to_string();
    assert!(notes.contains("COM_STMT_EXECUTE") && notes.contains("slow log"), "{notes}");
    // A server with performance_schema off says so, in one line.
    let off = sandbox();
    let out =
        pileup(&["digest", "--server", "--duration", "1s", "-S", off.endpoint.socket.to_str().unwrap(), "-u", "root"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("performance_schema is off") && err.lines().count() == 1, "{err}");
}

/// The server killed in the middle of a performance_schema window: its
/// counters are gone with it, so the run ends within seconds in one line
/// saying so, not at the window's end.
#[test]
fn a_server_killed_in_the_window_is_said_at_once() {
    let mut sb = sandbox_with(vec![("performance_schema", "ON")]);
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["digest", "--server", "--duration", "60s", "-S", &sock, "-u", "root"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2000));
    sb.crash().unwrap();
    let died = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(died.elapsed() < std::time::Duration::from_secs(10), "{:?} after the death: {err}", died.elapsed());
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("the server stopped answering") && err.contains("into the window"), "{err}");
}

#[test]
fn the_same_statements_make_the_same_classes_from_the_slow_log_its_table_and_performance_schema() {
    let dir = scratch("digest-three");
    let log = dir.join("slow.log");
    let sb = sandbox_with(vec![
        ("performance_schema", "ON"),
        ("slow_query_log", "ON"),
        ("long_query_time", "0"),
        ("log_output", "FILE,TABLE"),
        ("slow_query_log_file", log.to_str().unwrap()),
    ]);
    let mut c = sb.connect().unwrap();
    c.query_drop("CREATE DATABASE three").unwrap();
    c.query_drop("USE three").unwrap();
    c.query_drop("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20), v DOUBLE)").unwrap();
    c.query_drop("CREATE TABLE u (id INT PRIMARY KEY, t_id INT)").unwrap();
    c.query_drop("TRUNCATE TABLE mysql.slow_log").unwrap();
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let server = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["digest", "--server", "--duration", "8s", "--format", "json", "-S", &sock, "-u", "root"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2000));
    // Literals of every kind, lists, DISTINCT, joins, comments, case.
    let statements = |i: i32| {
        vec![
            format!("INSERT INTO t (id, name, v) VALUES ({i}, 'n{i}', {i}.5)"),
            format!("SELECT name FROM t WHERE id = {i}"),
            format!("SELECT * FROM t WHERE id IN ({i}, {}, {})", i + 1, i + 2),
            format!("select distinct name from t where v > {i}.25"),
            format!("UPDATE t SET name = 'x{i}', v = v + 1 WHERE id = {i}"),
            format!("SELECT t.name, COUNT(*) FROM t JOIN u ON u.t_id = t.id WHERE t.id < {i} GROUP BY t.name ORDER BY 2 DESC LIMIT 5"),
            format!("/* app */ SELECT id FROM t WHERE name LIKE 'n{i}%' AND v BETWEEN {i} AND {}", i + 10),
            format!("DELETE FROM t WHERE id = {i} AND name = \"n{i}\""),
            format!("SELECT NULL, -{i}, 0x1F, TRUE FROM t WHERE name IS NOT NULL LIMIT {i}"),
        ]
    };
    for i in 0..6 {
        for q in statements(i) {
            c.query_drop(q).unwrap();
        }
    }
    let out = server.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let from_ps: J = serde_json::from_slice(&out.stdout).unwrap();
    let from_file = digest_json(&[log.to_str().unwrap()]);
    let from_table = digest_json(&["--slow-log-table", "-S", &sock, "-u", "root"]);
    // Each source's classes of these statements, by id (6 runs each).
    let ids = |d: &J| -> std::collections::BTreeMap<String, String> {
        d["classes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["count"] == 6)
            .filter(|c| c["fingerprint"].as_str().is_some_and(|f| f.contains(" t") || f.contains("into t")))
            .map(|c| (c["id"].as_str().unwrap().to_string(), c["fingerprint"].as_str().unwrap().to_string()))
            .collect()
    };
    let (file, table, ps) = (ids(&from_file), ids(&from_table), ids(&from_ps));
    assert_eq!(file.len(), statements(0).len(), "one class per statement in the slow log: {file:#?}");
    assert_eq!(table, file, "the slow-log table's classes are the slow log's");
    assert_eq!(ps, file, "performance_schema's classes are the slow log's");
}

/// The advisor on planted problems with known answers: a hint that hurts
/// is removed, and a primary-key lookup gets no advice, run after run.
#[test]
fn the_advisor_removes_a_hint_that_hurts_and_leaves_a_primary_key_lookup_alone() {
    let dir = scratch("digest-advise");
    let (sb, _) = logging_sandbox(&dir);
    let mut c = sb.connect().unwrap();
    c.query_drop("SET SESSION max_statement_time = 0").unwrap();
    c.query_drop("CREATE DATABASE adv").unwrap();
    c.query_drop("USE adv").unwrap();
    c.query_drop("CREATE TABLE h (id INT PRIMARY KEY, b INT, pad CHAR(100), KEY (b))").unwrap();
    c.query_drop("INSERT INTO h SELECT seq, seq % 200, REPEAT('x', 100) FROM seq_1_to_100000").unwrap();
    c.query_drop("ANALYZE TABLE h").unwrap();
    // A log of the hinted statement alone.
    let log = dir.join("hint.log");
    c.query_drop(format!("SET GLOBAL slow_query_log_file = '{}'", log.display())).unwrap();
    // Half the table through the index, row by row: the hint hurts.
    for _ in 0..5 {
        let _: Vec<(i64,)> = c.query("SELECT COUNT(pad) FROM h FORCE INDEX (b) WHERE b > 101").unwrap();
        // Spread over seconds: the log has a rate to weigh savings by.
        std::thread::sleep(std::time::Duration::from_millis(700));
    }
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    // The advisor on one class of `log`, within `budget`.
    // Three classes: the statement that switched the log file is in it
    // too, and can outrank 200 quick lookups.
    let advise = |log: &Path, budget: &str| -> Vec<String> {
        ["--advise", "--advise-classes", "3", "--advise-budget", budget, "-S", &sock, "-u", "root"]
            .iter()
            .map(|s| s.to_string())
            .chain([log.to_str().unwrap().to_string()])
            .collect()
    };
    let d = digest_json(&advise(&log, "5s").iter().map(String::as_str).collect::<Vec<_>>());
    let of = |d: &J, start: &str| -> J {
        let all = d["advice"].as_array().unwrap();
        all.iter()
            .find(|a| a["fingerprint"].as_str().unwrap().starts_with(start))
            .cloned()
            .unwrap_or_else(|| panic!("no advice on {start}: {all:?}"))
    };
    let a = &of(&d, "select count(pad) from h");
    assert!(a["fingerprint"].as_str().unwrap().contains("force index(b)"), "{a:#}");
    let best = &a["variants"][a["best"].as_u64().unwrap_or_else(|| panic!("no advice: {a:#}")) as usize];
    assert_eq!(best["change"], "without FORCE INDEX (b)", "{a:#}");
    assert_eq!(best["same_rows"], true);
    assert!(best["ratio_interval"][0].as_f64().unwrap() >= 1.1, "{a:#}");
    assert!(best["saving_ms"].as_f64().unwrap() >= 0.5, "{a:#}");
    assert!(best["saving_s_per_hour"].as_f64().is_some_and(|s| s > 0.0), "{a:#}");
    // Primary-key lookups, in a log of their own: nothing to gain, so no
    // advice, ten runs of the advisor in a row.
    let pk = dir.join("pk.log");
    c.query_drop(format!("SET GLOBAL slow_query_log_file = '{}'", pk.display())).unwrap();
    for i in 0..200 {
        let _: Vec<(String,)> = c.query(format!("SELECT pad FROM h WHERE id = {}", i * 37 % 100_000 + 1)).unwrap();
    }
    c.query_drop("SET GLOBAL slow_query_log = OFF").unwrap();
    for run in 0..10 {
        let d = digest_json(&advise(&pk, "2s").iter().map(String::as_str).collect::<Vec<_>>());
        let a = &of(&d, "select pad from h where id = ?");
        assert!(a["fingerprint"].as_str().unwrap().starts_with("select pad from h where id = ?"), "{a:#}");
        assert!(a["best"].is_null(), "run {run}: advice on a primary-key lookup: {a:#}");
    }
    // The text says why: nothing tried, no other plan, or within noise.
    let args = advise(&pk, "2s");
    let out = pileup(&[&["digest"][..], &args.iter().map(String::as_str).collect::<Vec<_>>()].concat());
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("advice: none") || t.contains("no variant tried"), "{t}");
}

/// The index advisor on a planted missing composite index: the index is
/// proposed, built on a sampled copy in a sandbox of pileup's own, settled
/// faster there with the copy planning like the server, and advised with
/// its ALTER TABLE; the redundant and the unused index are listed; the
/// server keeps its indexes and its slow log holds none of pileup's reads,
/// and the copy's server is gone when pileup exits.
#[test]
fn the_index_advisor_settles_a_missing_composite_index_on_a_copy_and_leaves_the_server_alone() {
    let dir = scratch("digest-index");
    let (sb, log) = logging_sandbox(&dir);
    let mut c = sb.connect().unwrap();
    c.query_drop("SET SESSION max_statement_time = 0, long_query_time = 100").unwrap();
    c.query_drop("CREATE DATABASE IxA").unwrap();
    c.query_drop("USE IxA").unwrap();
    c.query_drop(
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, c INT, pad CHAR(60), KEY a (a), KEY a_again (a), KEY c (c))",
    )
    .unwrap();
    c.query_drop(
        "INSERT INTO t SELECT seq, seq % 50, (seq * 7919) % 10000, seq % 3, REPEAT('p', 60) FROM seq_1_to_100000",
    )
    .unwrap();
    c.query_drop("ANALYZE TABLE t").unwrap();
    c.query_drop("CREATE VIEW v AS SELECT id, a, b FROM t").unwrap();
    c.query_drop("SET SESSION long_query_time = 0").unwrap();
    // A view's class is named and left alone (nothing to build an index on).
    for _ in 0..3 {
        let _: Vec<(i64,)> = c.query("SELECT COUNT(*) FROM v WHERE a = 3 AND b > 9000").unwrap();
    }
    // The statement reads 2,000 rows through `a` for the ten that (a, b) would.
    for i in 0..30 {
        let sql = format!("SELECT id, pad FROM t WHERE a = {} AND b BETWEEN {} AND {}", i % 50, i * 100, i * 100 + 50);
        let _: Vec<(i64, String)> = c.query(sql).unwrap();
        c.query_drop(format!("UPDATE t SET pad = 'q' WHERE id = {}", i + 1)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let d = digest_json(&[
        "--advise-indexes",
        "--sample",
        "50",
        "--advise-classes",
        "2",
        "--advise-budget",
        "10s",
        "-S",
        &sock,
        "-u",
        "root",
        log.to_str().unwrap(),
    ]);
    let ix = &d["index_advice"];
    let copy = &ix["copy"];
    assert_eq!(copy["sample"], 0.5, "{ix:#}");
    let rows = copy["rows"].as_u64().unwrap();
    assert!(copy["scanned_bytes"].as_u64().unwrap() > 0, "{ix:#}");
    assert!((40_000..60_000).contains(&rows), "a 50% sample of 100,000 rows: {rows}");
    let class = ix["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["fingerprint"].as_str().unwrap().starts_with("select id, pad from t where a = ?"))
        .unwrap_or_else(|| panic!("the statement's class: {ix:#}"));
    assert_eq!(class["server_plan"], class["copy_plan"], "{class:#}");
    let view =
        ix["classes"].as_array().unwrap().iter().find(|c| c["fingerprint"].as_str().unwrap().contains("from v "));
    let view = view.unwrap_or_else(|| panic!("the view's class: {ix:#}"));
    assert!(view["skipped"].as_str().unwrap().contains("not a base table"), "{view:#}");
    let advised: Vec<&J> = class["trials"].as_array().unwrap().iter().filter(|t| t["advised"] == true).collect();
    assert_eq!(advised.len(), 1, "one index advised: {class:#}");
    let t = advised[0];
    assert_eq!(t["columns"], serde_json::json!(["a", "b"]), "{class:#}");
    assert_eq!(t["alter"], "ALTER TABLE `IxA`.`t` ADD INDEX `ix_a_b` (`a`, `b`), ALGORITHM=INPLACE, LOCK=NONE");
    assert!(t["plan"].as_str().unwrap().contains("ix_a_b"), "{t:#}");
    let timing = &t["timing"];
    assert_eq!(timing["same_rows"], true, "{t:#}");
    assert!(timing["ratio_interval"][0].as_f64().unwrap() >= 1.1, "{t:#}");
    assert!(timing["saving_ms"].as_f64().unwrap() >= 0.5, "{t:#}");
    // The figures agree: the saving is before less after, the examined
    // rows fall, the scaled build is the copy's build times the table's
    // share copied.
    let (before, after) = (timing["base_median_ms"].as_f64().unwrap(), timing["median_ms"].as_f64().unwrap());
    assert!((timing["saving_ms"].as_f64().unwrap() - (before - after)).abs() < 1e-9, "{t:#}");
    assert!(t["examined_after"].as_f64().unwrap() * 10.0 < t["examined_before"].as_f64().unwrap(), "{t:#}");
    assert!(t["size_bytes"].as_u64().unwrap() > 0, "{t:#}");
    assert!(t["size_bytes_full"].as_u64().unwrap() >= t["size_bytes"].as_u64().unwrap(), "{t:#}");
    // A sample's saving is not put at the server's rate.
    assert!(timing["saving_s_per_hour"].is_null(), "{t:#}");
    let (build, full) = (t["build_s"].as_f64().unwrap(), t["build_s_full"].as_f64().unwrap());
    assert!(full >= build && full <= build * 3.0, "a 50% copy's build scaled: {build} → {full}");
    // The update class was replayed, rolled back, before and after, or
    // said to change no row of the half copy.
    let w = &t["writes"][0];
    assert!(
        (w["error"].is_null() && w["runs"].as_u64().unwrap() > 0)
            || w["error"].as_str().unwrap().contains("changes no row of the copy"),
        "{t:#}"
    );
    let named = |list: &str| -> Vec<String> {
        ix[list].as_array().unwrap().iter().map(|n| n["index"].as_str().unwrap().to_string()).collect()
    };
    assert!(named("redundant").contains(&"a_again".to_string()), "{ix:#}");
    assert!(named("unused").contains(&"c".to_string()), "{ix:#}");
    assert!(!named("unused").contains(&"a".to_string()) || !named("unused").contains(&"a_again".to_string()), "{ix:#}");
    // The server is as it was: its indexes, a slow log without pileup's
    // reads, no copy's server left running.
    c.query_drop("SET SESSION long_query_time = 100").unwrap();
    let keys: Vec<String> = c
        .query("SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'IxA' ORDER BY 1")
        .unwrap();
    assert_eq!(keys, ["a", "a_again", "c", "PRIMARY"]);
    c.query_drop("SET GLOBAL slow_query_log = OFF").unwrap();
    let after_log = std::fs::read_to_string(&log).unwrap();
    let added = &after_log[logged.len()..];
    assert!(
        !added.contains("information_schema") && !added.contains("FROM `IxA`.`t`"),
        "pileup's reads in the slow log: {added}"
    );
    let left = copy_servers();
    assert!(left.is_empty(), "the copy's server is still running: {left:?}");
    // The text gives the statement to run.
    let out = pileup(&[
        "digest",
        "--advise-indexes",
        "--advise-classes",
        "1",
        "--advise-budget",
        "5s",
        "-S",
        &sock,
        "-u",
        "root",
        log.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("=> ALTER TABLE `IxA`.`t` ADD INDEX `ix_a_b` (`a`, `b`), ALGORITHM=INPLACE, LOCK=NONE"),
        "{text}"
    );
}

/// The server dies under each advisor: the report of the log is written
/// whole, within seconds of the death, what was measured before it stands,
/// and the advice says that the server stopped answering (instead of a
/// failure per class), with no copy's server left running.
#[test]
fn the_advisors_say_the_server_stopped_answering_and_keep_the_report() {
    let dir = scratch("digest-gone");
    let (mut sb, log) = logging_sandbox(&dir);
    let mut c = sb.connect().unwrap();
    c.query_drop("SET SESSION max_statement_time = 0, long_query_time = 100").unwrap();
    c.query_drop("CREATE DATABASE gone").unwrap();
    c.query_drop("USE gone").unwrap();
    c.query_drop("CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, c INT, pad CHAR(60), KEY a (a))").unwrap();
    c.query_drop("INSERT INTO t SELECT seq, seq % 50, seq % 997, seq % 7, REPEAT('p', 60) FROM seq_1_to_200000")
        .unwrap();
    c.query_drop("ANALYZE TABLE t").unwrap();
    c.query_drop("SET SESSION long_query_time = 0").unwrap();
    // A hint that changes the plan (the plan advisor times it), and two
    // classes with an index to try: (a, b) and (c, b).
    for i in 0..10 {
        let _: Vec<(i64,)> = c.query(format!("SELECT COUNT(pad) FROM t FORCE INDEX (a) WHERE a > {}", i + 5)).unwrap();
        let _: Vec<(i64,)> = c.query(format!("SELECT id FROM t WHERE a = {} AND b = {}", i, i * 3)).unwrap();
        let _: Vec<(i64,)> = c.query(format!("SELECT COUNT(*) FROM t WHERE c = {} AND b < {}", i % 7, i)).unwrap();
    }
    c.query_drop("SET GLOBAL slow_query_log = OFF").unwrap();
    drop(c);
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let classes = digest_json(&[log.to_str().unwrap()])["classes"].as_array().unwrap().len();
    // Each advisor is run on a terminal (its progress is shown there) and
    // the server killed once it says it is timing the first class: on the
    // server (`--advise`), on the copy (`--advise-indexes`).
    for (flag, key, cue) in
        [("--advise", "advice", "timing the statement"), ("--advise-indexes", "index_advice", "on the copy")]
    {
        let report = dir.join(format!("{}.json", &flag[2..]));
        let cmd = format!(
            "{} digest -f json -o {} {flag} --advise-classes 2 --advise-budget 10s -S {sock} -u root {}",
            env!("CARGO_BIN_EXE_pileup"),
            report.display(),
            log.display()
        );
        let mut child = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script (util-linux)");
        let mut terminal = child.stdout.take().unwrap();
        let mut shown = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&shown).contains(cue) {
            use std::io::Read;
            match terminal.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => shown.extend_from_slice(&buf[..n]),
            }
        }
        let shown = String::from_utf8_lossy(&shown).into_owned();
        assert!(shown.contains(cue), "{flag} never said {cue:?}: {shown}");
        sb.crash().unwrap();
        let died = std::time::Instant::now();
        let status = child.wait().unwrap();
        let after = died.elapsed();
        assert!(after < std::time::Duration::from_secs(30), "{flag}: {after:?} after the server died");
        assert!(status.success(), "{flag}: {status:?} {shown}");
        let d: J = serde_json::from_slice(&std::fs::read(&report).unwrap()).expect("a JSON report");
        assert_eq!(d["classes"].as_array().unwrap().len(), classes, "{flag}: the log's report is whole");
        let said = d[key].to_string();
        eprintln!("{flag}: {after:?} after the death: {said}");
        assert!(said.contains("the server stopped answering"), "{flag}: {said}");
        assert!(copy_servers().is_empty(), "{flag}: a copy's server is left running: {:?}", copy_servers());
        sb.start_again().unwrap();
    }
}
