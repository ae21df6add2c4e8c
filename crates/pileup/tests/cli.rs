//! The command line a DBA expects, against a real sandbox: the mysql
//! client's option files (Debian's `[client-server]` group, an unreadable
//! `~/.my.cnf` skipped), and exit statuses scripts can rely on.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

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
    &["bench"],
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
    assert!(
        serde_json::from_slice::<serde_json::Value>(&list.stdout).is_ok_and(|v| v["sandboxes"].is_array()),
        "{}",
        stderr(&list)
    );

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
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).starts_with("pileup: refusing a password on the command line"), "{}", stderr(&out));
    }
    // `-p` asks (on a terminal); the word after it is the command, not a password.
    let out = pileup(&["-p", "sandbox", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Every command line that cannot be used exits 2, before anything is
/// looked at: each case names a server that does not exist, so a check
/// made after connecting would fail with 1 instead. The message is one line
/// that names what is wrong and where the command's help is.
#[test]
fn every_usage_error_exits_2_before_any_work() {
    let dir = scratch("cli-usage");
    let log = dir.join("slow.log");
    std::fs::write(&log, "# Query_time: 0.1  Lock_time: 0  Rows_sent: 1  Rows_examined: 1\nselect 1;\n").unwrap();
    let log = log.to_str().unwrap();
    let d = dir.to_str().unwrap();
    let dump_dir = dir.join("d");
    let dump_dir = dump_dir.to_str().unwrap();
    let no = ["-S", "/nonexistent/pileup-test.sock", "-u", "nobody"];
    // (words, what the message must say)
    let cases: &[(&[&str], &str)] = &[
        (&["stacks", "--pid", "999999", "--samples", "0"], "--samples"),
        (&["stacks", "--pid", "999999", "-o", "r.csv"], "unknown extension"),
        (&["stacks", "--pid", "999999", "-f", "json", "-o", "x.svg"], "x.svg names svg but --format says json"),
        (&["stacks", "--pid", "999999", "-f", "html"], "html"),
        (&["stacks", "--pid", "999999", "--focus", "conn:"], "--focus"),
        (&["watch", "--pid", "none", "--interval", "10ms"], "--interval"),
        (&["watch", "--pid", "none", "--trigger", "no_such_metric > 1"], "--list-metrics"),
        (&["watch", "--pid", "none", "--pileup-threads", "0"], "--pileup-threads"),
        (&["watch", "--pid", "none", "--duration", "0s"], "--duration"),
        (&["watch", "--pid", "none", "-f", "pprof"], "pprof"),
        (&["top", "--pid", "none", "--interval", "10ms"], "--interval"),
        (&["top", "--pid", "none", "--json"], "--once"),
        (&["captures", "--data-dir", d, "-f", "svg"], "svg"),
        (&["report", d, "--no-such-flag"], "--no-such-flag"),
        (&["prefetch", "--threads", "0"], "--threads"),
        (&["locks", "--pid", "999999", "--duration", "0s"], "--duration"),
        (&["locks", "--pid", "999999", "--source", "nope"], "nope"),
        (&["locks", "--source", "performance-schema", "-o", "l.svg"], "no stacks"),
        (&["lag", "--pid", "999999", "--duration", "0s"], "--duration"),
        (&["lag", "--pid", "999999", "--interval-ms", "0"], "--interval-ms"),
        (&["memory", "--pid", "999999", "--no-trace", "-o", "m.pb.gz"], "--no-trace"),
        (&["memory", "--pid", "999999", "--interval", "10ms"], "--interval"),
        (&["memory", "--pid", "999999", "-o", "m.html"], "does not write html"),
        (&["digest", log, "--max-classes", "0"], "--max-classes"),
        (&["digest", log, "--jobs", "0"], "--jobs"),
        (&["digest", log, "--rank", "bogus"], "bogus"),
        (&["digest", log, "-f", "html", "-o", "x.json"], "x.json names json but --format says html"),
        (&["digest", log, "-o", "r.csv"], "unknown extension"),
        (&["digest", log, "-f", "svg"], "svg"),
        (&["digest", "-", "-"], "standard input"),
        (&["binlog", log, "-f", "svg"], "svg"),
        (&["dump", "-o", dump_dir, "--threads", "0"], "--threads"),
        (&["dump", "-o", dump_dir, "--layout", "mydumper", "--compress", "zstd"], "--compress gzip"),
        (&["dump", "-o", dump_dir, "--layout", "mydumper", "--users"], "--users"),
        (&["dump", "-o", dump_dir, "--include", "("], "--include"),
        (&["watch", "--pid", "none", "--ship", "ftp://x"], "--ship"),
        (&["watch", "--pid", "none", "--listen", "no-port"], "--listen"),
        (&["prefetch", "--listen", "no-port"], "--listen"),
        (&["memory", "--pid", "999999", "--focus", "conn:"], "--focus"),
        (&["bench", "hot-row", "--pg", "host=/tmp password=x", "--i-know"], "PGPASSWORD"),
        (&["bench", "hot-row", "--pg", "host=/tmp"], "--i-know"),
        (&["captures", "--from", "not-a-url"], "not-a-url"),
        (&["stacks", "--pid", "999999", "-f", "nope"], "nope"),
        (&["load", d, "--threads", "0"], "--threads"),
        (&["bench", "point-selects"], "no experiment"),
        (&["bench", "hot-row", "--threads", "0"], "--threads"),
        (&["bench", "hot-row", "--rounds", "0"], "--rounds"),
        (&["bench", "hot-row", "--warmup", "0s", "--duration", "1ms"], "at least 1s"),
        (&["bench", "hot-row", "-o", "r.csv"], "r.csv"),
        (&["bench", "all", "-f", "svg"], "one experiment"),
        (&["bench", "hot-row", "-f", "pprof"], "pprof"),
        (&["bench", "compare", "one.json"], "two JSON results"),
        (&["bench", "hot-row", "x.json"], "only compare"),
        (&["sandbox", "start", "--set", "nokv"], "KEY=VALUE"),
        (&["sandbox", "stop"], "--all"),
        (&["completions", "nosuchshell"], "nosuchshell"),
        (&["memory", "--pid", "999999", "--duration", "0s"], "--duration"),
        (&["memory", "--pid", "999999", "--top", "0"], "--top"),
        (&["digest", "--server", "--duration", "0s"], "--duration"),
        (&["prefetch", "--duration", "0s"], "--duration"),
        (&["locks", "--pid", "999999", "--stack-budget", "0"], "--stack-budget"),
        (&["dump", "-o", dump_dir, "--level", "99"], "--level"),
        (&["dump", "-o", dump_dir, "--chunk-rows", "0"], "--chunk-rows"),
        (&["stacks", "--pid", "999999", "--dot-min-pct", "200"], "--dot-min-pct"),
        (&["watch", "--pid", "none", "--capture-samples", "0"], "--capture-samples"),
        (&["watch", "--pid", "none", "--max-captures-per-hour", "0"], "--max-captures-per-hour"),
        (&["watch", "--pid", "none", "--data-dir", log], "is a file, not a directory"),
        (&["captures", "--data-dir", log], "is a file, not a directory"),
        (&["--password=x", "sandbox", "list"], "password"),
        (&["--connect-timeout", "0", "sandbox", "list"], "timeout"),
    ];
    let mut wrong = vec![];
    for (words, says) in cases {
        let mut args: Vec<&str> = words.to_vec();
        args.extend(no);
        let out = pileup(&args);
        let e = stderr(&out);
        let first = e.lines().next().unwrap_or("");
        let ours = first.starts_with("pileup: ");
        let ok = out.status.code() == Some(2)
            && out.stdout.is_empty()
            && e.contains(says)
            && (!ours || e.lines().count() == 1 && first.contains("--help"));
        if !ok {
            wrong.push(format!("{words:?}: exit {:?}, stderr {e:?}", out.status.code()));
        }
    }
    assert!(wrong.is_empty(), "not a usage error as it should be:\n{}", wrong.join("\n"));

    // Under --json the error is one JSON object, of its kind.
    let out = pileup(&["digest", log, "--max-classes", "0", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let j: serde_json::Value = serde_json::from_slice(&out.stderr).expect("the error is JSON");
    assert_eq!(j["kind"], "usage", "{j}");
    assert_eq!(j["exit"], 2);
    assert_eq!(j["schema_version"], 1);
    assert!(j["error"].as_str().unwrap().contains("--max-classes"), "{j}");
    // Formats by their other names, in any case.
    for f in ["PMP", "collapsed", "FlameGraph", "graphviz", "Json"] {
        let out = pileup(&["stacks", "--pid", "999999", "-f", f]);
        assert_eq!(out.status.code(), Some(1), "-f {f} is taken (the pid is what fails): {}", stderr(&out));
    }
    // A command line clap refuses is answered in JSON too.
    let out = pileup(&["digest", log, "--rank", "bogus", "-f", "json"]);
    assert_eq!(out.status.code(), Some(2));
    let j: serde_json::Value = serde_json::from_slice(&out.stderr).expect("the error is JSON");
    assert_eq!(j["kind"], "usage", "{j}");
    // And a failure is a failure: exit 1, kind failed.
    let out = pileup(&["captures", "--data-dir", "/nonexistent/data", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&out.stderr).expect("the error is JSON");
    assert_eq!(j["kind"], "failed", "{j}");
    assert!(j["error"].as_str().unwrap().contains("no such directory"), "{j}");
}

/// A reader that stops reading ends the run quietly, as `cat` and `grep`
/// end: no message, exit 0, no panic; a capture under way is finished and
/// listed.
#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    use std::io::{BufRead, Read};
    use std::process::{Command, Stdio};
    // A result larger than a pipe's buffer, its reader gone after 10 bytes.
    let mut child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    let full = pileup(&["completions", "bash"]);
    assert!(full.stdout.len() > 1 << 16, "the script outgrows a pipe's buffer: {} bytes", full.stdout.len());

    // A report written through the output layer and serde (digest's JSON
    // of 3,000 classes), its reader gone after 100 bytes.
    let dir = scratch("cli-pipe-digest");
    let log = dir.join("slow.log");
    let mut text = String::new();
    for i in 0..3000 {
        text.push_str(&format!(
            "# Query_time: 0.{i:03}  Lock_time: 0  Rows_sent: 1  Rows_examined: {i}\nSELECT c{i} FROM t{i} WHERE id = {i};\n"
        ));
    }
    std::fs::write(&log, text).unwrap();
    for format in ["json", "text"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pileup"))
            .args(["digest", log.to_str().unwrap(), "-f", format, "--limit", "3000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut head = [0u8; 100];
        child.stdout.take().unwrap().read_exact(&mut head).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "digest -f {format}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "digest -f {format}: {}", stderr(&out));
    }
    let whole = pileup(&["digest", log.to_str().unwrap(), "-f", "json"]);
    assert!(whole.stdout.len() > 1 << 16, "the report outgrows a pipe's buffer: {} bytes", whole.stdout.len());

    // watch with its stdout and stderr one pipe, closed after two lines
    // (`pileup watch 2>&1 | head -2`): the server cannot be reached, so
    // it captures, and the capture is finished and listed.
    let data = scratch("cli-pipe");
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["watch", "-S", "/nonexistent/pileup-test.sock", "-u", "nobody", "--pid", "none"])
        .args(["--interval", "200ms", "--duration", "5s", "--cooldown", "1s", "--data-dir", data.to_str().unwrap()])
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(reader);
    let mut two = String::new();
    for _ in 0..2 {
        lines.read_line(&mut two).unwrap();
    }
    drop(lines);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "after {two:?}");
    let caps = pileup(&["captures", "--data-dir", data.to_str().unwrap(), "--json"]);
    let caps: serde_json::Value = serde_json::from_slice(&caps.stdout).unwrap();
    assert!(caps["captures"].as_array().unwrap().iter().any(|c| c["kind"] == "capture"), "{caps}");

    // Stopping every sandbox where there is none is not an error.
    let none = scratch("cli-no-sandboxes");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["sandbox", "stop", "--all"])
        .env("PILEUP_SANDBOX_DIR", none.to_str().unwrap())
        .output()
        .unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("no sandboxes"), "{}", stderr(&out));

    // An empty data directory has no captures: an empty list, not an error.
    let empty = scratch("cli-empty");
    let out = pileup(&["captures", "--data-dir", empty.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap();
    assert_eq!((&listed["schema_version"], &listed["captures"]), (&serde_json::json!(1), &serde_json::json!([])));
}

/// Every page of the manual has the connection options where the command
/// connects, and the exit statuses; completions offer `--rank`'s and
/// `--format`'s values, not file names.
#[test]
fn manual_pages_and_completions_come_from_the_same_definitions() {
    let dir = scratch("cli-pages");
    assert!(pileup(&["manpages", dir.to_str().unwrap()]).status.success());
    for cmd in COMMANDS.iter().filter(|c| !c.is_empty()) {
        let page = dir.join(format!("pileup-{}.1", cmd.join("-")));
        if cmd == &["sandbox"] {
            continue; // a group: its pages are its commands'
        }
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        assert!(text.contains("Exit status"), "{} has no exit status", page.display());
        let connects = !matches!(cmd[0], "binlog" | "report" | "captures" | "sandbox" | "completions" | "manpages");
        assert_eq!(text.contains("defaults\\-file"), connects, "{}: connection options", page.display());
    }
    let bash = pileup(&["completions", "bash"]);
    let bash = String::from_utf8_lossy(&bash.stdout);
    let rank = bash.find("--rank)").map(|i| &bash[i..i + 200]).unwrap_or("");
    assert!(rank.contains("optimizer") && !rank.contains("compgen -f"), "--rank completes: {rank}");
    let digest_format =
        bash.split("pileup__subcmd__digest)").nth(1).and_then(|s| s.split("--format)").nth(1)).unwrap_or("");
    assert!(digest_format[..200.min(digest_format.len())].contains("html"), "{digest_format:.200}");
}

/// A sandbox whose server was restarted by hand (its record names a pid
/// that is gone) is listed as running under the new pid, and `sandbox
/// stop` stops the new server before removing its directory.
#[test]
fn sandbox_stop_stops_the_server_on_its_directory_whatever_its_record_says() {
    let base = scratch("sb-restarted");
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pileup"))
            .args(args)
            .env("PILEUP_SANDBOX_DIR", &*base)
            .output()
            .expect("running pileup")
    };
    let out = cli(&["sandbox", "start", "rs"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(base.join("rs/sandbox.json")).unwrap()).unwrap();
    let old = record["pid"].as_u64().unwrap() as i32;
    let cmdline = std::fs::read(format!("/proc/{old}/cmdline")).unwrap();
    let args: Vec<String> =
        cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(old), nix::sys::signal::Signal::SIGKILL).unwrap();
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')))
    };
    let t0 = std::time::Instant::now();
    while !gone(old) && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Restarted by hand, with the same arguments.
    let mut by_hand = std::process::Command::new(&args[0])
        .args(&args[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let new = by_hand.id() as u64;
    let sock = record["socket"].as_str().unwrap().to_string();
    let t0 = std::time::Instant::now();
    let opts = mysql::OptsBuilder::new().socket(Some(sock.clone())).user(Some("root"));
    while mysql::Conn::new(opts.clone()).is_err() {
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "the server restarted by hand does not answer");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = cli(&["sandbox", "list", "-f", "json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rs = list["sandboxes"].as_array().unwrap().iter().find(|s| s["sandbox"]["name"] == "rs").cloned().unwrap();
    assert_eq!(rs["running"], true, "{list:#}");
    assert_eq!(rs["sandbox"]["pid"], new, "the pid of the server on the directory: {list:#}");
    let out = cli(&["sandbox", "stop", "rs"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let t0 = std::time::Instant::now();
    while by_hand.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "sandbox stop left the server restarted by hand running"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!base.join("rs").exists());
}

/// A full disk under `-o` and under a dump: one line naming the file and
/// the fix, exit 1, the previous output left whole, and no dump presented
/// complete.
#[test]
fn a_full_disk_is_one_line_and_the_previous_output_stays_whole() {
    let fs = LoopFs::sized(32 << 20, "fullout");
    let out = fs.mount.join("report.json");
    std::fs::write(&out, b"{\"previous\": true}").unwrap();
    let dir = scratch("fullout");
    let log = dir.join("slow.log");
    let mut text = String::new();
    for i in 0..200 {
        text += &format!(
            "# Time: 261129 12:00:{:02}\n# User@Host: app[app] @ localhost []\n# Query_time: 0.001000  Lock_time: 0.000010  Rows_sent: 1  Rows_examined: {i}\nSET timestamp=1795953600;\nSELECT c{i} FROM t{i} WHERE id = {i};\n",
            i % 60
        );
    }
    std::fs::write(&log, text).unwrap();
    let filler = fs.fill();
    let o = pileup(&["digest", log.to_str().unwrap(), "-f", "json", "-o", out.to_str().unwrap()]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    assert!(e.contains("report.json") && e.contains("disk is full") && !e.contains("os error"), "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), b"{\"previous\": true}", "the previous report is whole");
    // A dump on the full disk: it fails, and is not presented as a dump.
    let sb = sandbox();
    sb.sql("CREATE DATABASE full_d; CREATE TABLE full_d.t (id INT PRIMARY KEY, pad CHAR(200)); USE full_d; INSERT INTO full_d.t SELECT seq, REPEAT('x', 200) FROM seq_1_to_20000")
        .unwrap();
    let dump = fs.mount.join("dump");
    let sock = sb.endpoint.socket.to_str().unwrap();
    let o = pileup(&["dump", "-S", sock, "-u", "root", "--databases", "full_d", "-o", dump.to_str().unwrap()]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    let last = e.trim().lines().last().unwrap_or("");
    assert!(last.starts_with("pileup: ") && last.contains("disk is full") && !last.contains("os error"), "{e}");
    assert!(!dump.join("pileup-dump.json").exists(), "a dump cut short has no manifest");
    let again = pileup(&["load", dump.to_str().unwrap(), "-S", sock, "-u", "root", "--rename", "full_d:full_l"]);
    assert!(stderr(&again).contains("not a complete pileup dump"), "{}", stderr(&again));
    // The disk filling up in the middle of a dump: the same.
    std::fs::remove_file(filler).unwrap();
    std::fs::remove_dir_all(&dump).unwrap();
    sb.sql("USE full_d; INSERT INTO full_d.t SELECT seq, REPEAT(MD5(seq), 6) FROM seq_20001_to_200000").unwrap();
    let o = pileup(&[
        "dump",
        "-S",
        sock,
        "-u",
        "root",
        "--databases",
        "full_d",
        "--compress",
        "none",
        "-o",
        dump.to_str().unwrap(),
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    let last = e.trim().lines().last().unwrap_or("");
    assert!(last.starts_with("pileup: ") && last.contains("disk is full") && !last.contains("os error"), "{e}");
    assert!(last.contains("is incomplete (no pileup-dump.json)"), "{e}");
    assert!(!dump.join("pileup-dump.json").exists(), "a dump cut short has no manifest");
}

/// A server stopped with SIGSTOP here goes on when the test ends, however
/// it ends.
struct Resumed(i32);

impl Drop for Resumed {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), nix::sys::signal::Signal::SIGCONT);
    }
}

/// A server that does not answer (stopped here with SIGSTOP, as a hung
/// server looks): each tool that connects gives up within its connect
/// timeout, in one line saying so, a dump too (whose statements may run
/// for hours once connected).
#[test]
fn a_hung_server_is_one_line_within_the_connect_timeout() {
    let sb = sandbox();
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let dir = scratch("hung");
    let dump = dir.join("dump");
    let pid = sb.pid() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGSTOP).unwrap();
    let _resumed = Resumed(pid);
    let runs: [&[&str]; 5] = [
        &["top", "--once", "--pid", "none"],
        &["dump", "--databases", "mysql", "-o", dump.to_str().unwrap()],
        &["digest", "--slow-log-table"],
        &["prefetch", "--duration", "2s"],
        &["bench", "point-select", "--duration", "1s", "--threads", "1", "--rounds", "1"],
    ];
    for args in runs {
        let t0 = Instant::now();
        let o = pileup(&[args, &["-S", &sock, "-u", "root", "--connect-timeout", "2"]].concat());
        let e = stderr(&o);
        assert!(t0.elapsed() < Duration::from_secs(15), "{args:?} took {:?}", t0.elapsed());
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        let last = e.trim().lines().last().unwrap_or("");
        assert!(last.contains("did not answer") && last.contains("--connect-timeout"), "{args:?}: {e}");
    }
}

/// What befalls the server at a run's first chunk.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Stopped with SIGSTOP: it neither answers nor closes its connections.
    Hang,
    /// Killed with SIGKILL, then started again on its datadir.
    Kill,
}

/// Run pileup with `args` (and `-S`/`-u` to `sb`, a 2 s connect timeout,
/// JSON), and at its first chunk hang or kill the server: the run must end
/// within 30 s with status 1. Returns its last line of stderr, once the
/// server answers again.
fn cut_at_first_chunk(sb: &mut pileup_sandbox::Sandbox, args: &[&str], fault: Fault) -> String {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(args)
        .args(["-S", &sock, "-u", "root", "--connect-timeout", "2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let _ = out.lines().map_while(Result::ok).find(|l| l.contains("\"chunk\""));
    let pid = sb.pid() as i32;
    let resumed = match fault {
        Fault::Hang => {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGSTOP).unwrap();
            Some(Resumed(pid))
        }
        Fault::Kill => {
            sb.crash().unwrap();
            None
        }
    };
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{args:?}: still running 30 s after the server {fault:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(resumed);
    if let Fault::Kill = fault {
        sb.start_again().unwrap();
    }
    let mut e = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut e).unwrap();
    assert_eq!(status.code(), Some(1), "{args:?}: {e}");
    e.trim().lines().last().unwrap_or("").to_string()
}

/// A dump and a load, each cut off at its first chunk by `fault`: each
/// ends in one line that `says` all of, nothing is presented whole (the
/// dump has no manifest), and the load goes on with --resume to a copy
/// identical by CHECKSUM TABLE.
fn dump_and_load_cut_off(fault: Fault, says: &[&str]) {
    let mut sb = sandbox();
    sb.sql(
        "CREATE DATABASE h; USE h; CREATE TABLE t (id INT PRIMARY KEY, pad CHAR(200)) ENGINE=InnoDB;
         INSERT INTO t SELECT seq, REPEAT(CHAR(65 + seq % 26), 200) FROM seq_1_to_600000;
         ANALYZE TABLE t",
    )
    .unwrap();
    // The statistics are kept on disk (ANALYZE): the dump after a killed
    // server still cuts the table into chunks by its row estimate.
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let dir = scratch("cut-mid");
    let cut_dump = dir.join("cut");
    let dump = ["dump", "--databases", "h", "--threads", "2", "--chunk-rows", "20000", "-o"];
    let said = cut_at_first_chunk(&mut sb, &[&dump[..], &[cut_dump.to_str().unwrap()]].concat(), fault);
    assert!(said.contains("is incomplete (no pileup-dump.json)"), "{said}");
    assert!(says.iter().all(|s| said.contains(s)), "{fault:?}: {said}");
    assert!(!cut_dump.join("pileup-dump.json").exists(), "a dump cut off has no manifest");

    let whole = dir.join("whole");
    let o = pileup(&[&dump[..], &[whole.to_str().unwrap(), "-S", &sock, "-u", "root"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let said =
        cut_at_first_chunk(&mut sb, &["load", whole.to_str().unwrap(), "--rename", "h:h2", "--threads", "2"], fault);
    assert!(said.contains("--resume") && says.iter().all(|s| said.contains(s)), "{fault:?}: {said}");
    let o = pileup(&["load", whole.to_str().unwrap(), "--rename", "h:h2", "--resume", "-S", &sock, "-u", "root"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut c = sb.connect().unwrap();
    use mysql::prelude::Queryable;
    let sums: Vec<(String, Option<u64>)> = c.query("CHECKSUM TABLE h.t, h2.t").unwrap();
    assert_eq!(sums[0].1, sums[1].1, "{sums:?}");
}

/// The server stops answering while a dump's or a load's statements run
/// (their own bound is a day): the watchdog's probes find it within two
/// connect timeouts and five seconds apart and the statements are cut off.
#[test]
fn a_server_that_hangs_mid_dump_or_mid_load_is_cut_off_in_one_line() {
    dump_and_load_cut_off(Fault::Hang, &["stopped answering", "connect timeout (2 s)"]);
}

/// The server is killed under a dump and under a load (and started again):
/// each ends at once in one line saying the server closed the connection.
#[test]
fn a_server_killed_mid_dump_or_mid_load_is_one_line_and_the_load_resumes() {
    dump_and_load_cut_off(Fault::Kill, &["closed the connection"]);
}
