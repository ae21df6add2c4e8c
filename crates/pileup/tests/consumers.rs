//! Every command's results read by the programs that consume them: each
//! `-f json`/`--json` result and JSON Lines stream by jq (every object with
//! its `schema_version`), each `-o` file by the reader of its extension
//! (xmllint for SVG and HTML, `go tool pprof -raw`, Graphviz's dot, the
//! folded format's own shape), against one real sandbox under load, and
//! the sandbox commands' own results (a second sandbox started and stopped
//! by `pileup sandbox`). The Prometheus expositions are read by promtool in
//! the fleet tests, lag's files in its own (it needs a replica), bench's
//! plots of every experiment in its own (a run takes minutes; here one
//! short point and its comparison), prefetch's stream in its own (it needs
//! a replica).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{pileup, scratch, sysbench_prepare, sysbench_start};
use mysql::prelude::Queryable;
use pileup_sandbox::{Options, Sandbox};

/// The program that reads a format, and what it must find.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reader {
    /// One JSON document (not several) whose top level carries
    /// `schema_version` 1.
    Json,
    /// JSON Lines: every line one object with `schema_version` 1.
    JsonLines,
    Svg,
    Html,
    Pprof,
    Dot,
    Folded,
    Text,
}

impl Reader {
    fn of(path: &Path) -> Reader {
        let name = path.to_string_lossy();
        match name.rsplit_once('.').map(|(_, e)| e) {
            Some("json") => Reader::Json,
            Some("svg") => Reader::Svg,
            Some("html") => Reader::Html,
            Some("gz") => Reader::Pprof,
            Some("dot") => Reader::Dot,
            Some("folded") => Reader::Folded,
            _ => Reader::Text,
        }
    }
}

fn run(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program} (make deps): {e}"))
}

