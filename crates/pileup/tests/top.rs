//! `pileup top` against a real sandbox: the text snapshot for scripts, and
//! the interactive view in a real terminal (tmux), which quits cleanly.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use mysql::prelude::Queryable;

#[test]
fn once_prints_metrics_and_the_busiest_statement() {
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    let id: u64 = c.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    let h = std::thread::spawn(move || {
        let _ = c.query_drop("SELECT SLEEP(20) /* top-marker */");
    });
    std::thread::sleep(Duration::from_millis(1500));
    let out = pileup(&[
        "top",
        "--once",
        "--interval",
        "300ms",
        "-S",
        sb.endpoint.socket.to_str().unwrap(),
        "-u",
        "root",
        "--pid",
        &sb.pid().to_string(),
    ]);
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

#[test]
fn interactive_view_draws_in_a_terminal_and_quits_on_q() {
    let sb = sandbox();
    let session = format!("pileup-top-{}", std::process::id());
    let cmd = format!(
        "{} top --interval 300ms -S {} -u root --pid {}; echo EXITED=$? > {}/top-exit",
        env!("CARGO_BIN_EXE_pileup"),
        sb.endpoint.socket.display(),
        sb.pid(),
        sb.endpoint.dir.display()
    );
    let st = Command::new("tmux")
        .args(["new-session", "-d", "-s", &session, "-x", "120", "-y", "40", &cmd])
        .status()
        .expect("tmux");
    assert!(st.success());
    let capture = || {
        String::from_utf8_lossy(
            &Command::new("tmux").args(["capture-pane", "-p", "-t", &session]).output().unwrap().stdout,
        )
        .into_owned()
    };
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
