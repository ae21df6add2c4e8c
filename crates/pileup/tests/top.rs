//! `pileup top` against a real sandbox: the text snapshot for scripts, and
//! the interactive view in a real terminal (tmux), which quits cleanly.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use mysql::prelude::Queryable;

/// `pileup top --once` on a sandbox, polling every `interval`.
fn top_once(sb: &pileup_sandbox::Sandbox, interval: &str) -> std::process::Output {
    let pid = sb.pid().to_string();
    pileup(&[
        "top",
        "--once",
        "--interval",
        interval,
        "-S",
        sb.endpoint.socket.to_str().unwrap(),
        "-u",
        "root",
        "--pid",
        &pid,
    ])
}

#[test]
fn once_prints_metrics_and_the_busiest_statement() {
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    let id: u64 = c.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    let h = std::thread::spawn(move || {
        let _ = c.query_drop("SELECT SLEEP(20) /* top-marker */");
    });
    std::thread::sleep(Duration::from_millis(1500));
    let out = top_once(&sb, "300ms");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.starts_with("pileup top — socket"), "{t}");
    assert!(t.contains("Questions/s") && t.contains("Threads running") && t.contains("Server CPU (cores)"), "{t}");
    let line =
        t.lines().find(|l| l.contains("top-marker")).unwrap_or_else(|| panic!("running statement missing:\n{t}"));
    assert!(line.trim_start().starts_with(&id.to_string()), "{line}");
    sb.sql(&format!("KILL QUERY {id}")).unwrap();
    h.join().unwrap();
}

/// `pileup top` on `sb` in a new tmux session of 120×40; its exit status
/// goes to `exit_file` as `EXITED=N`.
fn start_top(sb: &pileup_sandbox::Sandbox, session: &str, exit_file: &std::path::Path) {
    let cmd = format!(
        "{} top --interval 300ms -S {} -u root --pid {}; echo EXITED=$? > {}",
        env!("CARGO_BIN_EXE_pileup"),
        sb.endpoint.socket.display(),
        sb.pid(),
        exit_file.display()
    );
    let st = Command::new("tmux")
        .args(["new-session", "-d", "-s", session, "-x", "120", "-y", "40", &cmd])
        .status()
        .expect("tmux");
    assert!(st.success());
}

/// What the tmux session's pane shows now.
fn screen(session: &str) -> String {
    String::from_utf8_lossy(&Command::new("tmux").args(["capture-pane", "-p", "-t", session]).output().unwrap().stdout)
        .into_owned()
}

#[test]
fn interactive_view_draws_in_a_terminal_and_quits_on_q() {
    let sb = sandbox();
    let session = format!("pileup-top-{}", std::process::id());
    start_top(&sb, &session, &sb.endpoint.dir.join("top-exit"));
    let capture = || screen(&session);
    let t0 = Instant::now();
    let mut screen = String::new();
    while t0.elapsed() < Duration::from_secs(10) {
        screen = capture();
        if screen.contains("Questions/s") && screen.contains("no stall") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        screen.contains("pileup top") && screen.contains("Questions/s") && screen.contains("busiest statements"),
        "{screen}"
    );
    Command::new("tmux").args(["send-keys", "-t", &session, "q"]).status().unwrap();
    let exit_file = sb.endpoint.dir.join("top-exit");
    let t0 = Instant::now();
    while !exit_file.exists() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("tmux").args(["kill-session", "-t", &session]).status();
    assert_eq!(
        std::fs::read_to_string(&exit_file).unwrap_or_default().trim(),
        "EXITED=0",
        "top must exit cleanly on q"
    );
}