/// What is wrong with `path` read as `r` says, if anything.
fn read(r: Reader, path: &Path) -> Result<(), String> {
    let p = path.to_str().unwrap();
    let failed = |o: &std::process::Output| {
        (!o.status.success())
            .then(|| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    };
    let bytes = std::fs::read(path).map_err(|e| format!("reading it: {e}"))?;
    if bytes.is_empty() {
        return Err("empty".into());
    }
    let problem = match r {
        Reader::Json => failed(&run("jq", &["-e", "-s", "length == 1 and .[0].schema_version == 1", p])),
        // jq reads a stream of values however they are laid out: each line
        // must also be one whole object.
        Reader::JsonLines => {
            failed(&run("jq", &["-e", "-s", "length > 0 and all(.schema_version == 1)", p])).or_else(|| {
                String::from_utf8_lossy(&bytes)
                    .lines()
                    .find(|l| serde_json::from_str::<serde_json::Value>(l).map_or(true, |v| !v.is_object()))
                    .map(|l| format!("not one JSON object on its line: {l:?}"))
            })
        }
        Reader::Svg => failed(&run("xmllint", &["--noout", p])),
        // libxml2's HTML parser is HTML 4's: it knows no figure or inline
        // svg and says so; anything else it says is a malformed page.
        Reader::Html => {
            let o = run("xmllint", &["--html", "--noout", p]);
            let said = String::from_utf8_lossy(&o.stderr).into_owned();
            let errors: Vec<&str> = said
                .lines()
                .filter(|l| l.contains("parser error") && !(l.contains(": Tag ") && l.ends_with(" invalid")))
                .collect();
            (!errors.is_empty()).then(|| errors.join("\n"))
        }
        Reader::Pprof => {
            let o = run("go", &["tool", "pprof", "-raw", p]);
            failed(&o).or_else(|| {
                (!String::from_utf8_lossy(&o.stdout).contains("Samples:")).then(|| "no samples in the profile".into())
            })
        }
        Reader::Dot => failed(&run("dot", &["-Tsvg", "-o", "/dev/null", p])),
        Reader::Folded => {
            let text = String::from_utf8_lossy(&bytes);
            text.lines()
                .find(|l| l.rsplit_once(' ').is_none_or(|(stack, n)| stack.is_empty() || n.parse::<u64>().is_err()))
                .map(|l| format!("not a folded line: {l:?}"))
        }
        Reader::Text => std::str::from_utf8(&bytes).err().map(|e| e.to_string()),
    };
    problem.map_or(Ok(()), Err)
}

/// One command: its arguments (`{}` in one is the scratch directory, `~`
/// a space within one), and either the files it writes (stdout then
/// empty; its text file must hold `says`) or how its stdout is read.
struct Case {
    args: Vec<String>,
    files: Vec<&'static str>,
    says: &'static str,
    stdout: Option<Reader>,
}

/// A command whose result is on stdout.
fn case(args: &str, stdout: Reader) -> Case {
    Case { args: args.split_whitespace().map(String::from).collect(), files: vec![], says: "", stdout: Some(stdout) }
}

/// A command that writes files (the text one saying `says`), and nothing
/// on stdout.
fn files(args: &str, files: &[&'static str], says: &'static str) -> Case {
    Case { args: args.split_whitespace().map(String::from).collect(), files: files.to_vec(), says, stdout: None }
}

#[test]
fn every_result_is_read_by_its_consumer() {
    let dir = scratch("consumers");
    let sb = Sandbox::start(Options {
        base_dir: Some(common::it_base()),
        binlog: true,
        cnf: vec![("slow_query_log".into(), "1".into()), ("long_query_time".into(), "0".into())],
        ..Default::default()
    })
    .expect("starting a sandbox");
    let sock = sb.endpoint.socket.display().to_string();
    let pid = sb.pid().to_string();
    sb.sql("CREATE DATABASE shop").unwrap();
    sb.sql("CREATE TABLE shop.orders (id INT PRIMARY KEY, what VARCHAR(20))").unwrap();
    sb.sql("INSERT INTO shop.orders VALUES (1, 'tea'), (2, 'cake'), (3, 'jam')").unwrap();
    let base = sysbench_prepare(&sb, "oltp_read_write", 1, 2000);
    let data = sb.endpoint.dir.join("data");
    let mut c = sb.connect().unwrap();
    let slow_log: String = c.query_first("SELECT @@slow_query_log_file").unwrap().unwrap();
    let slow_log = data.join(slow_log).display().to_string();
    // The first binary log: the statements above, and sysbench's tables,
    // closed so that the load below writes to the next one (a log being
    // written may end inside an event, which binlog reports as damaged).
    sb.sql("FLUSH BINARY LOGS").unwrap();
    let binlog = data.join("binlog.000001").display().to_string();

    let conn = format!("-S {sock} -u root");
    let cases = [
        files(
            &format!("stacks --pid {pid} {conn} -o s.txt -o s.json -o s.folded -o s.svg -o s.dot -o s.pb.gz"),
            &["s.txt", "s.json", "s.folded", "s.svg", "s.dot", "s.pb.gz"],
            "# pileup stacks: pid",
        ),
        case(&format!("stacks --pid {pid} {conn} --json"), Reader::Json),
        files(
            &format!(
                "locks --pid {pid} {conn} --duration 2s -o l.txt -o l.json -o l.folded -o l.svg -o l.dot -o l.pb.gz"
            ),
            &["l.txt", "l.json", "l.folded", "l.svg", "l.dot", "l.pb.gz"],
            "pileup locks",
        ),
        case(&format!("locks --pid {pid} {conn} --duration 1s -f json"), Reader::Json),
        // 8 s: with sysbench beside it on two cores, attaching and the
        // first GROUP BY below can take most of 3 s, leaving no page touched.
        files(
            &format!(
                "memory --pid {pid} {conn} --duration 8s -o m.txt -o m.json -o m.folded -o m.svg -o m.dot -o m.pb.gz"
            ),
            &["m.txt", "m.json", "m.folded", "m.svg", "m.dot", "m.pb.gz"],
            "pileup memory",
        ),
        files(&format!("digest {slow_log} -o d.txt -o d.json -o d.html"), &["d.txt", "d.json", "d.html"], "# Profile, ranked by"),
        case(&format!("digest {slow_log} --json"), Reader::Json),
        case(&format!("binlog {binlog} --json"), Reader::JsonLines),
        case(&format!("binlog {binlog} --stats -f json"), Reader::Json),
        case(&format!("top --once {conn} --pid {pid} --json"), Reader::Json),
        // sysbench keeps 8 connections open: a capture to report on.
        case(
            &format!("watch --pid {pid} {conn} --duration 6s --data-dir {{}}/watch --json --trigger threads_connected~>~5~for~1s"),
            Reader::JsonLines,
        ),
        case("captures --data-dir {}/watch --json", Reader::Json),
        case(&format!("dump {conn} --databases shop -o {{}}/dump --json"), Reader::JsonLines),
        case(&format!("load {{}}/dump {conn} --rename shop:shop_copy --json"), Reader::JsonLines),
        // One short point of an experiment (its text on stdout beside the
        // file, as bench writes), and its comparison with itself.
        Case {
            stdout: Some(Reader::Text),
            ..files(
                &format!("bench hot-row {conn} --threads 1 --duration 1s --warmup 0s --rounds 1 --no-profile -o b.json"),
                &["b.json"],
                "",
            )
        },
        case("bench compare b.json b.json --json", Reader::Json),
        // Sandboxes under the scratch directory (PILEUP_SANDBOX_DIR).
        case("sandbox start consumers --json", Reader::Json),
        case("sandbox list --json", Reader::Json),
        case("sandbox stop consumers --json", Reader::Json),
        case("watch --list-metrics --json", Reader::Json),
    ];

    // Lock waits while the cases run.
    let mut load = sysbench_start("oltp_read_write", &base, 8, 300);
    let mut wrong = vec![];
    for (i, c) in cases.iter().enumerate() {
        let args: Vec<String> =
            c.args.iter().map(|a| a.replace("{}", dir.to_str().unwrap()).replace('~', " ")).collect();
        // memory's stacks are of pages first touched: GROUP BYs into
        // in-memory temporary tables, each larger than the one before, grow
        // the heap for as long as memory watches.
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hungry = (args[0] == "memory").then(|| {
            let (spec, done) = (sb.conn_spec(), done.clone());
            std::thread::spawn(move || -> Result<(), mysql::Error> {
                let mut c = spec.connect().expect("a connection for the GROUP BYs");
                c.query_drop("SET SESSION tmp_table_size = 1 << 30, max_heap_table_size = 1 << 30")?;
                let mut groups = 100_000;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    c.query_drop(format!(
                        "SELECT seq % {groups} AS k, COUNT(*) FROM shop.seq_1_to_3000000 GROUP BY k ORDER BY 2 DESC LIMIT 1"
                    ))?;
                    groups += 100_000;
                }
                Ok(())
            })
        });
        let out = Command::new(env!("CARGO_BIN_EXE_pileup"))
            .args(&args)
            .current_dir(&*dir)
            .env("PILEUP_SANDBOX_DIR", dir.join("sandboxes"))
            .stdin(Stdio::null())
            .output()
            .expect("running pileup");
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(Ok(Err(e))) = hungry.map(|h| h.join()) {
            wrong.push(format!("the GROUP BYs beside memory failed: {e}"));
        }
        if !out.status.success() {
            wrong.push(format!("{args:?}: exit {:?}: {}", out.status.code(), String::from_utf8_lossy(&out.stderr)));
            continue;
        }
        let stdout = dir.join(format!("stdout-{i}"));
        std::fs::write(&stdout, &out.stdout).unwrap();
        match c.stdout {
            Some(r) => {
                if let Err(e) = read(r, &stdout) {
                    wrong.push(format!("{args:?}: stdout read as {r:?}: {e}"));
                }
            }
            // With -o the result goes to the files, and nothing to stdout.
            None if !out.stdout.is_empty() => {
                wrong.push(format!("{args:?}: wrote to stdout: {}", String::from_utf8_lossy(&out.stdout)))
            }
            None => {}
        }
        for f in &c.files {
            let p = dir.join(f);
            if let Err(e) = read(Reader::of(&p), &p) {
                wrong.push(format!("{args:?}: {f} read as {:?}: {e}", Reader::of(&p)));
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            if Reader::of(&p) == Reader::Text && !text.contains(c.says) {
                wrong.push(format!("{args:?}: {f} does not say {:?}: {text}", c.says));
            }
        }
    }
    // The capture the watcher made, reported in every format report writes.
    let at = cases.iter().position(|c| c.args[0] == "captures").unwrap();
    let listed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(format!("stdout-{at}"))).unwrap_or_default())
            .unwrap_or_default();
    let capture = listed["captures"].as_array().and_then(|c| c.iter().find_map(|c| c["dir"].as_str()));
    match capture {
        None => wrong.push(format!("the watcher made no capture to report on: {listed}")),
        Some(capture) => {
            let [txt, json, html] = ["r.txt", "r.json", "r.html"].map(|f| dir.join(f).display().to_string());
            let out = pileup(&["report", capture, "-o", &txt, "-o", &json, "-o", &html]);
            for f in [txt, json, html] {
                let p = std::path::PathBuf::from(&f);
                if let Err(e) = read(Reader::of(&p), &p) {
                    wrong.push(format!(
                        "report {capture}: {f} read as {:?}: {e} ({})",
                        Reader::of(&p),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
        }
    }
    // The capture is whole (its marker is there); a copy that lost its
    // metrics, or its marker, is reported as damaged (exit 3), naming
    // what is missing.
    if let Some(c) = listed["captures"].as_array().and_then(|c| c.iter().find(|c| c["kind"] == "capture")) {
        if c["complete"] != true {
            wrong.push(format!("a capture the watcher finished is not complete: {c}"));
        }
        let copy = dir.join("damaged");
        let cp = Command::new("cp").args(["-r", c["dir"].as_str().unwrap(), copy.to_str().unwrap()]).status().unwrap();
        assert!(cp.success());
        for (gone, says) in [("metrics.json", "missing metrics.json"), ("complete.json", "cut short")] {
            std::fs::remove_file(copy.join(gone)).unwrap();
            let out = pileup(&["report", copy.to_str().unwrap()]);
            let err = String::from_utf8_lossy(&out.stderr);
            if out.status.code() != Some(3) || !err.contains(says) {
                wrong.push(format!("report on a capture without {gone}: exit {:?}: {err}", out.status.code()));
            }
        }
    }
    // The sandbox commands' results say what they did.
    let said = |args: &str| -> serde_json::Value {
        let at = cases.iter().position(|c| c.args.join(" ") == args).unwrap();
        serde_json::from_slice(&std::fs::read(dir.join(format!("stdout-{at}"))).unwrap_or_default()).unwrap_or_default()
    };
    let started = said("sandbox start consumers --json");
    if started["name"] != "consumers"
        || !started["socket"].as_str().is_some_and(|s| s.starts_with(dir.to_str().unwrap()))
    {
        wrong.push(format!("sandbox start --json: {started}"));
    }
    let listed = said("sandbox list --json");
    if !listed["sandboxes"]
        .as_array()
        .is_some_and(|l| l.iter().any(|s| s["sandbox"]["name"] == "consumers" && s["running"] == true))
    {
        wrong.push(format!("sandbox list --json: {listed}"));
    }
    if said("sandbox stop consumers --json")["stopped"] != serde_json::json!(["consumers"]) {
        wrong.push(format!("sandbox stop --json: {}", said("sandbox stop consumers --json")));
    }
    let compared = said("bench compare b.json b.json --json");
    let pairs = compared["pairs"].as_array().map_or(0, Vec::len);
    if compared["experiment"] != "hot-row" || pairs == 0 || compared["differences"] != serde_json::json!([]) {
        wrong.push(format!("bench compare --json: {compared}"));
    }
    // Whatever failed above, no sandbox of this test is left running.
    let _ = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["sandbox", "stop", "--all"])
        .env("PILEUP_SANDBOX_DIR", dir.join("sandboxes"))
        .output();
    let _ = load.kill();
    let _ = load.wait();
    assert!(wrong.is_empty(), "results their readers refused:\n{}", wrong.join("\n"));
}
