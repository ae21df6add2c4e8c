//! `pileup watch` against real sandboxes: stalls are caught within a second of
//! onset with a verdict naming the cause; steady load captures nothing;
//! history and captures survive the watcher.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use mysql::prelude::Queryable;
use pileup_sandbox::throttle::{Limit, Throttle};

fn now_unix() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Start `pileup watch --json`; events arrive on the returned channel.
fn watch(
    sb: &pileup_sandbox::Sandbox,
    data: &std::path::Path,
    extra: &[&str],
) -> (Child, mpsc::Receiver<serde_json::Value>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
    cmd.args([
        "watch",
        "-S",
        sb.endpoint.socket.to_str().unwrap(),
        "-u",
        "root",
        "--pid",
        &sb.pid().to_string(),
        "--data-dir",
        data.to_str().unwrap(),
        "--json",
    ])
    .args(if extra.contains(&"--interval") { &[][..] } else { &["--interval", "200ms"][..] })
    // Captures here are a few megabytes, and the tests beside this one
    // fill disk images of their own: the default guard (1 GiB free) would
    // skip captures on a small CI disk.
    .args(if extra.contains(&"--min-free-mib") { &[][..] } else { &["--min-free-mib", "128"][..] })
    .args(extra)
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    // PILEUP_TEST_LOG_DIR keeps each watcher's debug log, to see why a test
    // was slow or failed.
    if let Some(dir) = std::env::var_os("PILEUP_TEST_LOG_DIR") {
        let log = std::path::Path::new(&dir).join(format!("{}.log", data.file_name().unwrap().to_string_lossy()));
        cmd.arg("-vv").stderr(std::fs::File::create(log).unwrap());
    }
    // The watcher dies with the test's thread, a panicking one too, so a
    // failed test leaves no watcher behind to load the next one's server.
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) {
                // The first line says what is watched; the tests follow
                // what happens after it.
                if v["event"] == "started" {
                    continue;
                }
                if tx.send(v).is_err() {
                    break;
                }
            }
        }
    });
    (child, rx)
}

/// The capture `wait_for` found, or a panic listing every event but polls.
fn captured(cap: Option<serde_json::Value>, seen: &[serde_json::Value]) -> serde_json::Value {
    cap.unwrap_or_else(|| {
        panic!("no capture; events: {:?}", seen.iter().filter(|v| v["event"] != "poll").collect::<Vec<_>>())
    })
}

fn wait_for(
    rx: &mpsc::Receiver<serde_json::Value>,
    kind: &str,
    within: Duration,
    seen: &mut Vec<serde_json::Value>,
) -> Option<serde_json::Value> {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.push(v.clone());
            if v["event"] == kind {
                return Some(v);
            }
        }
    }
    None
}

/// Wait until the server has `n` connections (ours included): sysbench
/// takes a moment to connect on a busy machine.
fn connected(sb: &pileup_sandbox::Sandbox, n: u64) {
    let t0 = std::time::Instant::now();
    while sb
        .connect()
        .unwrap()
        .query_first::<(String, u64), _>("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
        .unwrap()
        .map_or(0, |r| r.1)
        < n
    {
        assert!(t0.elapsed() < Duration::from_secs(30), "sysbench did not connect in 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A row-lock convoy on `w.hot`: one open transaction holds row 1 and `n`
/// connections queue for it (for 30 s at most).
struct Convoy {
    holder: mysql::Conn,
    holder_id: u64,
    /// When the row was taken.
    onset: f64,
    waiters: Vec<std::thread::JoinHandle<()>>,
}

fn convoy(sb: &pileup_sandbox::Sandbox, n: usize) -> Convoy {
    let mut holder = sb.connect().unwrap();
    let holder_id: u64 = holder.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    holder.query_drop("BEGIN").unwrap();
    holder.query_drop("UPDATE w.hot SET v = v + 1 WHERE id = 1").unwrap();
    let onset = now_unix();
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let spec = sb.conn_spec();
            std::thread::spawn(move || {
                let mut c = spec.connect().unwrap();
                let _ = c.query_drop("SET SESSION innodb_lock_wait_timeout = 30");
                let _ = c.query_drop("UPDATE w.hot SET v = v + 1 WHERE id = 1");
            })
        })
        .collect();
    Convoy { holder, holder_id, onset, waiters }
}

#[test]
fn hot_row_convoy_is_caught_within_a_second_and_the_holder_named() {
    let sb = sandbox();
    sb.sql("CREATE DATABASE w; CREATE TABLE w.hot (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; INSERT INTO w.hot VALUES (1, 0)").unwrap();
    let mut load = sysbench(&sb, "oltp_read_only", 4, 60);
    // The steady-load checks below expect sysbench's 4 connections in every
    // poll: let them connect before the watcher starts (on a busy 2-core box
    // they can take longer than the first poll).
    connected(&sb, 5);
    let data = tempfile_dir("watch-convoy");
    let (mut child, rx) = watch(&sb, &data, &["--listen", "127.0.0.1:0", "--interval", "1s"]);
    let mut seen = vec![];
    let listening = wait_for(&rx, "listening", Duration::from_secs(10), &mut seen).expect("listening event");
    // Steady load first: polls flow, nothing fires.
    std::thread::sleep(Duration::from_secs(5));
    // Prometheus can scrape the derived metrics meanwhile.
    let body = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(listening["addr"].as_str().unwrap()).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut b = String::new();
        c.read_to_string(&mut b).unwrap();
        b
    };
    assert!(
        body.contains("\npileup_questions_rate ")
            && body.contains("\npileup_threads_running ")
            && body.contains("pileup_polls_total"),
        "{body}"
    );
    seen.clear();
    while let Ok(v) = rx.try_recv() {
        seen.push(v);
    }
    let polls = seen.iter().filter(|v| v["event"] == "poll").count();
    assert!(polls >= 4, "only {polls} polls in 5 s at 1 s");
    assert!(
        seen.iter().all(|v| v["event"] == "poll"),
        "steady load must not trigger: {:?}",
        seen.iter().filter(|v| v["event"] != "poll").collect::<Vec<_>>()
    );
    assert!(seen.iter().any(|v| v["derived"]["questions_rate"].as_f64().unwrap_or(0.0) > 10.0), "rates are derived");
    // Every poll summarises the processlist and times each collector.
    for k in ["pl_threads", "pl_active", "cost_status_ms", "cost_processlist_ms", "cost_os_ms"] {
        assert!(seen.iter().all(|v| v["derived"][k].is_number()), "{k} missing from a poll");
    }
    assert!(seen.iter().all(|v| v["derived"]["pl_threads"].as_f64().unwrap() >= 4.0), "4 sysbench connections");

    // The convoy: one transaction holds the row, 20 connections queue on it.
    let Convoy { mut holder, holder_id, onset, waiters } = convoy(&sb, 20);
    let cap = wait_for(&rx, "captured", Duration::from_secs(15), &mut seen);
    let cap = captured(cap, &seen);
    let verdict = cap["verdict"].as_str().unwrap();
    eprintln!("verdict: {verdict}");
    assert!(
        verdict.starts_with("row lock convoy") && verdict.contains(&format!("connection {holder_id} ")),
        "verdict: {verdict}; convoy began at {onset:.2}; events: {:?}",
        seen.iter().filter(|v| v["event"] != "poll").collect::<Vec<_>>()
    );
    // The idle holder's last statement, read from its memory: the UPDATE
    // that took the row.
    assert!(verdict.contains("it last ran `UPDATE w.hot SET v = v + 1 WHERE id = 1`"), "verdict: {verdict}");
    let waits = |k: &str| seen.iter().filter_map(|v| v["derived"][k].as_f64()).fold(0.0, f64::max);
    assert!(waits("innodb_row_lock_current_waits") >= 10.0 && waits("pl_active") >= 20.0, "the polls saw the queue");
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let stacks: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("stacks.json")).unwrap()).unwrap();
    let first_stack = stacks["samples"][0]["at_unix_ms"].as_f64().unwrap() / 1000.0;
    // The server threads serving pileup's own connections (the sampler's
    // and the watcher's polls, at least) are marked as pileup's.
    let ours =
        stacks["samples"][0]["threads"].as_array().unwrap().iter().filter(|t| t["sql"]["is_pileup"] == true).count();
    assert!(ours >= 2, "pileup's own connections' threads marked: {ours}");
    assert!(first_stack - onset <= 1.0, "first stack {:.2} s after onset", first_stack - onset);
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(report.starts_with("VERDICT: row lock convoy"), "{report}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(dir.join("processlist.txt")).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(dir.join("processlist.txt")).unwrap().contains("UPDATE w.hot"));

    // The self-contained report: verdict first, rebuilt by `pileup report`,
    // rendered by headless Chromium without a console message.
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(
        html.contains("id=\"verdict\">row lock convoy")
            && html.contains("<polyline")
            && html.contains("data:image/svg+xml;base64,")
    );
    let out = pileup(&["report", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let scratch = tempfile_dir("chromium");
    let (console, png) = chromium_screenshot(&dir.join("report.html"), &scratch);
    assert!(console.is_empty(), "console messages: {console:?}");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "screenshot of {} bytes", png.len());

    holder.query_drop("ROLLBACK").unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success(), "watch exits cleanly on SIGTERM");
    let _ = load.kill();
    let _ = load.wait();

    // History and captures are still there for the next watcher.
    let out = pileup(&["captures", "--data-dir", data.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let caps: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(caps["captures"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["verdict"].as_str().unwrap_or("").contains("row lock convoy")));
    let store = pileup_watch::store::Store::open(&data).unwrap();
    assert!(store.count().unwrap() >= 8, "a poll a second, and faster while the convoy was decided");
}

#[test]
fn a_server_that_stops_answering_is_caught_with_stacks() {
    let sb = sandbox();
    let data = tempfile_dir("watch-hang");
    let (mut child, rx) = watch(&sb, &data, &[]);
    std::thread::sleep(Duration::from_secs(2));
    let pid = nix::unistd::Pid::from_raw(sb.pid() as i32);
    // Simulate a hung server: the test (not pileup) freezes it.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let onset = now_unix();
    let mut seen = vec![];
    let cap = wait_for(&rx, "captured", Duration::from_secs(15), &mut seen);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let cap = captured(cap, &seen);
    assert_eq!(cap["trigger"], "poll_failed");
    let verdict = cap["verdict"].as_str().unwrap();
    eprintln!("verdict: {verdict}");
    assert!(verdict.starts_with("the server does not answer SQL"), "{verdict}");
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let stacks: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("stacks.json")).unwrap()).unwrap();
    let threads = stacks["samples"][0]["threads"].as_array().unwrap();
    assert!(
        threads.iter().any(|t| labels(t).iter().any(|l| l == "handle_connections_sockets")),
        "stacks captured while SQL was dead"
    );
    let first_stack = stacks["samples"][0]["at_unix_ms"].as_f64().unwrap() / 1000.0;
    assert!(first_stack - onset <= 1.0, "first stack {:.2} s after onset", first_stack - onset);
    // The server is fine afterwards.
    std::thread::sleep(Duration::from_millis(300));
    sb.connect().unwrap().query_drop("DO 1").unwrap();
    end(&mut [&mut child]);
}

