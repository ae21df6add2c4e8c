//! The command line a DBA expects, against a real sandbox: the mysql
//! client's option files (Debian's `[client-server]` group, an unreadable
//! `~/.my.cnf` skipped), and exit statuses scripts can rely on.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_socket_in_debians_client_server_group_is_used() {
    let sb = sandbox();
    let dir = scratch("cli-cnf");
    let cnf = dir.join("my.cnf");
    // As Debian's /etc/mysql/mariadb.cnf has it: the socket for clients and
    // servers alike, the user in [client].
    std::fs::write(
        &cnf,
        format!("[client-server]\nsocket = {}\n\n[client]\nuser = root\n", sb.endpoint.socket.display()),
    )
    .unwrap();
    let out =
        pileup(&["top", "--once", "--interval", "200ms", "--pid", "none", "--defaults-file", cnf.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("socket {}", sb.endpoint.socket.display())));
}

#[test]
fn an_unreadable_home_option_file_is_skipped_as_the_client_skips_it() {
    let home = scratch("cli-home");
    std::fs::set_permissions(&*home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cnf = home.join(".my.cnf");
    std::fs::write(&cnf, "[client]\nuser = someone\n").unwrap();
    std::fs::set_permissions(&cnf, std::fs::Permissions::from_mode(0o600)).unwrap();
    // nobody cannot read root's file: the command runs as if it were absent.
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "env"])
        .arg(format!("HOME={}", home.display()))
        .args([env!("CARGO_BIN_EXE_pileup"), "sandbox", "list"])
        .output()
        .expect("setpriv (util-linux)");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains(".my.cnf"), "{}", stderr(&out));
}

#[test]
fn a_snapshot_of_an_unreachable_server_or_a_wrong_pid_fails() {
    let out = pileup(&["top", "--once", "--pid", "none", "-S", "/nonexistent/mysqld.sock", "-u", "root"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(e.starts_with("pileup: cannot connect") && e.contains("/nonexistent/mysqld.sock"), "{e}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("STALL"), "no report of a stall that is not one");

    let sb = sandbox();
    let sock = sb.endpoint.socket.to_str().unwrap();
    let out = pileup(&["top", "--once", "--pid", "999999999", "-S", sock, "-u", "root"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no process with pid 999999999"), "{}", stderr(&out));

    // And a good one, as JSON for scripts: one client connected and idle;
    // pileup's own connections and statements are not counted.
    let _client = sb.connect().unwrap();
    let pid = sb.pid().to_string();
    let out = pileup(&["top", "--once", "-f", "json", "--interval", "200ms", "--pid", &pid, "-S", sock, "-u", "root"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("top --json parses");
    assert_eq!(j["poll_ok"], true);
    assert_eq!(j["metrics"]["threads_connected"], 1.0, "{j}");
    assert!(j["metrics"]["questions_rate"].as_f64().is_some_and(|q| q < 1.0), "{}", j["metrics"]["questions_rate"]);
    assert!(j["busiest"].is_array() && j["triggers"].is_array());
}

/// Every command and subcommand, as words.
const COMMANDS: &[&[&str]] = &[
    &[],
    &["stacks"],
    &["watch"],
    &["top"],
    &["captures"],
    &["report"],
    &["prefetch"],
    &["locks"],
    &["lag"],
    &["memory"],
    &["digest"],
    &["binlog"],
    &["dump"],
    &["load"],
    &["sandbox"],
    &["sandbox", "start"],
    &["sandbox", "stop"],
    &["sandbox", "list"],
    &["completions"],
    &["manpages"],
];

#[test]
fn help_stands_alone_with_a_manual_completions_and_a_version() {
    for cmd in COMMANDS {
        let mut args = cmd.to_vec();
        args.push("--help");
        let out = pileup(&args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for path in ["docs/", "bench/", "README", ".md"] {
            assert!(!text.contains(path), "{args:?} --help points at {path}:\n{text}");
        }
        // The connection options only where a server is connected to.
        let never_connects =
            matches!(cmd.first(), Some(&("binlog" | "report" | "captures" | "sandbox" | "completions" | "manpages")));
        assert_eq!(text.contains("--defaults-file"), !never_connects, "{args:?}:\n{text}");
        if cmd.len() == 1 {
            let help = pileup(&["help", cmd[0]]);
            assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains(cmd[0]), "help {}", cmd[0]);
        }
    }
    // Text-or-JSON commands take the same -f/--format as the others.
    let list = pileup(&["sandbox", "list", "--format", "json"]);
    assert!(serde_json::from_slice::<serde_json::Value>(&list.stdout).is_ok_and(|v| v.is_array()), "{}", stderr(&list));

    let v = pileup(&["--version"]);
    let v = String::from_utf8_lossy(&v.stdout);
    assert!(v.starts_with("pileup ") && (v.contains("commit ") || v.contains("not built from a git checkout")), "{v}");

    let m = pileup(&["watch", "--list-metrics"]);
    let m = String::from_utf8_lossy(&m.stdout);
    assert!(m.lines().any(|l| l.starts_with("physical_reads_per_row_read ") && l.contains("per row read")), "{m}");

    // Completions load in bash.
    let bash = std::process::Command::new("bash")
        .args(["-c", &format!("source <({} completions bash) && complete -p pileup", env!("CARGO_BIN_EXE_pileup"))])
        .output()
        .unwrap();
    assert!(bash.status.success() && String::from_utf8_lossy(&bash.stdout).contains("pileup"), "{}", stderr(&bash));

    // The manual renders, a page per command.
    let dir = scratch("cli-man");
    assert!(pileup(&["manpages", dir.to_str().unwrap()]).status.success());
    let page = dir.join("pileup-stacks.1");
    let man = std::process::Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&man.stdout);
    assert!(
        man.status.success() && text.contains("--focus") && text.contains("pileup-stacks"),
        "{}\n{text}",
        stderr(&man)
    );
    assert!(dir.join("pileup-sandbox-start.1").exists() && dir.join("pileup.1").exists());
}

#[test]
fn quiet_keeps_only_the_error_that_ends_the_run() {
    let dir = scratch("cli-quiet");
    let log = dir.join("cut.log");
    std::fs::write(
        &log,
        "# User@Host: a[a] @ h []\n# Query_time: 0.1  Lock_time: 0  Rows_sent: 1  Rows_examined: 1\nSET timestamp=1;\nselect 1;\n\
         # User@Host: a[a] @ h []\n# Query_time: zz  Lock_time: 0  Rows_sent: 1  Rows_examined: 1\nSET timestamp=2;\nselect 2;\n",
    )
    .unwrap();
    let loud = pileup(&["digest", log.to_str().unwrap()]);
    let quiet = pileup(&["-q", "digest", log.to_str().unwrap()]);
    assert_eq!(loud.status.code(), Some(3));
    assert_eq!(quiet.status.code(), Some(3));
    assert!(stderr(&loud).contains("cut.log:6"), "{}", stderr(&loud));
    let q = stderr(&quiet);
    assert_eq!(q.lines().count(), 1, "{q}");
    assert!(q.starts_with("pileup: "), "{q}");
    assert_eq!(loud.stdout, quiet.stdout, "the report itself is the same");
}

#[test]
fn a_password_in_argv_is_refused_and_p_alone_takes_no_value() {
    for args in [&["-psecret", "sandbox", "list"][..], &["--password=secret", "sandbox", "list"]] {
        let out = pileup(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr(&out).starts_with("pileup: refusing a password on the command line"), "{}", stderr(&out));
    }
    // `-p` asks (on a terminal); the word after it is the command, not a password.
    let out = pileup(&["-p", "sandbox", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