/// The server killed under the interactive view, then started again on its
/// datadir: the view says in one line that the poll failed within seconds
/// of the death, goes on drawing, and follows the new server process once
/// it answers, without being restarted; `q` still quits cleanly.
#[test]
fn interactive_view_says_the_server_is_gone_and_follows_it_back() {
    let mut sb = sandbox();
    let session = format!("pileup-top-gone-{}", std::process::id());
    let exit_file = sb.endpoint.dir.join("top-gone-exit");
    start_top(&sb, &session, &exit_file);
    let capture = || screen(&session);
    // The screen within `within` that `ok` accepts, or the last one seen.
    let until = |ok: &dyn Fn(&str) -> bool, within: Duration| -> (bool, String, Duration) {
        let t0 = Instant::now();
        let mut screen = String::new();
        while t0.elapsed() < within {
            screen = capture();
            if ok(&screen) {
                return (true, screen, t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        (false, screen, t0.elapsed())
    };
    let drawn = |s: &str| s.contains("Questions/s") && s.contains("busiest statements") && !s.contains("poll failed");
    let (ok, screen, _) = until(&drawn, Duration::from_secs(10));
    assert!(ok, "{screen}");
    sb.crash().unwrap();
    let (ok, screen, took) = until(&|s: &str| s.contains("poll failed"), Duration::from_secs(30));
    assert!(ok, "no word of the server's death: {screen}");
    eprintln!("said {took:?} after the death: {}", screen.lines().find(|l| l.contains("poll failed")).unwrap_or(""));
    let said: Vec<&str> = screen.lines().filter(|l| l.contains("poll failed")).collect();
    assert_eq!(said.len(), 1, "{screen}");
    assert!(!said[0].contains("Error {") && !said[0].contains("Os {"), "{screen}");
    sb.start_again().unwrap();
    let (ok, screen, took) = until(&drawn, Duration::from_secs(30));
    assert!(ok, "the view did not follow the new server: {screen}");
    eprintln!("followed {took:?} after the new server answered");
    Command::new("tmux").args(["send-keys", "-t", &session, "q"]).status().unwrap();
    let t0 = Instant::now();
    while !exit_file.exists() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("tmux").args(["kill-session", "-t", &session]).status();
    assert_eq!(std::fs::read_to_string(&exit_file).unwrap_or_default().trim(), "EXITED=0");
}

/// The read-workload ruleset on a real MariaDB under sysbench read load:
/// every ratio docs/METRICS.md lists has a value, from the counters this
/// server has (MariaDB 10.11 has no Innodb_rows_read), and `top` says once
/// which metrics the server cannot give and why.
#[test]
fn every_read_ratio_has_a_value_under_read_load_and_the_missing_counters_are_named() {
    use pileup_watch::derive::{availability, derive, DeriveOptions, Snapshot};
    let sb = sandbox();
    let base = sysbench_prepare(&sb, "oltp_read_only", 2, 5000);
    let mut load = sysbench_start("oltp_read_only", &base, 2, 8);
    std::thread::sleep(Duration::from_secs(2));
    let mut poller = pileup_watch::poll::Poller::new(sb.conn_spec(), Some(sb.pid() as i32), Duration::from_secs(2));
    let a = poller.poll();
    std::thread::sleep(Duration::from_secs(1));
    let b = poller.poll();
    assert!(a.ok && b.ok, "{:?} {:?}", a.error, b.error);
    let d = derive(
        &Snapshot { at: a.unix, values: a.values.clone() },
        &Snapshot { at: b.unix, values: b.values.clone() },
        &DeriveOptions::default(),
    );
    for m in [
        "rows_read_rate",
        "rows_read_per_row_sent",
        "rows_read_per_query",
        "physical_reads_per_row_read",
        "bp_read_requests_per_row",
        "bp_miss_ratio",
    ] {
        assert!(d.get(m).is_some_and(|v| v.is_finite()), "{m} has no value: {d:?}");
    }
    assert!(d["rows_read_rate"] > 100.0, "{d:?}");
    let missing = availability(|m| d.contains_key(m));
    let version: String = sb.connect().unwrap().query_first("SELECT VERSION()").unwrap().unwrap();
    if !b.values.contains_key("innodb_rows_read") {
        assert!(missing.iter().any(|a| a.metrics.contains("innodb_rows_read_rate")), "{version}: {missing:?}");
    }
    let out = top_once(&sb, "500ms");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t = String::from_utf8_lossy(&out.stdout);
    for label in ["Rows read/s", "Rows read per row sent", "Rows read per query", "Disk reads per row read"] {
        assert!(t.lines().any(|l| l.starts_with(label)), "{label} missing:\n{t}");
    }
    if !b.values.contains_key("innodb_rows_read") {
        assert_eq!(t.matches("not on this server: innodb_rows_read_rate").count(), 1, "{t}");
        assert!(t.contains("MDEV-28539"), "{t}");
    }
    let _ = load.wait();
}