/// The server's device all but stops answering (one request a second, as a
/// failing disk or a detached volume) under a write load: `watch` captures
/// the stall with stacks within seconds, naming the disk, and every tool run meanwhile
/// ends within its bound, with its result or one line saying why. The
/// server goes on once the device answers again.
#[test]
fn a_device_that_stops_answering_is_captured_and_no_tool_waits_on_it_unbounded() {
    let _device = device();
    let sb = sandbox();
    let base = sysbench_prepare(&sb, "oltp_write_only", 2, 10_000);
    let mut load = sysbench_start("oltp_write_only", &base, 8, 90);
    let data = tempfile_dir("watch-stalled");
    let (mut child, rx) = watch(&sb, &data, &["--interval", "1s"]);
    std::thread::sleep(Duration::from_secs(8));
    let mut seen: Vec<serde_json::Value> = rx.try_iter().collect();
    let onset = now_unix();
    let throttle = Throttle::new(&sb, Limit::Stalled).expect("stalling the datadir's device");
    let cap = wait_for(&rx, "captured", Duration::from_secs(20), &mut seen);
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let pid = sb.pid().to_string();
    let runs: [&[&str]; 4] = [
        &["top", "--once", "--pid", &pid],
        &["stacks", "--pid", &pid],
        &["digest", "--slow-log-table"],
        &["locks", "--pid", &pid, "--duration", "2s"],
    ];
    let mut ran = vec![];
    for args in runs {
        let t0 = Instant::now();
        let o = pileup(&[args, &["-S", &sock, "-u", "root"]].concat());
        let took = t0.elapsed();
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        eprintln!("{args:?}: exit {:?} in {took:.1?}: {}", o.status.code(), e.trim().lines().last().unwrap_or(""));
        ran.push((args, o.status.code(), took, e));
    }
    drop(throttle);
    let after: Vec<serde_json::Value> = rx.try_iter().collect();
    end(&mut [&mut child, &mut load]);
    let cap = captured(cap, &seen);
    let (verdict, classes) = verdict_and_classes(&cap);
    eprintln!("classes: {classes:?}; events after: {}", after.len());
    let first = first_stack(&cap) - onset;
    assert!(first <= 10.0, "first stack {first:.2} s after the device stalled");
    assert!(classes.iter().any(|(c, _)| c == "slow_disk"), "the disk is not named: {verdict}; {classes:?}");
    for (args, code, took, e) in ran {
        assert!(took < Duration::from_secs(30), "{args:?} waited {took:?} on the stalled device");
        assert!(code == Some(0) || (code == Some(1) && e.trim().lines().count() == 1), "{args:?}: {code:?} {e}");
        assert!(!e.contains("Resource temporarily") && !e.contains("os error"), "{args:?}: the OS's words: {e}");
    }
    // The server goes on.
    let t0 = Instant::now();
    while sb.sql("CREATE TABLE IF NOT EXISTS sbtest.after (a INT)").is_err() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the server did not go on after the device answered");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn tempfile_dir(name: &str) -> Scratch {
    scratch(name)
}

/// Prepare sysbench tables and start a rate-limited load: few queries
/// running at steady state, all of them queue once their table is blocked.
fn queueing_load(sb: &pileup_sandbox::Sandbox, test: &str, tables: &str) -> Child {
    let sock = format!("--mysql-socket={}", sb.endpoint.socket.display());
    let tables = format!("--tables={tables}");
    let base = ["--db-driver=mysql", &sock, "--mysql-user=root", &tables, "--table-size=2000"];
    sb.sql("CREATE DATABASE sbtest").unwrap();
    assert!(Command::new("sysbench").arg(test).args(base).arg("prepare").output().unwrap().status.success());
    Command::new("sysbench")
        .arg(test)
        .args(base)
        .args(["--threads=24", "--rate=150", "--time=60", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A connection that takes a global lock: it waits out the writers' running
/// statements (the sandbox's connections give up after 1 s, which a busy
/// test machine can exceed).
fn locker(sb: &pileup_sandbox::Sandbox) -> mysql::Conn {
    let mut f = sb.connect().unwrap();
    f.query_drop("SET SESSION lock_wait_timeout = 30, max_statement_time = 0").unwrap();
    f
}

/// A global lock (`lock`, released by `unlock`) taken under write load,
/// with idle connections around (one idle since before the watcher, one
/// since shortly before the lock): the capture, after 4 s of steady load
/// that must not trigger, and the locking connection. A `fresh` locking
/// connection runs nothing before the lock, not even the driver's own
/// queries, so that its lock is its first statement.
fn global_lock_capture(
    sb: &pileup_sandbox::Sandbox,
    name: &str,
    extra: &[&str],
    lock: &[&str],
    unlock: &str,
    first_stack_within: f64,
    fresh: bool,
) -> (u64, serde_json::Value, Scratch) {
    let mut load = queueing_load(sb, "oltp_write_only", "2");
    let mut idle_long = sb.connect().unwrap();
    idle_long.query_drop("SELECT 1").unwrap();
    let data = tempfile_dir(name);
    let (mut child, rx) = watch(sb, &data, extra);
    std::thread::sleep(Duration::from_secs(2));
    let mut idle_recent = sb.connect().unwrap();
    idle_recent.query_drop("SELECT 1").unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut seen: Vec<serde_json::Value> = rx.try_iter().collect();
    assert!(
        seen.iter().all(|v| v["event"] == "poll"),
        "steady write load must not trigger: {:?}",
        seen.iter().filter(|v| v["event"] != "poll").collect::<Vec<_>>()
    );
    let (mut f, ftwrl_id) = if fresh {
        let f = mysql::Conn::new(sb.conn_spec().opts().read_timeout(None).write_timeout(None)).unwrap();
        let id = f.connection_id() as u64;
        (f, id)
    } else {
        let mut f = locker(sb);
        let id: u64 = f.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
        (f, id)
    };
    for q in lock {
        f.query_drop(q).unwrap();
    }
    let onset = now_unix();
    let cap = wait_for(&rx, "captured", Duration::from_secs(15), &mut seen);
    // The polls while the lock is still held, for the processlist summary.
    std::thread::sleep(Duration::from_secs(1));
    seen.extend(rx.try_iter());
    f.query_drop(unlock).unwrap();
    let held = now_unix() - onset;
    // The stall the trigger fired for is recorded when it clears, from
    // its start to its end, not as the length of its hold.
    std::thread::sleep(Duration::from_secs(3));
    seen.extend(rx.try_iter());
    let lasted: Vec<f64> = seen
        .iter()
        .filter(|v| v["event"] == "stall" && v["what"].is_string())
        .filter_map(|v| Some(v["ended_unix"].as_f64()? - v["began_unix"].as_f64()?))
        .collect();
    assert!(lasted.iter().any(|l| (held - 1.5..=held + 2.0).contains(l)), "a stall of about {held:.1} s: {lasted:?}");
    let cap = captured(cap, &seen);
    let global_waits = seen.iter().filter_map(|v| v["derived"]["pl_waiting_global_lock"].as_f64()).fold(0.0, f64::max);
    // How many have queued at a poll depends on how many of the 24 writers
    // (150 transactions a second in all) arrived since the lock: a busy
    // machine has seen 4 at a poll a second into it.
    assert!(global_waits >= 3.0, "the processlist summary saw writers queue on the global lock ({global_waits})");
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let stacks: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("stacks.json")).unwrap()).unwrap();
    let first_stack = stacks["samples"][0]["at_unix_ms"].as_f64().unwrap() / 1000.0;
    // The thread scan sees the pile-up between polls.
    assert!(
        first_stack - onset < first_stack_within,
        "first stack {:.2} s after the lock was taken",
        first_stack - onset
    );
    end(&mut [&mut child, &mut load]);
    drop((idle_long, idle_recent));
    (ftwrl_id, cap, data)
}

#[test]
fn ftwrl_during_write_load_is_caught_and_its_connection_named() {
    // A default server: --install-plugins installs metadata_lock_info, and
    // the holder is read from it.
    let sb = sandbox();
    let ftwrl = ["FLUSH TABLES WITH READ LOCK"];
    // The lock is its connection's first statement (the driver asks the
    // server nothing first): its text is read from the arena when the
    // login left room for it there, and otherwise the verdict says why it
    // cannot be.
    let (ftwrl_id, cap, _data) =
        global_lock_capture(&sb, "watch-ftwrl", &["--install-plugins"], &ftwrl, "UNLOCK TABLES", 1.0, true);
    let verdict = cap["verdict"].as_str().unwrap();
    eprintln!("verdict: {verdict}");
    assert!(
        verdict.starts_with("global read lock") && verdict.contains(&format!("held by connection {ftwrl_id} ")),
        "verdict: {verdict}"
    );
    assert!(
        verdict.contains("last ran `FLUSH TABLES WITH READ LOCK` (read from its memory)")
            || verdict.contains("unknown (no statement text was left in its statement arena (the text of a connection's first statement"),
        "verdict: {verdict}"
    );
    assert!(verdict.contains("from metadata_lock_info"), "verdict: {verdict}");
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    assert!(std::fs::read_to_string(dir.join("metadata_locks.txt")).unwrap().contains("BACKUP_FTWRL"));
    let plugin: Option<String> = sb
        .connect()
        .unwrap()
        .query_first("SELECT PLUGIN_STATUS FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO'")
        .unwrap();
    assert_eq!(plugin.as_deref(), Some("ACTIVE"));
}

#[test]
fn ftwrl_on_a_default_server_names_its_holder_by_timing_and_says_so() {
    // No plugin, performance_schema off: the holder is the connection that
    // went idle just before the writers queued, and the verdict says it is
    // inferred.
    let sb = sandbox();
    let ftwrl = ["FLUSH TABLES WITH READ LOCK"];
    // Polls at the default interval: the first stack still comes within a second.
    let (ftwrl_id, cap, _data) =
        global_lock_capture(&sb, "watch-ftwrl-default", &["--interval", "1s"], &ftwrl, "UNLOCK TABLES", 1.0, false);
    let verdict = cap["verdict"].as_str().unwrap();
    eprintln!("verdict: {verdict}");
    // What the holder last ran is read from its memory, and names the lock.
    assert!(
        verdict.starts_with("global read lock: ")
            && verdict.contains(&format!("likely held by connection {ftwrl_id} "))
            && verdict.contains("idle since ")
            && verdict.contains("last ran `FLUSH TABLES WITH READ LOCK` (read from its memory)")
            && verdict.contains("inferred: from the processlist's timing")
            && verdict.contains("--install-plugins"),
        "verdict: {verdict}"
    );
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let ev = evidence(&cap);
    assert_eq!(ev["lock_pileup"]["sureness"], "likely", "{}", ev["lock_pileup"]);
    assert_eq!(ev["lock_pileup"]["holders"][0]["conn"], ftwrl_id);
    assert!(std::fs::read_to_string(dir.join("report.txt")).unwrap().contains("lock pile-up: "));
}

#[test]
fn backup_stage_holder_is_named_inferred_then_exact() {
    // A backup tool's BACKUP STAGE BLOCK_COMMIT: writers wait at commit.
    let sb = sandbox();
    let stages = ["BACKUP STAGE START", "BACKUP STAGE BLOCK_COMMIT"];
    // Only committing writers wait at first (the rest queue behind their
    // row locks): the pile-up takes longer to build than under FTWRL.
    let (id, cap, _data) = global_lock_capture(&sb, "watch-backup", &[], &stages, "BACKUP STAGE END", 2.0, false);
    let verdict = cap["verdict"].as_str().unwrap();
    eprintln!("verdict: {verdict}");
    assert!(
        verdict.starts_with("backup lock: ")
            && verdict.contains(&format!("likely held by connection {id} "))
            && verdict.contains("last ran `BACKUP STAGE BLOCK_COMMIT` (read from its memory)")
            && verdict.contains("inferred"),
        "verdict: {verdict}"
    );
    // The same with the plugin: exact, and named as a backup.
    sb.sql("DROP DATABASE sbtest; INSTALL SONAME 'metadata_lock_info'").unwrap();
    let (id, cap, _data) = global_lock_capture(&sb, "watch-backup-exact", &[], &stages, "BACKUP STAGE END", 2.0, false);
    let verdict = cap["verdict"].as_str().unwrap();
    eprintln!("verdict: {verdict}");
    assert!(
        verdict.starts_with("backup lock: ")
            && verdict.contains(&format!("held by connection {id} "))
            && verdict.contains("BACKUP STAGE"),
        "verdict: {verdict}"
    );
}

#[test]
fn short_stalls_between_polls_are_timed_and_captured_when_they_repeat() {
    // FTWRL held 400 ms, three times 3 s apart, under write load: too short
    // for a 1 s poll to see, each one a timed stall; the third is captured.
    let sb = sandbox();
    let mut load = queueing_load(&sb, "oltp_write_only", "2");
    let data = tempfile_dir("watch-short");
    let (mut child, rx) = watch(&sb, &data, &["--interval", "1s"]);
    std::thread::sleep(Duration::from_secs(4));
    let mut seen: Vec<serde_json::Value> = rx.try_iter().collect();
    assert!(
        seen.iter().all(|v| v["event"] == "poll"),
        "steady load: {:?}",
        seen.iter().filter(|v| v["event"] != "poll").collect::<Vec<_>>()
    );
    let mut f = locker(&sb);
    let mut held = vec![];
    for _ in 0..3 {
        // Writers queue from the moment FTWRL asks for the lock, before it
        // has waited out the statements already running.
        let t = now_unix();
        f.query_drop("FLUSH TABLES WITH READ LOCK").unwrap();
        std::thread::sleep(Duration::from_millis(400));
        f.query_drop("UNLOCK TABLES").unwrap();
        held.push((t, now_unix()));
        std::thread::sleep(Duration::from_secs(3));
    }
    let cap = wait_for(&rx, "captured", Duration::from_secs(10), &mut seen);
    // Stopped as a service manager stops it: the reports still waiting for
    // what came after are rebuilt on the way out.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success(), "watch exits cleanly on SIGTERM");
    let _ = load.kill();
    let _ = load.wait();
    seen.extend(rx.try_iter());
    // The scan's pile-ups (a trigger whose condition cleared before its
    // hold, threads_running's, may record the same episode beside one).
    let stalls: Vec<&serde_json::Value> =
        seen.iter().filter(|v| v["event"] == "stall" && v["what"].is_null()).collect();
    assert_eq!(stalls.len(), 3, "one pile-up per lock: {stalls:?}");
    for (s, (from, to)) in stalls.iter().zip(&held) {
        let (b, e) = (s["began_unix"].as_f64().unwrap(), s["ended_unix"].as_f64().unwrap());
        // Timed to the 100 ms scan: inside the lock, give or take a scan
        // and the time writers take to queue.
        assert!(b >= from - 0.05 && b <= from + 0.35, "began {:.2} s after the lock", b - from);
        assert!(e >= to - 0.05 && e <= to + 0.35, "ended {:.2} s after the unlock", e - to);
    }
    let cap = captured(cap, &seen);
    let trigger = cap["trigger"].as_str().unwrap();
    assert!(trigger.starts_with("short stalls: 3 in 10 min"), "{trigger}");
    assert!(cap["onset_to_first_stack_ms"].as_f64().unwrap() < 1000.0, "{cap}");
    let captures: Vec<&serde_json::Value> = seen.iter().filter(|v| v["event"] == "captured").collect();
    assert_eq!(captures.len(), 1, "the first two short stalls leave no capture");
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(report.lines().any(|l| l.starts_with("stall began: ")), "{report}");
    // The third stall had ended when it was captured: its end is in the
    // text report as well as the HTML one.
    let ended = report.lines().find(|l| l.starts_with("stall ended: ")).unwrap_or_else(|| panic!("{report}"));
    let secs: f64 = ended.split(", ").nth(1).and_then(|s| s.split(' ').next()?.parse().ok()).unwrap();
    assert!((0.1..=0.9).contains(&secs), "a 400 ms stall: {ended}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains(" and ended at "), "the HTML report says when the stall ended");
}

#[test]
fn ddl_behind_an_open_transaction_names_the_transaction() {
    // The classic metadata-lock pile-up on a default server: a transaction
    // read a table and sits idle; ALTER TABLE waits for it, and every query
    // on the table queues behind the ALTER.
    let sb = sandbox();
    let mut load = queueing_load(&sb, "oltp_point_select", "1");
    let data = tempfile_dir("watch-mdl");
    let (mut child, rx) = watch(&sb, &data, &["--interval", "1s"]);
    let mut trx = sb.connect().unwrap();
    let trx_id: u64 = trx.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    trx.query_drop("BEGIN").unwrap();
    trx.query_drop("SELECT * FROM sbtest.sbtest1 WHERE id = 1").unwrap();
    let mut other = sb.connect().unwrap();
    other.query_drop("SELECT 1").unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let mut seen: Vec<serde_json::Value> = rx.try_iter().collect();
    assert!(seen.iter().all(|v| v["event"] == "poll"), "steady load must not trigger");
    let mut ddl = sb.connect().unwrap();
    let ddl_id: u64 = ddl.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    ddl.query_drop("SET SESSION lock_wait_timeout = 30").unwrap();
    let onset = now_unix();
    let alter = std::thread::spawn(move || ddl.query_drop("ALTER TABLE sbtest.sbtest1 ADD COLUMN x INT"));
    let cap = wait_for(&rx, "captured", Duration::from_secs(15), &mut seen);
    trx.query_drop("ROLLBACK").unwrap();
    alter.join().unwrap().unwrap();
    let cap = captured(cap, &seen);
    let verdict = cap["verdict"].as_str().unwrap();
    eprintln!("verdict: {verdict}");
    assert!(
        verdict.starts_with("metadata lock: ")
            && verdict.contains(&format!("queued behind connection {ddl_id} (`ALTER TABLE sbtest.sbtest1"))
            && verdict.contains(&format!("which likely waits for connection {trx_id} "))
            && verdict.contains("its transaction has been open")
            && verdict.contains("last ran `SELECT * FROM sbtest.sbtest1 WHERE id = 1` (read from its memory)"),
        "verdict: {verdict}"
    );
    // Polls at the default interval: the scan sees the readers queue.
    let after = first_stack(&cap) - onset;
    assert!(after <= 1.0, "first stack {after:.2} s after the ALTER began");
    end(&mut [&mut child, &mut load]);
    drop(other);
}

/// Run `pileup watch --json` for a while (no process: the pid changes on restart).
fn watch_for(sock: &str, data: &std::path::Path, secs: &str) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args([
            "watch",
            "-S",
            sock,
            "-u",
            "root",
            "--pid",
            "none",
            "--data-dir",
            data.to_str().unwrap(),
            "--interval",
            "200ms",
            "--duration",
            secs,
            "--json",
        ])
        .args(["--trigger", "threads_running > 1000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let events: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    // The first line says what is watched; the rest is what happened.
    assert_eq!(events.first().map(|e| e["event"].clone()), Some(serde_json::json!("started")), "{events:?}");
    events.into_iter().skip(1).collect()
}

#[test]
fn history_survives_a_server_restart_and_a_watch_restart() {
    let mut sb = sandbox();
    let data = tempfile_dir("watch-restart");
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    // Watch across a server restart: polls fail while it is down, then resume.
    let handle = {
        let (sock, data) = (sock.clone(), data.to_path_buf());
        std::thread::spawn(move || watch_for(&sock, &data, "8s"))
    };
    std::thread::sleep(Duration::from_secs(2));
    // Down for a second: several 200 ms polls fail whatever the timing.
    sb.restart_after(Duration::from_secs(1)).unwrap();
    let events = handle.join().unwrap();
    let polls: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] == "poll").collect();
    assert!(polls.len() >= 30, "{} polls", polls.len());
    let first_failed = polls.iter().position(|p| p["ok"] == false).expect("polls fail while the server is down");
    let last_ok = polls.iter().rposition(|p| p["ok"] == true).unwrap();
    assert!(last_ok > first_failed, "polls resume after the restart");
    let store = pileup_watch::store::Store::open(&data).unwrap();
    let before = store.count().unwrap() as usize;
    assert_eq!(before, polls.len(), "every poll is stored, failed ones included");
    drop(store);
    // A second watcher on the same data dir keeps the history and adds to it.
    let more = watch_for(&sock, &data, "2s").iter().filter(|e| e["event"] == "poll").count();
    let store = pileup_watch::store::Store::open(&data).unwrap();
    assert_eq!(store.count().unwrap() as usize, before + more);
    sb.sql("DO 1").unwrap();
}

#[test]
fn two_servers_on_one_host_are_never_mixed_up() {
    let a = sandbox();
    let b = sandbox();
    let data = tempfile_dir("watch-two");
    let watch_b = |data: &std::path::Path, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pileup"))
            .args([
                "watch",
                "-u",
                "root",
                "--data-dir",
                data.to_str().unwrap(),
                "--interval",
                "200ms",
                "--duration",
                "1s",
                "--trigger",
                "threads_running > 1000",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    // --pid auto follows the endpoint: B's socket, then B's TCP port, is B's process.
    let out = watch_b(&data, &["-S", b.endpoint.socket.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && e.contains(&format!(", pid {},", b.pid())), "{e}");
    let other = tempfile_dir("watch-two-tcp");
    let out = watch_b(&other, &["-h", "127.0.0.1", "-P", &b.endpoint.port.to_string()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && e.contains(&format!(", pid {},", b.pid())), "{e}");
    // A store holds one server's history: pointing A's watcher at it is refused.
    let out = watch_b(&data, &["-S", a.endpoint.socket.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && e.contains("holds the history of")
            && e.contains("its own data directory (--data-dir)"),
        "{e}"
    );
    assert_eq!(e.lines().filter(|l| l.starts_with("pileup:")).count(), 1, "{e}");
    // A typo in a trigger is refused before anything runs.
    let out = pileup(&["watch", "--trigger", "data_pending_reads > 8", "--data-dir", data.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("did you mean innodb_data_pending_reads?"), "{e}");
}

#[test]
fn capture_starts_when_the_condition_starts_and_a_blip_leaves_nothing() {
    let sb = sandbox();
    let data = tempfile_dir("watch-early");
    let (mut child, rx) = watch(&sb, &data, &["--trigger", "threads_connected > 30 for 2s", "--cooldown", "1s"]);
    std::thread::sleep(Duration::from_secs(2));
    // A blip: over the threshold for well under the hold.
    let conns: Vec<_> = (0..35).map(|_| sb.connect().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(600));
    drop(conns);
    std::thread::sleep(Duration::from_secs(4));
    let seen: Vec<serde_json::Value> = rx.try_iter().collect();
    assert!(
        seen.iter().any(|v| v["derived"]["threads_connected"].as_f64().unwrap_or(0.0) > 30.0),
        "the blip was polled"
    );
    // A blip shorter than the hold captures nothing; it is a short stall
    // in the history.
    let told: Vec<_> = seen.iter().filter(|v| v["event"] != "poll").collect();
    assert!(
        !told.is_empty() && told.iter().all(|v| v["event"] == "stall" && v["what"] == "threads_connected > 30 for 2s"),
        "{told:?}"
    );
    let dirs = std::fs::read_dir(data.join("captures")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(dirs, 0, "the early capture of a blip is dropped, not written");
    let out = pileup(&["captures", "--data-dir", data.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        listed["captures"].as_array().unwrap().iter().any(|e| e["kind"] == "short_stall"
            && e["what"] == "threads_connected > 30 for 2s"
            && e["ms"].as_f64().unwrap() <= 1000.0),
        "{listed}"
    );
    // A real one, well past the gap between early captures
    // (schedule::EARLY_GAP): the first stacks are taken as the condition starts,
    // before the hold confirms it.
    std::thread::sleep(Duration::from_secs(6));
    let conns: Vec<_> = (0..35).map(|_| sb.connect().unwrap()).collect();
    let mut seen = vec![];
    let fired = wait_for(&rx, "fired", Duration::from_secs(10), &mut seen).expect("fired");
    let cap = wait_for(&rx, "captured", Duration::from_secs(15), &mut seen).expect("captured");
    assert_eq!(cap["trigger"], "threads_connected > 30 for 2s");
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let stacks: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("stacks.json")).unwrap()).unwrap();
    let first_stack = stacks["samples"][0]["at_unix_ms"].as_f64().unwrap() / 1000.0;
    let fired_at = fired["unix"].as_f64().unwrap();
    let onset = fired["onset_unix"].as_f64().unwrap();
    assert!(
        first_stack < fired_at - 1.0,
        "first stack {first_stack:.2} should precede the confirmation at {fired_at:.2} by most of the hold"
    );
    assert!(first_stack - onset < 0.5, "first stack {:.2} s after the condition was first seen", first_stack - onset);
    drop(conns);
    end(&mut [&mut child]);
}

#[test]
fn an_early_capture_that_has_gathered_is_taken_again_when_another_condition_begins() {
    let sb = sandbox();
    sb.sql("CREATE DATABASE w; CREATE TABLE w.hot (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; INSERT INTO w.hot VALUES (1, 0)").unwrap();
    let data = tempfile_dir("watch-retake");
    // The first condition holds from the first poll and its hold outlasts
    // the test: its early capture gathers at once, then waits.
    let idle: Vec<_> = (0..6).map(|_| sb.connect().unwrap()).collect();
    let (mut child, rx) = watch(
        &sb,
        &data,
        &["--trigger", "threads_connected > 5 for 120s", "--trigger", "innodb_row_lock_current_waits > 5 for 1s"],
    );
    std::thread::sleep(Duration::from_secs(4));
    let seen: Vec<serde_json::Value> = rx.try_iter().collect();
    assert!(seen.iter().all(|v| v["event"] == "poll"), "nothing fires yet");
    // The second condition begins well after that evidence was taken.
    let Convoy { mut holder, holder_id, onset, waiters } = convoy(&sb, 10);
    let mut seen = vec![];
    let cap = captured(wait_for(&rx, "captured", Duration::from_secs(15), &mut seen), &seen);
    assert_eq!(cap["trigger"], "innodb_row_lock_current_waits > 5 for 1s");
    let verdict = cap["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("row lock convoy") && verdict.contains(&format!("connection {holder_id} ")),
        "the evidence is the convoy's, not what came before it: {verdict}"
    );
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let stacks: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("stacks.json")).unwrap()).unwrap();
    let first_stack = stacks["samples"][0]["at_unix_ms"].as_f64().unwrap() / 1000.0;
    assert!(
        first_stack > onset && first_stack - onset < 2.0,
        "first stack {:.2} s after the convoy began",
        first_stack - onset
    );
    holder.query_drop("ROLLBACK").unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    drop(idle);
    end(&mut [&mut child]);
}

/// Run `work` on `threads` threads until `stop` is set; each thread keeps
/// its own connection slot (filled by `work` if it wants one).
fn clients(
    threads: usize,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    work: impl Fn(&mut Option<mysql::Conn>, usize, u64) + Send + Sync + 'static,
) -> Vec<std::thread::JoinHandle<()>> {
    let work = std::sync::Arc::new(work);
    (0..threads)
        .map(|i| {
            let (stop, work) = (stop.clone(), work.clone());
            std::thread::spawn(move || {
                let (mut conn, mut n) = (None, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    work(&mut conn, i, n);
                    n += 1;
                }
            })
        })
        .collect()
}

/// The datadir's device as the verdicts see it: a test that throttles it
/// (its I/O queues in the kernel, so the whole device shows busy) or loads
/// it with a burst of writes, and a test whose verdict or timing reads the
/// device's load, must not run at once.
static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn device() -> std::sync::MutexGuard<'static, ()> {
    DEVICE.lock().unwrap_or_else(|e| e.into_inner())
}

/// When each of a capture's stacks was taken, in order, Unix seconds.
fn stack_times(cap: &serde_json::Value) -> Vec<f64> {
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let stacks: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("stacks.json")).unwrap()).unwrap();
    stacks["samples"].as_array().unwrap().iter().map(|s| s["at_unix_ms"].as_f64().unwrap() / 1000.0).collect()
}

/// The first stack a capture took, Unix seconds.
fn first_stack(cap: &serde_json::Value) -> f64 {
    stack_times(cap)[0]
}

/// Watch `sb` as a new user would (1 s polls, the default triggers) under
/// a steady load of two clients running `steady`, which must capture
/// nothing while the watcher learns its baselines (20 s); then a storm of
/// 24 clients doing `storm`: the capture's verdict, and how long after the
/// storm began its first stack was taken.
fn storm_verdict(
    sb: &pileup_sandbox::Sandbox,
    name: &str,
    steady: &'static str,
    storm: impl Fn(&pileup_conn::ConnSpec, &mut Option<mysql::Conn>, usize, u64) + Send + Sync + 'static,
) -> (String, f64) {
    let _device = device();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spec = sb.conn_spec();
    let mut threads = clients(2, &stop, move |c, _, _| {
        let _ = c.get_or_insert_with(|| spec.connect().unwrap()).query_drop(steady);
    });
    let data = tempfile_dir(name);
    let (mut child, rx) = watch(sb, &data, &["--interval", "1s"]);
    std::thread::sleep(Duration::from_secs(20));
    let mut seen: Vec<serde_json::Value> = rx.try_iter().collect();
    let steady_events: Vec<_> = seen.iter().filter(|v| v["event"] != "poll").cloned().collect();
    let storm_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spec = sb.conn_spec();
    let onset = now_unix();
    threads.extend(clients(24, &storm_stop, move |c, i, n| storm(&spec, c, i, n)));
    let cap = wait_for(&rx, "captured", Duration::from_secs(20), &mut seen);
    storm_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    end(&mut [&mut child]);
    assert!(steady_events.is_empty(), "the steady load set something off: {steady_events:?}");
    let cap = captured(cap, &seen);
    let after = first_stack(&cap) - onset;
    eprintln!("first stack {after:.2} s after the storm began; trigger {}", cap["trigger"]);
    (verdict_and_classes(&cap).0, after)
}

#[test]
fn a_table_open_storm_is_caught_within_a_second_and_named_with_its_counters_and_the_cache_size() {
    // 300 tables, a table cache of 10: every query opens its table.
    let sb = sandbox_with(vec![("table_open_cache", "10"), ("table_open_cache_instances", "1")]);
    let mut ddl = String::from("CREATE DATABASE t;");
    for i in 0..300 {
        ddl += &format!("CREATE TABLE t.t{i} (id INT PRIMARY KEY, v INT) ENGINE=InnoDB;");
    }
    // 300 tables' files written at once load the disk a test that reads the
    // device's load is timing (a flushing storm's checkpoint age): not meanwhile.
    {
        let _device = device();
        sb.sql(&ddl).unwrap();
    }
    // The steady load reads one table, which stays cached.
    let (verdict, after) = storm_verdict(&sb, "watch-tables", "SELECT * FROM t.t0", |spec, c, i, n| {
        let table = (i as u64 * 7919 + n * 104_729) % 300;
        let _ = c.get_or_insert_with(|| spec.connect().unwrap()).query_drop(format!("SELECT * FROM t.t{table}"));
    });
    assert!(verdict.starts_with("table-open storm: "), "verdict: {verdict}");
    assert!(verdict.contains("tables opened/s") && verdict.contains("table_open_cache=10"), "verdict: {verdict}");
    assert!(after <= 1.0, "first stack {after:.2} s after the storm began");
}

#[test]
fn a_connection_storm_is_caught_within_a_second_and_named_with_its_rates() {
    // A default server. The storm's clients connect, ask one thing and
    // disconnect.
    let sb = sandbox();
    let (verdict, after) = storm_verdict(&sb, "watch-connect", "SELECT 1", |spec, _, _, _| {
        if let Ok(mut c) = spec.connect() {
            let _ = c.query_drop("SELECT 1");
        }
    });
    assert!(verdict.starts_with("connection storm: "), "verdict: {verdict}");
    assert!(verdict.contains("connections/s"), "verdict: {verdict}");
    assert!(after <= 1.0, "first stack {after:.2} s after the storm began");
}

/// `sysbench test run` on `sb` with `threads` connections, watched as a
/// new user would (1 s polls, the default triggers): 12 s unthrottled,
/// which must not be captured, then the datadir's device throttled to
/// `limit`: the capture's verdict, the stall classes it found (class,
/// evidence), and how long after the throttle its first stack was taken.
fn throttled_verdict(
    sb: &pileup_sandbox::Sandbox,
    test: &str,
    base: &[String],
    threads: u32,
    limit: Limit,
) -> (String, Vec<(String, String)>, f64, Scratch) {
    let _device = device();
    let mut load = sysbench_start(test, base, threads, 60);
    let data = tempfile_dir("watch-throttled");
    let (mut child, rx) = watch(sb, &data, &["--interval", "1s"]);
    std::thread::sleep(Duration::from_secs(12));
    let mut seen: Vec<serde_json::Value> = rx.try_iter().collect();
    let unthrottled = seen.iter().filter(|v| v["event"] == "captured").count();
    let onset = now_unix();
    let throttle = Throttle::new(sb, limit).expect("throttling the datadir's device");
    let cap = wait_for(&rx, "captured", Duration::from_secs(20), &mut seen);
    drop(throttle);
    end(&mut [&mut child, &mut load]);
    assert_eq!(
        unthrottled,
        0,
        "the unthrottled load was captured: {:?}",
        seen.iter().filter(|v| v["event"] == "captured").collect::<Vec<_>>()
    );
    let pressure: Vec<String> = seen
        .iter()
        .filter_map(|v| {
            v["derived"]["io_pressure_pct"]
                .as_f64()
                .map(|p| format!("{:.1}:{p:.0}%", v["unix"].as_f64().unwrap_or(0.0)))
        })
        .collect();
    eprintln!("I/O pressure by poll: {}", pressure.join(" "));
    let cap = captured(cap, &seen);
    eprintln!("during the capture: {}", evidence(&cap)["io_pressure_pct"]);
    let after = first_stack(&cap) - onset;
    eprintln!("first stack {after:.2} s after the throttle; trigger {}", cap["trigger"]);
    let (verdict, classes) = verdict_and_classes(&cap);
    // The watcher's directory goes with the caller's scope: a failing
    // test's capture is kept with PILEUP_TEST_KEEP.
    (verdict, classes, after, data)
}

/// A capture's `evidence.json`.
fn evidence(cap: &serde_json::Value) -> serde_json::Value {
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    serde_json::from_slice(&std::fs::read(dir.join("evidence.json")).unwrap()).unwrap()
}

/// Stop child processes (the watcher, sysbench) and reap them.
fn end(children: &mut [&mut Child]) {
    for c in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A capture's verdict and the stall classes it found (class, evidence).
fn verdict_and_classes(cap: &serde_json::Value) -> (String, Vec<(String, String)>) {
    let verdict = cap["verdict"].as_str().unwrap().to_string();
    eprintln!("verdict: {verdict}");
    let ev = evidence(cap);
    let classes = ev["stall_classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["class"].as_str().unwrap().to_string(), f["evidence"].as_str().unwrap().to_string()))
        .collect();
    (verdict, classes)
}

#[test]
fn a_slow_disk_is_caught_within_a_second_and_named_with_the_threads_waiting_for_it() {
    // A buffer pool far smaller than the data: point selects read from
    // disk, and the volume slows to 40 reads a second.
    let sb = sandbox_with(vec![("innodb_buffer_pool_size", "8M")]);
    let base = sysbench_prepare(&sb, "oltp_point_select", 4, 40000);
    let (verdict, _, after, _data) = throttled_verdict(&sb, "oltp_point_select", &base, 24, Limit::ReadIops(40));
    assert!(verdict.starts_with("slow or saturated disk: "), "verdict: {verdict}");
    assert!(after <= 1.0, "first stack {after:.2} s after the volume slowed");
    assert!(
        verdict.contains("InnoDB I/O requests pending") && verdict.contains("waiting for the disk (pread64 on sbtest/"),
        "verdict: {verdict}"
    );
}

#[test]
fn a_volume_slow_for_writes_is_named_by_the_time_tasks_stall_on_it() {
    // 30 clients inserting 4,000 rows a second, and writes slowed to 1 MB/s
    // below the device: the page and log writes queue in the throttle, the
    // device's counters and InnoDB's pending counts stay at 0, and the
    // clients wait on InnoDB's latches behind writes in flight. The kernel's
    // stall time for the server's cgroup shows it.
    assert!(
        std::path::Path::new("/proc/pressure/io").exists(),
        "this test needs the kernel's pressure stall information (a kernel with CONFIG_PSI, not booted with psi=0)"
    );
    let sb = sandbox();
    let mut base = sysbench_prepare(&sb, "oltp_insert", 1, 1000);
    base.push("--rate=4000".into());
    let (verdict, classes, _, _data) =
        throttled_verdict(&sb, "oltp_insert", &base, 30, Limit::WriteBytesPerSec(1 << 20));
    // The redo log's syncs, slowed with everything else, may come first.
    assert!(verdict.contains("slow or saturated disk"), "verdict: {verdict}");
    let disk = classes.iter().find(|(c, _)| c == "slow_disk").map(|(_, e)| e.as_str()).unwrap_or_default();
    assert!(disk.contains("tasks stalled on I/O ") && disk.contains("waiting for the disk"), "{classes:?}");
}

#[test]
fn redo_log_writes_that_hold_up_commits_are_named() {
    // A 2 MiB log buffer under 16 inserting clients, and writes slowed to
    // 8 MB/s: the log buffer fills and a client's thread writes and syncs
    // the redo log while the others wait. The redo log is large enough that
    // the checkpoint age stays low, and the buffer pool and a page cleaner
    // that flushes only past innodb_max_dirty_pages_pct keep the data
    // pages' writes (through asynchronous I/O, seen on no thread) off the
    // device: the inserts wait for the log alone.
    let sb = sandbox_with(vec![
        ("innodb_log_buffer_size", "2M"),
        ("innodb_log_file_size", "1G"),
        ("innodb_buffer_pool_size", "1G"),
        ("innodb_adaptive_flushing", "OFF"),
    ]);
    let base = sysbench_prepare(&sb, "oltp_insert", 1, 1000);
    let (verdict, _, _, _data) = throttled_verdict(&sb, "oltp_insert", &base, 16, Limit::WriteBytesPerSec(8 << 20));
    assert!(verdict.starts_with("redo log writes: "), "verdict: {verdict}");
    assert!(
        verdict.contains("on ib_logfile0") && verdict.contains("innodb_log_buffer_size=2 MiB"),
        "verdict: {verdict}"
    );
}

/// The checkpoint age as a share of its maximum, read by the test itself
/// every 50 ms on its own connection: when the server itself says the
/// storm began, independent of the watcher's polls.
struct CheckpointGauge {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// (Unix seconds, checkpoint age %).
    readings: std::sync::Arc<std::sync::Mutex<Vec<(f64, f64)>>>,
    /// Why it stopped reading before it was told to.
    failed: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CheckpointGauge {
    fn start(sb: &pileup_sandbox::Sandbox) -> CheckpointGauge {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readings = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let failed = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (st, rd, fl, spec) = (stop.clone(), readings.clone(), failed.clone(), sb.conn_spec());
        let thread = std::thread::spawn(move || {
            let mut c = spec.connect().unwrap();
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let t = now_unix();
                let rows = match c.query::<(String, f64), _>("SHOW GLOBAL STATUS LIKE 'Innodb_checkpoint%age'") {
                    Ok(rows) => rows,
                    Err(e) => {
                        *fl.lock().unwrap() = Some(e.to_string());
                        break;
                    }
                };
                let get = |n: &str| rows.iter().find(|r| r.0.eq_ignore_ascii_case(n)).map(|r| r.1);
                if let (Some(age), Some(max)) = (get("Innodb_checkpoint_age"), get("Innodb_checkpoint_max_age")) {
                    rd.lock().unwrap().push((t, 100.0 * age / max.max(1.0)));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        CheckpointGauge { stop, readings, failed, thread: Some(thread) }
    }

    /// When the age first reached `pct` after `from`.
    fn reached(&self, from: f64, pct: f64) -> Option<f64> {
        self.readings.lock().unwrap().iter().find(|r| r.0 >= from && r.1 >= pct).map(|r| r.0)
    }

    fn peak(&self, from: f64, until: f64) -> f64 {
        self.readings.lock().unwrap().iter().filter(|r| r.0 >= from && r.0 < until).map(|r| r.1).fold(0.0, f64::max)
    }
}

impl Drop for CheckpointGauge {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_flushing_storm_is_caught_within_a_second_of_its_onset_and_named_with_the_checkpoint_age() {
    let _device = device();
    // A redo log far too small for the write load, and a page cleaner told
    // the disk is slow: the checkpoint age runs into the log's capacity and
    // writers wait for pages to be flushed.
    let sb = sandbox_with(vec![
        ("innodb_log_file_size", "4M"),
        ("innodb_io_capacity", "100"),
        ("innodb_io_capacity_max", "100"),
        ("innodb_flush_log_at_trx_commit", "2"),
    ]);
    let base = sysbench_prepare(&sb, "oltp_write_only", 4, 20000);
    // The load's table writes leave the age high: flushed at full speed
    // until it falls, then the slow page cleaner again.
    sb.sql("SET GLOBAL innodb_io_capacity_max = 20000, innodb_io_capacity = 10000, innodb_max_dirty_pages_pct = 0")
        .unwrap();
    let gauge = CheckpointGauge::start(&sb);
    let t0 = Instant::now();
    while gauge.readings.lock().unwrap().last().is_none_or(|r| r.1 > 5.0) {
        assert!(t0.elapsed() < Duration::from_secs(60), "the checkpoint age never fell after the prepare");
        std::thread::sleep(Duration::from_millis(200));
    }
    sb.sql("SET GLOBAL innodb_max_dirty_pages_pct = DEFAULT, innodb_io_capacity = 100, innodb_io_capacity_max = 100")
        .unwrap();
    let data = tempfile_dir("watch-flush");
    // Polls at the default interval, learning the idle server first (10
    // values older than 5 s: 15 s at least).
    let watched = now_unix();
    let (mut child, rx) = watch(&sb, &data, &["--interval", "1s"]);
    std::thread::sleep(Duration::from_secs(20));
    let provoked = now_unix();
    let mut load = sysbench_start("oltp_write_only", &base, 32, 60);
    let mut seen = vec![];
    let cap = wait_for(&rx, "captured", Duration::from_secs(40), &mut seen);
    // The load goes on until the age reaches its maximum (a capture begun
    // as the load built up may come first).
    let t0 = Instant::now();
    while gauge.reached(provoked, 100.0).is_none() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    end(&mut [&mut child, &mut load]);
    seen.extend(rx.try_iter());
    let cap = captured(cap, &seen);
    let (verdict, classes) = verdict_and_classes(&cap);
    // The writers' few row-lock waits behind young transactions follow it.
    assert!(verdict.starts_with("flushing storm: checkpoint age at "), "verdict: {verdict}");
    let e = classes.iter().find(|(c, _)| c == "flush_storm").map(|(_, e)| e.as_str());
    let e = e.unwrap_or_else(|| panic!("{classes:?}"));
    assert!(e.starts_with("checkpoint age at ") && e.contains("innodb_log_file_size=4 MiB"), "{e}");
    // The storm's onset: InnoDB flushes at full speed once the checkpoint
    // age passes 7/8 of its maximum, and makes writers wait at the
    // maximum. The first stack within a second of the age first passing
    // 7/8 (or before: the write load's own pile-up is caught as it begins).
    let peak = gauge.peak(watched, provoked);
    assert!(peak < 50.0, "the checkpoint age was already {peak:.0}% before the load");
    let at = |pct: f64| gauge.reached(provoked, pct).map(|t| t - provoked);
    let onset = gauge.reached(provoked, 87.5).unwrap_or_else(|| {
        panic!("the checkpoint age never passed 7/8 of its maximum (gauge: {:?})", gauge.failed.lock().unwrap())
    });
    let first = first_stack(&cap);
    // Its stacks span the onset: some taken after the storm began.
    let last = stack_times(&cap).into_iter().fold(0.0, f64::max);
    assert!(last >= onset, "the capture's stacks ended {:.2} s before the storm began", onset - last);
    eprintln!(
        "after the load began: age 87.5% at {:.2} s, 95% at {:?} s, 100% at {:?} s; first stack at {:.2} s",
        onset - provoked,
        at(95.0),
        at(100.0),
        first - provoked
    );
    let polled: Vec<String> = seen
        .iter()
        .filter(|v| v["event"] == "poll")
        .filter_map(|v| Some((v["unix"].as_f64()? - provoked, v["derived"]["checkpoint_age_pct"].as_f64()?)))
        .filter(|(t, _)| (-1.0..4.0).contains(t))
        .map(|(t, a)| format!("{t:.2}:{a:.0}"))
        .collect();
    let gauged: Vec<String> = gauge
        .readings
        .lock()
        .unwrap()
        .iter()
        .filter(|r| (0.0..3.0).contains(&(r.0 - provoked)))
        .map(|r| format!("{:.2}:{:.0}", r.0 - provoked, r.1))
        .collect();
    eprintln!("polled: {}\ngauged: {}", polled.join(" "), gauged.join(" "));
    assert!(first - onset <= 1.0, "first stack {:.2} s after the storm began", first - onset);
}

#[test]
fn a_data_file_extension_is_named_with_its_file() {
    // The system tablespace grows by innodb_autoextend_increment (8 MB
    // here) at a time; without fallocate InnoDB writes those megabytes of
    // zeros while every other insert waits, here at 4 MB/s. The redo log is
    // written in the background (innodb_flush_log_at_trx_commit=0, a redo
    // log of 1 GB), pages are written once (no doublewrite) and the load is
    // held at 4,000 inserts a second, so writers wait for nothing else on
    // the slow device.
    let fs = LoopFs::no_fallocate(2);
    let sb = pileup_sandbox::Sandbox::start(pileup_sandbox::Options {
        base_dir: Some(fs.mount.clone()),
        cnf: [
            ("innodb_file_per_table", "OFF"),
            ("innodb_autoextend_increment", "8"),
            ("innodb_flush_log_at_trx_commit", "0"),
            ("innodb_log_file_size", "1G"),
            ("innodb_doublewrite", "0"),
            ("innodb_buffer_pool_size", "512M"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..Default::default()
    })
    .expect("starting a sandbox");
    let mut base = sysbench_prepare(&sb, "oltp_insert", 1, 1000);
    base.push("--rate=4000".into());
    let _device = device();
    let throttle = Throttle::new(&sb, Limit::WriteBytesPerSec(4 << 20)).expect("throttling the datadir's device");
    let data = tempfile_dir("watch-extend");
    // Captures a few seconds apart: the slow device also holds up the redo
    // log's writes at times, a stall of its own (named a slow disk); the
    // extension is named when a capture meets it.
    let (mut child, rx) = watch(&sb, &data, &["--cooldown", "3s"]);
    std::thread::sleep(Duration::from_secs(2));
    let mut load = sysbench_start("oltp_insert", &base, 16, 60);
    let mut seen = vec![];
    let t0 = Instant::now();
    let mut cap = None;
    while cap.is_none() && t0.elapsed() < Duration::from_secs(50) {
        cap = wait_for(&rx, "captured", Duration::from_secs(50).saturating_sub(t0.elapsed()), &mut seen)
            .filter(|c| c["verdict"].as_str().is_some_and(|v| v.starts_with("data file extension: ")));
    }
    end(&mut [&mut child, &mut load]);
    drop(throttle);
    let cap = captured(cap, &seen);
    let verdict = cap["verdict"].as_str().unwrap();
    eprintln!("verdict: {verdict} (first stack {} ms after onset)", cap["onset_to_first_stack_ms"]);
    assert!(verdict.starts_with("data file extension: "), "verdict: {verdict}");
    assert!(
        verdict.contains("on ibdata1")
            && verdict.contains("writing zeros")
            && verdict.contains("innodb_autoextend_increment=8 MB"),
        "verdict: {verdict}"
    );
    // Threads waiting for the throttled disk (state D) are read where they
    // block, without a stop. The state is read just before the capture: a
    // thread whose write completed in between is running at the capture,
    // and is stopped as any running thread is.
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let stacks: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("stacks.json")).unwrap()).unwrap();
    let in_d: Vec<&serde_json::Value> = stacks["samples"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["threads"].as_array().unwrap())
        .filter(|t| t["state"] == "D")
        .collect();
    assert!(!in_d.is_empty(), "no thread in disk wait in the capture");
    assert!(in_d.iter().all(|t| !t["frames"].as_array().unwrap().is_empty()), "{in_d:?}");
    let unstopped = in_d.iter().filter(|t| t["stopped_us"] == 0).count();
    assert!(2 * unstopped > in_d.len(), "most threads in disk wait are read without a stop: {in_d:?}");
    drop(sb);
    drop(fs);
}

#[test]
fn a_steady_load_captured_on_purpose_shows_no_stall_class() {
    let _device = device();
    // Reads and writes at a steady rate on a default server, captured by a
    // trigger that holds from the start: no class may be found in it. The
    // rate is one the sandbox carries on any machine: unthrottled, 8
    // writers on a slow disk fill the 64 MiB redo log faster than pages
    // are flushed, a true flushing storm (CI saw the checkpoint age at 100%).
    let sb = sandbox();
    let mut base = sysbench_prepare(&sb, "oltp_read_write", 4, 10000);
    base.push("--rate=100".into());
    let mut load = sysbench_start("oltp_read_write", &base, 8, 60);
    connected(&sb, 9);
    let data = tempfile_dir("watch-steady");
    let (mut child, rx) = watch(&sb, &data, &["--trigger", "questions_rate > 1 for 15s"]);
    let mut seen = vec![];
    let cap = wait_for(&rx, "captured", Duration::from_secs(40), &mut seen);
    end(&mut [&mut child, &mut load]);
    let cap = captured(cap, &seen);
    assert_eq!(cap["trigger"], "questions_rate > 1 for 15s", "{cap}");
    let ev = evidence(&cap);
    assert_eq!(ev["stall_classes"], serde_json::json!([]), "verdict: {}", cap["verdict"]);
    let verdict = cap["verdict"].as_str().unwrap();
    // The classes' names as the verdict words them ("disk wait" in the
    // line on where the threads' time went is not a class).
    for class in [
        "table-open storm",
        "connection storm",
        "DROP or TRUNCATE",
        "data file extension",
        "statistics recalculation",
        "flushing storm",
        "redo log writes",
        "slow or saturated disk",
        "stall classes seen",
    ] {
        assert!(!verdict.contains(class), "verdict: {verdict}");
    }
}

#[test]
fn memory_growth_is_captured_with_the_statement_and_stack_that_grew_the_server() {
    let sb = sandbox();
    let data = tempfile_dir("watch-memory");
    let mut c = sb.connect().unwrap();
    c.query_drop("SET SESSION max_heap_table_size = 1024 * 1024 * 1024").unwrap();
    c.query_drop("CREATE DATABASE grow").unwrap();
    c.query_drop("USE grow").unwrap();
    let id: u64 = c.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    let (mut w, rx) = watch(&sb, &data, &["--trigger", "mysqld_rss_growth_rate > 10000000 for 1s"]);
    let mut seen = vec![];
    wait_for(&rx, "poll", Duration::from_secs(20), &mut seen).expect("the watcher polls");
    std::thread::sleep(Duration::from_secs(2));
    // The server grows for about ten seconds: a MEMORY table more every
    // few hundred milliseconds, each of ~25 MiB.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let grower = std::thread::spawn(move || {
        for i in 0..40 {
            if stop2.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            c.query_drop(format!(
                "CREATE TABLE g{i} ENGINE=MEMORY SELECT seq, REPEAT('x', 200) AS pad FROM seq_1_to_100000"
            ))
            .unwrap();
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let cap = wait_for(&rx, "captured", Duration::from_secs(40), &mut seen);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    grower.join().unwrap();
    end(&mut [&mut w]);
    let cap = captured(cap, &seen);
    let (verdict, _) = verdict_and_classes(&cap);
    assert!(verdict.starts_with("memory growth: "), "{verdict}");
    assert!(verdict.to_lowercase().contains("create table g"), "{verdict}");
    assert!(verdict.contains(&format!("(connection {id})")), "{verdict}");
    // The capture carries the growth profile: by statement and stack, a
    // flame graph by bytes and pprof's heap profile.
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let g: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("memory.json")).unwrap()).unwrap();
    assert!(g["growth"]["by_statement"][0]["connections"].as_array().unwrap().iter().any(|c| c.as_u64() == Some(id)));
    assert!(!g["growth"]["by_stack"].as_array().unwrap().is_empty(), "{g:#}");
    assert!(std::fs::read_to_string(dir.join("memory.svg")).unwrap().contains("<svg"));
    assert!(dir.join("memory.pb.gz").exists());
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(report.contains("memory growth traced for"), "{report}");
    // What the resident heap did while traced: an identity from walks of
    // the mappings, grown with the tables.
    let h = &g["heap"];
    let n = |k: &str| h[k].as_u64().unwrap_or_else(|| panic!("{k}: {h}"));
    assert_eq!(n("start") + n("grown") - n("given_back"), n("end"), "{h}");
    assert!(n("peak") >= n("start").max(n("end")) && n("grown") > 20 << 20, "{h}");
    assert!(report.contains(" given back = "), "{report}");
}

#[test]
fn a_trigger_on_a_metric_this_server_cannot_have_is_refused() {
    let sb = sandbox();
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let mut c = sb.connect().unwrap();
    let has: Option<(String, String)> = c.query_first("SHOW GLOBAL STATUS LIKE 'Innodb_rows_read'").unwrap();
    let data = tempfile_dir("watch-unavailable");
    let out = pileup(&[
        "watch",
        "-S",
        &sock,
        "-u",
        "root",
        "--pid",
        "none",
        "--duration",
        "1s",
        "--data-dir",
        data.to_str().unwrap(),
        "--trigger",
        "innodb_rows_read_rate > 5 for 1s",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    match has {
        // MariaDB 10.11 and later: the metric can never exist.
        None => {
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert!(
                err.contains("innodb_rows_read_rate cannot exist on this server") && err.contains("MDEV-28539"),
                "{err}"
            );
        }
        Some(_) => assert!(out.status.success(), "{err}"),
    }
}

#[test]
fn a_long_capture_reads_the_sql_side_while_the_stall_lasts() {
    // 20 samples 500 ms apart: sampling outlasts the 4 s convoy, and the
    // verdict still names the holder, from the SQL read at its start.
    let sb = sandbox();
    sb.sql("CREATE DATABASE w; CREATE TABLE w.hot (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; INSERT INTO w.hot VALUES (1, 0)").unwrap();
    let data = tempfile_dir("watch-long-capture");
    let (mut child, rx) = watch(
        &sb,
        &data,
        &[
            "--trigger",
            "innodb_row_lock_current_waits > 5 for 1s",
            "--capture-samples",
            "20",
            "--capture-interval",
            "500ms",
        ],
    );
    std::thread::sleep(Duration::from_secs(2));
    let Convoy { mut holder, holder_id, waiters, .. } = convoy(&sb, 8);
    std::thread::sleep(Duration::from_secs(4));
    holder.query_drop("ROLLBACK").unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    let mut seen = vec![];
    let cap = wait_for(&rx, "captured", Duration::from_secs(30), &mut seen);
    let cap = captured(cap, &seen);
    let verdict = cap["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("row lock convoy") && verdict.contains(&format!("connection {holder_id} ")),
        "verdict: {verdict}"
    );
    // Its memory was read after it rolled back: the verdict does not call
    // the ROLLBACK its last statement.
    assert!(!verdict.contains("last ran `ROLLBACK"), "verdict: {verdict}");
    let dir = std::path::PathBuf::from(cap["dir"].as_str().unwrap());
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(
        report.contains("SQL evidence: SQL read ") && report.contains("the first that showed connections waiting"),
        "{report}"
    );
    assert!(std::fs::read_to_string(dir.join("processlist.txt")).unwrap().contains("UPDATE w.hot"));
    end(&mut [&mut child]);
}

/// The history on a disk that fills up: watch goes on polling, says once
/// that it cannot store, and says when it stores again once there is room;
/// the database is whole after it.
#[test]
fn a_full_disk_under_the_history_is_said_once_and_polls_go_on() {
    let sb = sandbox();
    let fs = LoopFs::sized(64 << 20, "fulldisk");
    let data = fs.mount.join("watch");
    let (mut child, rx) = watch(&sb, &data, &[]);
    let mut seen = vec![];
    assert!(wait_for(&rx, "poll", Duration::from_secs(20), &mut seen).is_some(), "{seen:?}");
    std::thread::sleep(Duration::from_secs(1));
    // Fill the filesystem (root writes into the reserved blocks too).
    let filler = fs.fill();
    let failed = wait_for(&rx, "store_failed", Duration::from_secs(30), &mut seen);
    let failed = failed.unwrap_or_else(|| panic!("no store_failed event: {seen:?}"));
    assert!(failed["error"].as_str().unwrap().to_lowercase().contains("full"), "{failed}");
    // Polls go on while nothing can be stored, and the failure is said once.
    let mut polls = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(500)) {
            polls += usize::from(v["event"] == "poll");
            assert_ne!(v["event"], "store_failed", "said again: {v}");
        }
    }
    assert!(polls >= 5, "{polls} polls in 3 s while the disk is full");
    std::fs::remove_file(&filler).unwrap();
    let back = wait_for(&rx, "store_recovered", Duration::from_secs(30), &mut seen);
    assert!(back.is_some_and(|b| b["failed"].as_u64().unwrap() >= 5), "{seen:?}");
    end(&mut [&mut child]);
    let db = rusqlite::Connection::open(data.join("pileup.db")).unwrap();
    let check: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
}
