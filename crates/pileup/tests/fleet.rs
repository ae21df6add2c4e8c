//! The fleet's parts against real ones: a Prometheus that scrapes a live
//! `pileup watch` on a sandbox under load, with pileup's rules loaded and
//! its console templates served. Every expression in the rules and the
//! Grafana dashboards runs there; the consoles render; the stall alert
//! fires.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A child process killed when dropped, a failing test's too.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn agent() -> ureq::Agent {
    agent_for(Duration::from_secs(20))
}

/// An HTTP client that reads error statuses as answers.
fn agent_for(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().new_agent()
}

fn get(url: &str) -> (u16, String) {
    match agent().get(url).call() {
        Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

/// An instant query: Ok(result array) or Err(Prometheus's error).
fn query(prom: &str, q: &str) -> Result<Vec<serde_json::Value>, String> {
    let mut r = agent().get(format!("{prom}/api/v1/query")).query("query", q).call().map_err(|e| e.to_string())?;
    let text = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
    let body: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    if body["status"] != "success" {
        return Err(format!("{}: {}", body["errorType"], body["error"]));
    }
    Ok(body["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// Metric names (`pileup_…` and recording rules' `level:metric:op`) an
/// expression reads.
fn names_in(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
        if word(b[i]) && (i == 0 || !word(b[i - 1])) {
            let start = i;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            let w = &expr[start..i];
            // A name, not a label (followed by `=`, `!=`, `=~`) or a grouping label.
            let rest = expr[i..].trim_start();
            let label = rest.starts_with('=') || rest.starts_with("!=") || rest.starts_with("=~");
            if !label && (w.starts_with("pileup_") || w.matches(':').count() == 2) {
                out.insert(w.to_string());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The rules file's expressions: (what, expr) and the recording rules' names.
fn rule_exprs() -> (Vec<(String, String)>, BTreeSet<String>) {
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/pileup.rules.yml")).unwrap();
    // The file's shape is fixed (promtool checks it): `- record:` or
    // `- alert:` then `expr:`, on one line or as a `|` block.
    let (mut out, mut records) = (vec![], BTreeSet::new());
    let mut what = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim();
        if let Some(n) = t.strip_prefix("- record: ").or_else(|| t.strip_prefix("- alert: ")) {
            what = n.to_string();
            if t.starts_with("- record: ") {
                records.insert(n.to_string());
            }
        } else if let Some(e) = t.strip_prefix("expr: ") {
            if e == "|" {
                let indent = lines.peek().map(|n| n.len() - n.trim_start().len()).unwrap_or(0);
                let mut block = vec![];
                while let Some(n) = lines.peek() {
                    if n.trim().is_empty() || n.len() - n.trim_start().len() < indent {
                        break;
                    }
                    block.push(lines.next().unwrap().trim().to_string());
                }
                out.push((what.clone(), block.join(" ")));
            } else {
                out.push((what.clone(), e.to_string()));
            }
        }
    }
    (out, records)
}

/// Every `expr` and variable query in the Grafana dashboards.
fn dashboard_exprs() -> Vec<(String, String)> {
    fn walk(v: &serde_json::Value, at: &str, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) => {
                let here = m.get("title").and_then(|t| t.as_str()).map_or(at.to_string(), |t| format!("{at} / {t}"));
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("expr", serde_json::Value::String(e)) => out.push((here.clone(), e.clone())),
                        ("query", serde_json::Value::String(q)) if q.starts_with("label_values(") => {
                            // label_values(SELECTOR, label): the selector must select.
                            let inner = &q["label_values(".len()..q.rfind(',').unwrap()];
                            out.push((format!("{here} (variable)"), inner.to_string()));
                        }
                        _ => walk(x, &here, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, at, out)),
            _ => {}
        }
    }
    let mut out = vec![];
    for f in ["pileup-fleet.json", "pileup-server.json", "pileup-replication.json"] {
        let text = std::fs::read_to_string(repo().join("deploy/grafana").join(f)).unwrap();
        walk(&serde_json::from_str(&text).unwrap(), f, &mut out);
    }
    out
}

/// Every `pileup_` name the tools can expose: watch's derived metrics and
/// its own counters, and prefetch's.
fn exposable() -> BTreeSet<String> {
    let mut out: BTreeSet<String> =
        pileup_watch::derive::metric_names().into_iter().map(|n| pileup_watch::expo::exposed(&n).0).collect();
    for n in [
        "pileup_polls_total",
        "pileup_polls_failed_total",
        "pileup_captures_total",
        "pileup_last_poll_timestamp_seconds",
        "pileup_stalls_total",
        "pileup_last_capture_timestamp_seconds",
        "pileup_last_capture_info",
        "pileup_capture_timestamp_seconds",
    ] {
        out.insert(n.into());
    }
    for l in pileup_prefetch::Counters::default().exposition().lines() {
        if let Some(n) = l.strip_prefix("# TYPE ") {
            out.insert(n.split(' ').next().unwrap().to_string());
        }
    }
    out
}

/// `promtool check metrics` (Prometheus's own lint: HELP, base units,
/// counter names) reads `body` and has nothing to say.
fn promtool_finds_nothing_in(body: &str) {
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; make deps installs it)");
    std::io::Write::write_all(&mut p.stdin.take().unwrap(), body.as_bytes()).unwrap();
    let lint = p.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&lint.stdout), String::from_utf8_lossy(&lint.stderr));
    assert!(lint.status.success() && said.trim().is_empty(), "promtool check metrics:\n{said}\n{body}");
}

/// Every metric watch can expose (each derived metric, the shipping
/// gauges, a capture's series) and every prefetch counter passes promtool.
#[test]
fn every_exposition_passes_promtool() {
    use pileup_watch::expo::{render, LastCapture, Snapshot};
    let mut s = Snapshot::default();
    for m in pileup_watch::derive::metric_names() {
        s.derived.insert(m, 1.0);
    }
    s.derived.insert("com_select_rate".into(), 1.0);
    s.ship_queued = Some(1);
    s.captured(LastCapture { unix: 1.0, class: "flushing storm".into(), verdict: "v".into(), url: "/d".into() });
    promtool_finds_nothing_in(&render(&s));
    promtool_finds_nothing_in(&pileup_prefetch::Counters::default().exposition());
}

/// `pileup watch --json` on a sandbox with `args` (`env` sets its
/// environment): the watcher, and its events other than polls on a channel.
fn watch_events(
    sb: &pileup_sandbox::Sandbox,
    data: &Path,
    args: &[&str],
    env: impl FnOnce(&mut Command),
) -> (Killed, std::sync::mpsc::Receiver<serde_json::Value>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
    cmd.args(["watch", "-S", sb.endpoint.socket.to_str().unwrap(), "-u", "root", "--pid", &sb.pid().to_string()])
        .args(["--data-dir", data.to_str().unwrap(), "--json"])
        // Captures are small; a CI disk may hold less than the default 1 GiB free.
        .args(if args.contains(&"--min-free-mib") { &[][..] } else { &["--min-free-mib", "128"][..] })
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    env(&mut cmd);
    let mut child = Killed(cmd.spawn().unwrap());
    let out = BufReader::new(child.0.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) {
                if v["event"] != "poll" && tx.send(v).is_err() {
                    return;
                }
            }
        }
    });
    (child, rx)
}

/// A real Prometheus on `port` with `config` (and pileup's consoles), its
/// data and log in `dir`.
fn prometheus(dir: &Path, port: u16, config: &str) -> Killed {
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!("--web.console.templates={}", repo().join("deploy/prometheus/consoles").display()))
            .arg(format!("--web.console.libraries={}", repo().join("deploy/prometheus/console_libraries").display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (make deps installs it)"),
    )
}

/// Where a watcher started with `--listen` serves.
fn listening(rx: &std::sync::mpsc::Receiver<serde_json::Value>) -> String {
    loop {
        let v = rx.recv_timeout(Duration::from_secs(20)).expect("watch says where it listens");
        if v["event"] == "listening" {
            return v["addr"].as_str().unwrap().to_string();
        }
    }
}

#[test]
fn every_rule_and_dashboard_expression_runs_on_a_live_prometheus_and_the_consoles_show_the_stall() {
    let sb = sandbox();
    let _load = Killed(sysbench(&sb, "oltp_read_only", 2, 120));
    let scratch = scratch("fleet");
    // A watcher whose trigger holds from the start: one capture, announced
    // to Prometheus.
    let args = ["--interval", "1s", "--listen", "127.0.0.1:0", "--trigger", "poll_ok > 0 for 3s"];
    let (_watch, rx) = watch_events(&sb, &scratch.join("watch"), &args, |_| {});
    let addr = listening(&rx);

    // Prometheus scraping it every second, the server's name as `instance`
    // (as mysqld_exporter's scrape would give it), pileup's rules loaded.
    let instance = format!("sandbox:{}", sb.endpoint.port);
    let prom_port = free_port();
    let prom = format!("http://127.0.0.1:{prom_port}");
    let rules = repo().join("deploy/prometheus/pileup.rules.yml");
    // mysqld_exporter beside it, scraped as job `mysql` with the same
    // `instance`: the two join on it.
    let exporter_port = free_port();
    let _exporter = Killed(
        Command::new("prometheus-mysqld-exporter")
            .arg(format!("--web.listen-address=127.0.0.1:{exporter_port}"))
            .env("DATA_SOURCE_NAME", format!("root@unix({})/", sb.endpoint.socket.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus-mysqld-exporter (make deps installs it)"),
    );
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: pileup\n    static_configs:\n      - targets: ['{addr}']\n        labels:\n          instance: '{instance}'\n  - job_name: mysql\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n        labels:\n          instance: '{instance}'\n",
        rules.display()
    );
    let _prometheus = prometheus(&scratch, prom_port, &config);

    // The capture is announced and the alert fires with its class.
    let t0 = Instant::now();
    let alert = loop {
        let firing = query(&prom, "ALERTS{alertname='MySQLStallCaptured', alertstate='firing'}").unwrap_or_default();
        if let Some(a) = firing.first() {
            break a["metric"].clone();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "MySQLStallCaptured never fired; Prometheus log: {}",
            std::fs::read_to_string(scratch.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(alert["instance"], instance.as_str(), "{alert}");
    assert_eq!(alert["job"], "pileup");
    assert_eq!(alert["severity"], "warning");
    let class = alert["class"].as_str().unwrap().to_string();
    assert!(!class.is_empty() && alert.get("url").is_none(), "the place is no label of the alert: {alert}");
    // The description of the last capture's class names its place, from
    // the last capture's info metric.
    let (status, alerts) = get(&format!("{prom}/api/v1/alerts"));
    assert_eq!(status, 200, "{alerts}");
    let listed: serde_json::Value = serde_json::from_str(&alerts).unwrap();
    let place = format!("The capture: {}", scratch.display());
    let named = listed["data"]["alerts"].as_array().unwrap().iter().any(|a| {
        a["labels"]["alertname"] == "MySQLStallCaptured"
            && a["annotations"]["description"].as_str().is_some_and(|d| d.contains(&place))
    });
    assert!(named, "no alert names the capture's place: {alerts}");
    // The read-workload group is evaluated every 30 s: wait for its
    // evaluations, then one more scrape.
    let t0 = Instant::now();
    // An increase needs two samples in its window: a first evaluation
    // just after Prometheus started may have had one, so wait for it too.
    for record in ["instance:pileup_rows_read_rate:avg5m", "job:pileup_stalls:increase1h"] {
        while query(&prom, record).unwrap_or_default().is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(75), "{record} was never evaluated");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    std::thread::sleep(Duration::from_secs(2));

    // Every expression: valid PromQL, and reading only names pileup
    // exposes or the rules record. One whose names are all in the live
    // scrape returns something (alerts excepted: they fire only on their
    // condition).
    let (rules, records) = rule_exprs();
    let boards = dashboard_exprs();
    assert!(rules.len() >= 20 && boards.len() >= 40, "{} rule and {} dashboard expressions", rules.len(), boards.len());
    let known: BTreeSet<String> = exposable().into_iter().chain(records.iter().cloned()).collect();
    let live: BTreeSet<String> = query(&prom, "{job='pileup'}")
        .unwrap()
        .iter()
        .filter_map(|s| s["metric"]["__name__"].as_str().map(String::from))
        .chain(records.iter().cloned())
        .collect();
    let mut failures = vec![];
    for (what, expr) in rules.iter().chain(&boards) {
        let unknown: Vec<_> = names_in(expr).into_iter().filter(|n| !known.contains(n)).collect();
        if !unknown.is_empty() {
            failures.push(format!("{what}: reads {unknown:?}, which nothing exposes: {expr}"));
            continue;
        }
        let q = expr
            .replace("$__rate_interval", "1m")
            .replace("$instance", &instance)
            .replace("$prefetch_job", ".*")
            .replace("$job", ".*");
        match query(&prom, &q) {
            Err(e) => failures.push(format!("{what}: {e}: {q}")),
            Ok(r) => {
                let alert = what.starts_with("MySQL");
                let all_live = names_in(expr).iter().all(|n| live.contains(n));
                if r.is_empty() && all_live && !alert {
                    failures.push(format!("{what}: no result on a live server: {q}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // pileup's series join mysqld_exporter's on `instance`.
    let joined =
        query(&prom, "pileup_threads_running * on (instance) group_left (version) mysql_version_info{job='mysql'}")
            .unwrap();
    assert_eq!(joined.len(), 1, "{joined:?}");
    assert!(joined[0]["metric"]["version"].as_str().is_some_and(|v| v.contains("MariaDB")), "{joined:?}");

    // The consoles: the fleet page lists the server with its last
    // capture's class (an alert fires per capture: the first may be of an
    // earlier one), the server's page shows it.
    let last = query(&prom, &format!("pileup_last_capture_info{{instance='{instance}'}}")).unwrap();
    let class = last[0]["metric"]["class"].as_str().unwrap().to_string();
    let (status, page) = get(&format!("{prom}/consoles/pileup-fleet.html"));
    assert_eq!(status, 200, "{page}");
    let shown = |page: &str| page.contains(&class) || page.contains(&class.replace('_', " "));
    assert!(page.contains(&instance) && shown(&page), "{class}: {page}");
    assert!(page.contains("MySQLStallCaptured"), "the firing alert is listed: {page}");
    let server_page = format!("{prom}/consoles/pileup-server.html?instance={instance}");
    let (status, page) = get(&server_page);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(&format!("<b>{class}</b>")) || page.contains(&format!("<b>{}</b>", class.replace('_', " "))),
        "{class}: {page}"
    );
    // And in a real browser: it renders, its scripts raise no error.
    let (console, png) = chromium_screenshot_url(&server_page, &scratch);
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a screenshot of {} bytes", png.len());
    let errors: Vec<_> = console.iter().filter(|l| l.contains("Error") || l.contains("error")).collect();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn expression_names_are_read_as_metrics_not_labels() {
    let n = names_in(
        "instance:pileup_rows_read_rate:avg5m / (x > 0) and on (job, instance) pileup_prefetch_state{job=~\"$job\", instance=\"a\"} >= 2",
    );
    assert_eq!(
        n.into_iter().collect::<Vec<_>>(),
        vec!["instance:pileup_rows_read_rate:avg5m".to_string(), "pileup_prefetch_state".to_string()]
    );
}

/// VersityGW, a real S3 server, on a directory of buckets.
struct S3 {
    child: Option<Killed>,
    port: u16,
    root: PathBuf,
}

const S3_KEY: &str = "pileupkey";
const S3_SECRET: &str = "pileup-secret-123";

fn versitygw() -> PathBuf {
    let in_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("versitygw"))
        .find(|p| p.exists());
    in_path.unwrap_or_else(|| {
        let gopath = Command::new("go").args(["env", "GOPATH"]).output().expect("go (make deps installs it)");
        let p = PathBuf::from(String::from_utf8_lossy(&gopath.stdout).trim()).join("bin/versitygw");
        assert!(p.exists(), "versitygw is not installed: `make deps` installs it with go install");
        p
    })
}

impl S3 {
    fn start(root: &Path, port: u16) -> S3 {
        std::fs::create_dir_all(root.join("captures")).unwrap();
        let mut s = S3 { child: None, port, root: root.to_path_buf() };
        s.restart();
        s
    }

    fn restart(&mut self) {
        let child = Command::new(versitygw())
            .args(["--port", &format!("127.0.0.1:{}", self.port), "posix", self.root.to_str().unwrap()])
            .env("ROOT_ACCESS_KEY", S3_KEY)
            .env("ROOT_SECRET_KEY", S3_SECRET)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(Killed(child));
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "versitygw did not listen");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn stop(&mut self) {
        self.child = None;
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// pileup with the store's credentials in the environment, as the AWS CLI
/// takes them.
fn with_store(cmd: &mut Command, s3: &S3, secret: &str) {
    cmd.env("AWS_ACCESS_KEY_ID", S3_KEY)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_ENDPOINT_URL", s3.endpoint())
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_PROFILE")
        .env("HOME", "/nonexistent");
}

/// A watcher shipping its captures; its JSON events on a channel.
fn shipping_watch(
    sb: &pileup_sandbox::Sandbox,
    data: &Path,
    s3: &S3,
    secret: &str,
) -> (Killed, std::sync::mpsc::Receiver<serde_json::Value>) {
    let args = ["--interval", "500ms", "--cooldown", "2s", "--trigger", "threads_connected > 6 for 1s"];
    let ship = ["--ship", "s3://captures/fleet", "--ship-host", "db1"];
    watch_events(sb, data, &[&args[..], &ship[..]].concat(), |cmd| with_store(cmd, s3, secret))
}

/// A capture on demand: ten idle connections make the watcher's trigger
/// (`threads_connected > 6`) hold until the capture is written.
fn provoke(sb: &pileup_sandbox::Sandbox, rx: &std::sync::mpsc::Receiver<serde_json::Value>) -> serde_json::Value {
    let opts = mysql::OptsBuilder::new().socket(sb.endpoint.socket.to_str()).user(Some("root"));
    let conns: Vec<mysql::Conn> = (0..10).map(|_| mysql::Conn::new(opts.clone()).unwrap()).collect();
    let t0 = Instant::now();
    let captured = loop {
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(200)) {
            if v["event"] == "captured" {
                break v;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no capture in 60 s");
    };
    drop(conns);
    captured
}

fn next_ship(rx: &std::sync::mpsc::Receiver<serde_json::Value>, kind: &str, within: Duration) -> serde_json::Value {
    let t0 = Instant::now();
    let mut seen = vec![];
    while t0.elapsed() < within {
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(200)) {
            if v["event"] == "ship" && v["ship"] == kind {
                return v;
            }
            seen.push(v);
        }
    }
    panic!("no {kind} ship event in {within:?}; saw {seen:?}")
}

fn files_of(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        // report.html is rebuilt where the capture is opened.
        if p.is_file() && p.file_name().unwrap() != "report.html" {
            out.insert(p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap());
        }
    }
    out
}

#[test]
fn captures_ship_intact_to_a_real_s3_store_and_wait_on_disk_while_it_is_down() {
    let sb = sandbox();
    let scratch = scratch("ship");
    let mut s3 = S3::start(&scratch.join("s3"), free_port());
    let data = scratch.join("watch");
    let (_watch, rx) = shipping_watch(&sb, &data, &s3, S3_SECRET);

    // The first capture arrives with its metadata.
    let captured = provoke(&sb, &rx);
    let shipped = next_ship(&rx, "shipped", Duration::from_secs(60));
    let url = shipped["url"].as_str().unwrap().to_string();
    let local = PathBuf::from(shipped["capture_dir"].as_str().unwrap());
    let name = local.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(url, format!("s3://captures/fleet/db1/{name}.tar.zst"));
    let mut list = Command::new(env!("CARGO_BIN_EXE_pileup"));
    list.args(["captures", "--from", "s3://captures/fleet", "--json"]);
    with_store(&mut list, &s3, S3_SECRET);
    let out = list.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = listed["captures"].as_array().unwrap().iter().find(|c| c["url"] == url.as_str()).expect("listed");
    assert_eq!(entry["host"], "db1");
    assert_eq!(entry["class"], "unclassified");
    // The verdict as watch gave it (what the threads were doing varies).
    assert_eq!(entry["verdict"], captured["verdict"], "{entry}");
    assert!(entry["verdict"].as_str().unwrap().contains("culprit found"), "{entry}");
    assert_eq!(entry["sha256"].as_str().unwrap().len(), 64);

    // Intact: fetched, checked against its SHA-256, unpacked, opened; every
    // file as watch wrote it.
    let mut report = Command::new(env!("CARGO_BIN_EXE_pileup"));
    report.args(["report", &url, "--to", scratch.join("fetched").to_str().unwrap()]);
    with_store(&mut report, &s3, S3_SECRET);
    let out = report.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fetched = scratch.join("fetched").join(&name);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), fetched.join("report.html").display().to_string());
    assert_eq!(files_of(&fetched), files_of(&local));
    assert!(files_of(&local).contains_key("evidence.json"));

    // The store goes down: the next capture waits on local disk, the
    // failure is told on one line, and it arrives once the store is back.
    s3.stop();
    std::thread::sleep(Duration::from_secs(3));
    provoke(&sb, &rx);
    let failed = next_ship(&rx, "failed", Duration::from_secs(60));
    let error = failed["error"].as_str().unwrap();
    assert!(!error.contains('\n') && error.contains("is the store up"), "{error}");
    let queued: Vec<_> = std::fs::read_dir(data.join("ship"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tar.zst"))
        .collect();
    assert!(!queued.is_empty(), "the capture waits in DATA_DIR/ship");
    s3.restart();
    let t0 = Instant::now();
    loop {
        let v = next_ship(&rx, "shipped", Duration::from_secs(90));
        let n = PathBuf::from(v["capture_dir"].as_str().unwrap()).file_name().unwrap().to_string_lossy().into_owned();
        if queued.contains(&format!("{n}.tar.zst")) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(90));
    }
    // In the store, and no longer queued.
    assert!(s3.root.join("captures/fleet/db1").join(&queued[0]).exists());
    assert!(!data.join("ship").join(&queued[0]).exists());
}

#[test]
fn wrong_credentials_are_one_line_and_the_capture_is_kept() {
    let sb = sandbox();
    let scratch = scratch("ship-denied");
    let s3 = S3::start(&scratch.join("s3"), free_port());
    let data = scratch.join("watch");
    let (_watch, rx) = shipping_watch(&sb, &data, &s3, "not-the-secret");
    provoke(&sb, &rx);
    let failed = next_ship(&rx, "failed", Duration::from_secs(60));
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "s3://captures/fleet: the store refused the credentials (403 Forbidden, SignatureDoesNotMatch"
        ) && error.ends_with("check AWS_ACCESS_KEY_ID / AWS_PROFILE")
            && !error.contains('\n'),
        "{error}"
    );
    let kept = std::fs::read_dir(data.join("ship")).unwrap().filter_map(|e| e.ok()).count();
    assert!(kept >= 2, "the archive and its state wait in DATA_DIR/ship");
    assert!(std::fs::read_dir(data.join("captures")).unwrap().count() >= 1, "the capture itself stays");
    // And captures --from says the same, exit status 1.
    let mut list = Command::new(env!("CARGO_BIN_EXE_pileup"));
    list.args(["captures", "--from", "s3://captures/fleet"]);
    with_store(&mut list, &s3, "not-the-secret");
    let out = list.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("the store refused the credentials"), "{err}");
}

#[test]
fn a_large_capture_s_upload_goes_on_where_it_stopped() {
    use pileup_store::remote::{Remote, PART_SIZE};
    use pileup_store::spool::Spool;
    let scratch = scratch("ship-resume");
    let s3 = S3::start(&scratch.join("s3"), free_port());
    // A capture that does not compress: three parts.
    let cap = scratch.join("20261128-060000-big");
    std::fs::create_dir_all(&cap).unwrap();
    std::fs::write(cap.join("evidence.json"), "{}").unwrap();
    // Written whole: its completion marker last.
    std::fs::write(cap.join(pileup_store::COMPLETE), r#"{"files":["evidence.json","stacks.json"]}"#).unwrap();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let noise: Vec<u8> = (0..(2 * PART_SIZE + (PART_SIZE / 2)))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(cap.join("stacks.json"), &noise).unwrap();
    let aws = pileup_store::AwsSettings {
        access_key_id: S3_KEY.into(),
        secret_access_key: S3_SECRET.into(),
        region: "us-east-1".into(),
        endpoint: Some(s3.endpoint()),
        ..Default::default()
    };
    let url = pileup_store::StoreUrl::parse("s3://captures/resume").unwrap();
    let key = url.key("db1/20261128-060000-big.tar.zst");
    let spool_dir = scratch.join("ship");
    {
        let spool = Spool::open(&spool_dir).unwrap();
        let mut q = spool.enqueue(&cap, key.clone(), 1.0, Default::default(), 0).unwrap();
        assert!(q.size > 2 * PART_SIZE, "{} bytes", q.size);
        let remote = Remote::open(&url, &aws).unwrap();
        // Start, and one part: then the process "stops".
        assert_eq!(remote.upload_step(&spool, &mut q).unwrap(), None);
        assert_eq!(remote.upload_step(&spool, &mut q).unwrap(), None);
        assert_eq!(q.upload.as_ref().unwrap().parts.len(), 1);
    }
    // A new run picks the queue up from disk and goes on from part 2.
    let spool = Spool::open(&spool_dir).unwrap();
    let mut q = spool.pending().unwrap().pop().unwrap();
    assert_eq!(q.upload.as_ref().unwrap().parts.len(), 1);
    let remote = Remote::open(&url, &aws).unwrap();
    let mut steps = 0;
    let got = loop {
        steps += 1;
        if let Some(u) = remote.upload_step(&spool, &mut q).unwrap() {
            break u;
        }
    };
    assert_eq!(steps, 3, "two parts and the completion");
    spool.done(&q).unwrap();
    assert_eq!(got, format!("s3://captures/{key}"));
    let back = remote.fetch(&got, &scratch.join("fetched")).unwrap();
    assert_eq!(std::fs::read(back.join("stacks.json")).unwrap(), noise);
}

/// A profile pulled in the background: its status and body (status 0
/// when the connection failed). A 200 must be `application/octet-stream`.
fn pull(url: &str) -> std::thread::JoinHandle<(u16, Vec<u8>)> {
    let url = url.to_string();
    std::thread::spawn(move || {
        let Ok(mut r) = agent_for(Duration::from_secs(90)).get(&url).call() else { return (0, vec![]) };
        let status = r.status().as_u16();
        if status == 200 {
            let ct = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
            assert_eq!(ct.as_deref(), Some("application/octet-stream"), "{url}");
        }
        (status, r.body_mut().with_config().limit(64 << 20).read_to_vec().unwrap_or_default())
    })
}

/// Wait up to 10 s for the kernel's count of eBPF programs called `name`
/// to meet `ok`.
fn programs_until(name: &str, what: &str, ok: impl Fn(usize) -> bool) {
    let t = Instant::now();
    while !ok(programs_named(name)) {
        assert!(t.elapsed() < Duration::from_secs(10), "{what}: {} `{name}` programs loaded", programs_named(name));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn go_tool_pprof_reads_the_server_s_profile_pulled_from_watch() {
    let sb = sandbox();
    let _load = Killed(sysbench(&sb, "oltp_read_only", 2, 60));
    let scratch = scratch("pprof");
    let (_watch, rx) =
        watch_events(&sb, &scratch.join("watch"), &["--listen", "127.0.0.1:0", "--listen-profiles"], |_| {});
    let addr = listening(&rx);
    let base = format!("http://{addr}");
    let pull = pull(&format!("{base}/debug/pprof/profile?seconds=3"));
    std::thread::sleep(Duration::from_millis(500));
    // One profile at a time; the metrics are served meanwhile.
    let (status, body) = get(&format!("{base}/debug/pprof/profile?seconds=1"));
    assert_eq!(status, 429, "{body}");
    let t0 = Instant::now();
    let (status, body) = get(&format!("{base}/metrics"));
    assert!(status == 200 && body.contains("pileup_polls_total"), "{body}");
    assert!(t0.elapsed() < Duration::from_secs(1), "a scrape waited for the profile");
    // A live exposition, every metric of a running server's, passes
    // Prometheus's own lint.
    promtool_finds_nothing_in(&body);
    assert!(body.contains("\npileup_poll_cost_seconds "), "{body}");
    let (status, body) = get(&format!("{base}/debug/pprof/profile?seconds=600"));
    assert_eq!(status, 400, "{body}");
    let (status, bytes) = pull.join().unwrap();
    assert_eq!(status, 200);
    assert!(bytes.starts_with(&[0x1f, 0x8b]), "gzipped");
    let file = scratch.join("profile.pb.gz");
    std::fs::write(&file, &bytes).unwrap();
    // go tool pprof reads it: the server's binary, its threads' stacks
    // through the statement path.
    let top = Command::new("go").args(["tool", "pprof", "-top", "-cum"]).arg(&file).output().expect("go (make deps)");
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(top.status.success(), "{}", String::from_utf8_lossy(&top.stderr));
    assert!(text.contains("File: mariadbd"), "{text}");
    assert!(text.contains("do_command") || text.contains("dispatch_command"), "{text}");
    let total: u64 = text
        .lines()
        .find_map(|l| l.split("Total samples = ").nth(1))
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    assert!(total >= 20, "{text}");
}

#[test]
fn go_tool_pprof_reads_the_lock_waits_pulled_from_watch_and_no_probe_outlives_them() {
    let sb = sandbox();
    // SHOW GLOBAL VARIABLES holds LOCK_global_system_variables while it
    // copies every variable: a dozen connections queue on it.
    let (go, handles) = storm(&sb, 12, "SHOW GLOBAL VARIABLES");
    let scratch = scratch("pprof-locks");
    let before = programs_named("futex_switch");
    let (mut watch, rx) =
        watch_events(&sb, &scratch.join("watch"), &["--listen", "127.0.0.1:0", "--listen-profiles"], |_| {});
    let base = format!("http://{}", listening(&rx));
    let locks = pull(&format!("{base}/debug/pprof/locks?seconds=3"));
    programs_until("futex_switch", "the lock probe attaches", |n| n > before);
    // One profile per client at a time, of either kind; the metrics are
    // served meanwhile.
    let (status, body) = get(&format!("{base}/debug/pprof/locks?seconds=1"));
    assert_eq!(status, 429, "{body}");
    let (status, body) = get(&format!("{base}/debug/pprof/profile?seconds=1"));
    assert!(status == 429 && body.contains("one at a time per client"), "{status} {body}");
    let (status, body) = get(&format!("{base}/metrics"));
    assert!(status == 200 && body.contains("pileup_polls_total"), "{body}");
    let (status, bytes) = locks.join().unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert!(bytes.starts_with(&[0x1f, 0x8b]), "gzipped");
    // The probe is detached once the profile is made.
    programs_until("futex_switch", "the lock probe is detached after the profile", |n| n == before);
    let file = scratch.join("locks.pb.gz");
    std::fs::write(&file, &bytes).unwrap();
    // go tool pprof reads it: time waited per stack, the mutex as the
    // leaf, under the statement's code.
    let raw = Command::new("go").args(["tool", "pprof", "-raw"]).arg(&file).output().expect("go (make deps)");
    let text = String::from_utf8_lossy(&raw.stdout);
    assert!(raw.status.success(), "{}", String::from_utf8_lossy(&raw.stderr));
    assert!(text.contains("wait/microseconds") && text.contains("waits/count"), "{text}");
    assert!(text.contains("[pthread mutex: LOCK_global_system_variables]"), "{text}");
    assert!(text.contains("fill_variables"), "{text}");
    // A watcher killed while it traces takes the probe with it.
    let pending = pull(&format!("{base}/debug/pprof/locks?seconds=30"));
    programs_until("futex_switch", "the lock probe attaches again", |n| n > before);
    let pid = nix::unistd::Pid::from_raw(watch.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    watch.0.wait().unwrap();
    programs_until("futex_switch", "eBPF programs loaded 10 s after SIGKILL", |n| n == before);
    assert_eq!(pending.join().unwrap().0, 0, "no answer from a killed watcher");
    assert!(stop(go, handles) > 100, "the storm ran");
}

#[test]
fn the_fleet_demo_s_alert_fires_within_30_s_of_the_stall() {
    let out = scratch("demo-fleet");
    let run = Command::new("bash")
        .arg(repo().join("scripts/demo-fleet.sh"))
        .arg(out.join("demo"))
        .env("PILEUP", env!("CARGO_BIN_EXE_pileup"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{text}\n{}", String::from_utf8_lossy(&run.stderr));
    let secs: f64 = std::fs::read_to_string(out.join("demo/alert-seconds.txt")).unwrap().trim().parse().unwrap();
    assert!(secs <= 30.0, "{secs} s");
    let png = std::fs::read(out.join("demo/fleet-console.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000);
    assert!(text.contains("row lock convoy"), "{text}");
}

/// A server restarted under `watch --listen`, down for seconds: watch says
/// in one event that it follows the new process, and the process's metrics
/// and the profiles come back from it.
#[test]
fn watch_follows_a_restarted_server_and_its_metrics_and_profiles_come_back() {
    let mut sb = sandbox();
    let scratch = scratch("restart-follow");
    let (_watch, rx) = watch_events(
        &sb,
        &scratch.join("watch"),
        &["--listen", "127.0.0.1:0", "--listen-profiles", "--interval", "200ms"],
        |_| {},
    );
    let base = format!("http://{}", listening(&rx));
    let rss_served = |within: Duration| {
        let t0 = Instant::now();
        loop {
            let (status, body) = get(&format!("{base}/metrics"));
            if status == 200 && body.contains("\npileup_mysqld_rss_bytes ") {
                return true;
            }
            if t0.elapsed() > within {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    assert!(rss_served(Duration::from_secs(10)), "the server process's metrics before the restart");
    let old = sb.pid();
    sb.restart_after(Duration::from_secs(3)).unwrap();
    let new = sb.pid();
    assert_ne!(old, new);
    let t0 = Instant::now();
    let moved = loop {
        let v = rx.recv_timeout(Duration::from_secs(30)).expect("watch goes on after the restart");
        if v["event"] == "server_restarted" {
            break v;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no server_restarted event");
    };
    assert_eq!((moved["old_pid"].as_u64(), moved["new_pid"].as_u64()), (Some(old as u64), Some(new as u64)));
    assert!(rss_served(Duration::from_secs(10)), "the new process's metrics");
    let (status, body) = get(&format!("{base}/debug/pprof/profile?seconds=1"));
    assert_eq!(status, 200, "a profile of the new process: {body}");
}

/// A self-signed certificate for 127.0.0.1 (openssl): (cert, key).
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=pileup-test", "-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (make deps installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (cert, key)
}

/// curl's answer: (status, body); status 0 when no HTTP answer came.
fn curl(args: &[&str]) -> (u16, String) {
    let out =
        Command::new("curl").args(["-s", "-w", "\n%{http_code}", "--max-time", "20"]).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// `--listen` secured as exporters are: with a web configuration holding
/// TLS and basic auth, curl and a Prometheus scraping over TLS reach the
/// metrics only with the password; profiles on an address other hosts
/// reach are served only so; a new password in the file counts without a
/// restart; plain HTTP to the TLS port gets nothing.
#[test]
fn listen_with_tls_and_basic_auth_serves_curl_and_prometheus_and_rereads_its_file() {
    let sb = sandbox();
    let scratch = scratch("listen-tls");
    let (cert, _key) = self_signed(&scratch);
    let web = scratch.join("web.yml");
    let users = |pass: &str| format!("basic_auth_users:\n  prom: '{}'\n", bcrypt::hash(pass, 4).unwrap());
    let tls = "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n";
    std::fs::write(&web, format!("{tls}{}", users("s3cret"))).unwrap();
    let args = ["--listen", "0.0.0.0:0", "--listen-profiles", "--web.config.file", web.to_str().unwrap()];
    let (_watch, rx) = watch_events(&sb, &scratch.join("watch"), &args, |_| {});
    let port = listening(&rx).rsplit_once(':').unwrap().1.to_string();
    let base = format!("https://127.0.0.1:{port}");
    let ca = cert.to_str().unwrap();
    let (status, _) = curl(&["--cacert", ca, &format!("{base}/metrics")]);
    assert_eq!(status, 401, "no password");
    let (status, _) = curl(&["--cacert", ca, "-u", "prom:wrong", &format!("{base}/metrics")]);
    assert_eq!(status, 401, "a wrong password");
    let (status, body) = curl(&["--cacert", ca, "-u", "prom:s3cret", &format!("{base}/metrics")]);
    assert!(status == 200 && body.contains("pileup_polls_total"), "{status} {body}");
    let (status, _) = curl(&[&format!("http://127.0.0.1:{port}/metrics")]);
    assert_eq!(status, 0, "plain HTTP to the TLS port");
    // Profiles, on an address other hosts reach: served with TLS and auth.
    let (status, _) = curl(&[
        "--cacert",
        ca,
        "-u",
        "prom:s3cret",
        "-o",
        "/dev/null",
        &format!("{base}/debug/pprof/profile?seconds=1"),
    ]);
    assert_eq!(status, 200);
    // Prometheus scraping over TLS with basic auth.
    let prom_port = free_port();
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: pileup\n    scheme: https\n    tls_config:\n      ca_file: {ca}\n    basic_auth:\n      username: prom\n      password: s3cret\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    );
    let _prometheus = prometheus(&scratch, prom_port, &config);
    let prom = format!("http://127.0.0.1:{prom_port}");
    let t0 = Instant::now();
    loop {
        let up = query(&prom, "up{job='pileup'}").unwrap_or_default();
        if up.first().is_some_and(|u| u["value"][1] == "1") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "Prometheus never scraped pileup over TLS: {up:?}; {}",
            std::fs::read_to_string(scratch.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // A new password, without a restart.
    std::fs::write(&web, format!("{tls}{}", users("n3w"))).unwrap();
    let t0 = Instant::now();
    while curl(&["--cacert", ca, "-u", "prom:n3w", &format!("{base}/metrics")]).0 != 200 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the new password never counted");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(curl(&["--cacert", ca, "-u", "prom:s3cret", &format!("{base}/metrics")]).0, 401, "the old one");
}

/// Profiles are off unless asked for, and on an address other hosts reach
/// they are not served without TLS and basic auth: 403 with the reason,
/// the metrics served all the same.
#[test]
fn profiles_are_off_unless_asked_and_refused_on_an_open_address_without_tls() {
    let sb = sandbox();
    let scratch = scratch("listen-open");
    let (_a, rx) = watch_events(&sb, &scratch.join("a"), &["--listen", "127.0.0.1:0"], |_| {});
    let base = format!("http://{}", listening(&rx));
    let (status, body) = get(&format!("{base}/debug/pprof/profile?seconds=1"));
    assert!(status == 403 && body.contains("--listen-profiles"), "{status} {body}");
    let (_b, rx) = watch_events(&sb, &scratch.join("b"), &["--listen", "0.0.0.0:0", "--listen-profiles"], |_| {});
    let told = loop {
        let v = rx.recv_timeout(Duration::from_secs(20)).expect("watch says where it listens");
        if v["event"] == "listening" {
            break v;
        }
    };
    assert!(told["profiles_refused"].as_str().unwrap_or("").contains("TLS and basic auth"), "{told}");
    let port = told["addr"].as_str().unwrap().rsplit_once(':').unwrap().1.to_string();
    let base = format!("http://127.0.0.1:{port}");
    let (status, body) = get(&format!("{base}/debug/pprof/profile?seconds=1"));
    assert!(status == 403 && body.contains("without TLS and basic auth"), "{status} {body}");
    let (status, body) = get(&format!("{base}/metrics"));
    assert!(status == 200 && body.contains("pileup_polls_total"), "{body}");
}

/// The ship queue on a disk with no room for an archive (a filesystem of
/// its own under DATA_DIR/ship, filled): the capture is written and kept on
/// local disk, the refusal is one line naming the queue and the fix,
/// nothing half-packed is left in the queue, watch goes on, and once there
/// is room the next capture ships.
#[test]
fn a_full_disk_under_the_ship_queue_keeps_the_capture_local_and_ships_once_there_is_room() {
    let sb = sandbox();
    let scratch = scratch("ship-full");
    let s3 = S3::start(&scratch.join("s3"), free_port());
    let fs = LoopFs::sized(32 << 20, "shipfull");
    let data = scratch.join("watch");
    std::fs::create_dir_all(&data).unwrap();
    std::os::unix::fs::symlink(&fs.mount, data.join("ship")).unwrap();
    let args = ["--interval", "500ms", "--cooldown", "2s", "--trigger", "threads_connected > 6 for 1s"];
    let ship = ["--ship", "s3://captures/fleet", "--ship-host", "db1", "--min-free-mib", "1"];
    let (mut watch, rx) =
        watch_events(&sb, &data, &[&args[..], &ship[..]].concat(), |cmd| with_store(cmd, &s3, S3_SECRET));
    // The queue works on that disk while it has room.
    provoke(&sb, &rx);
    next_ship(&rx, "shipped", Duration::from_secs(60));
    let filler = fs.fill();
    std::thread::sleep(Duration::from_secs(3));
    let captured = provoke(&sb, &rx);
    let refused = next_ship(&rx, "not_queued", Duration::from_secs(60));
    let error = refused["error"].as_str().unwrap();
    assert!(!error.contains('\n'), "{error}");
    assert!(error.contains("not queued for the store (the capture stays on local disk"), "{error}");
    assert!(error.contains("free space or lower --min-free-mib"), "{error}");
    assert!(error.starts_with(&data.join("ship").display().to_string()), "names the queue: {error}");
    let kept = PathBuf::from(refused["capture_dir"].as_str().unwrap());
    assert_eq!(captured["dir"].as_str().map(PathBuf::from), Some(kept.clone()), "{captured}");
    assert!(kept.join("evidence.json").is_file(), "the capture is kept on local disk");
    let queue: Vec<String> = std::fs::read_dir(data.join("ship"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "filler" && n != "lost+found")
        .collect();
    assert_eq!(queue, Vec::<String>::new(), "nothing half-packed in the queue");
    assert!(watch.0.try_wait().unwrap().is_none(), "watch goes on");
    // Room again: the next capture ships.
    std::fs::remove_file(&filler).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    provoke(&sb, &rx);
    let shipped = next_ship(&rx, "shipped", Duration::from_secs(60));
    assert_ne!(shipped["capture_dir"].as_str().map(PathBuf::from), Some(kept), "{shipped}");
}

/// Statements of a few classes, `n` of each, with varied literals (`tag`
/// names one class of this host's own).
fn workload(sb: &pileup_sandbox::Sandbox, n: u32, tag: &str) {
    use mysql::prelude::Queryable;
    let mut c = sb.connect().unwrap();
    c.query_drop("CREATE DATABASE IF NOT EXISTS w").unwrap();
    c.query_drop("CREATE TABLE IF NOT EXISTS w.t (id INT PRIMARY KEY, v INT, KEY (v))").unwrap();
    c.query_drop("INSERT IGNORE INTO w.t SELECT seq, seq % 97 FROM w.seq_1_to_2000").unwrap();
    for i in 0..n {
        let _: Vec<(i32,)> = c.query(format!("SELECT id FROM w.t WHERE id = {i}")).unwrap();
        let _: Vec<(i64,)> = c.query(format!("SELECT COUNT(*) FROM w.t WHERE v > {}", i % 50)).unwrap();
        let _: Vec<(i32,)> = c.query(format!("SELECT {i} AS {tag}")).unwrap();
    }
}

/// `pileup digest ARGS --format json` with the store's credentials, its
/// exit status, report and stderr.
fn digest_with_store(args: &[&str], s3: &S3) -> (Option<i32>, serde_json::Value, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
    cmd.arg("digest").args(args).args(["--format", "json"]);
    with_store(&mut cmd, s3, S3_SECRET);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    (out.status.code(), report, stderr)
}

/// Per fingerprint: count, statement time and rows examined.
fn sums(d: &serde_json::Value) -> std::collections::BTreeMap<String, (u64, f64, f64)> {
    let sum = |c: &serde_json::Value, a: &str| c["attributes"][a]["sum"].as_f64().unwrap_or(0.0);
    d["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let fp = c["fingerprint"].as_str().unwrap().to_string();
            (fp, (c["count"].as_u64().unwrap(), sum(c, "query_time"), sum(c, "rows_examined")))
        })
        .collect()
}

fn assert_same_classes(merged: &serde_json::Value, direct: &serde_json::Value) {
    let (m, d) = (sums(merged), sums(direct));
    assert_eq!(m.keys().collect::<Vec<_>>(), d.keys().collect::<Vec<_>>());
    for (fp, (count, time, examined)) in &d {
        let (mc, mt, me) = m[fp];
        assert_eq!(mc, *count, "{fp}");
        assert!((mt - time).abs() <= 1e-5 * time.max(1e-3), "{fp}: {mt} against {time}");
        assert_eq!(me, *examined, "{fp}");
    }
}

#[test]
fn two_hosts_digests_ship_while_the_store_is_down_and_merge_equal_to_one_digest_of_both_logs() {
    let scratch = scratch("digest-ship");
    let (a_log, b_log) = (scratch.join("a.log"), scratch.join("b.log"));
    {
        let sb = slow_logging(&a_log);
        workload(&sb, 300, "host_a");
        use mysql::prelude::Queryable;
        let mut c = sb.connect().unwrap();
        c.query_drop(format!("SET GLOBAL slow_query_log_file = '{}'", b_log.display())).unwrap();
        drop(c);
        workload(&sb, 200, "host_b");
        sb.sql("SET GLOBAL slow_query_log = OFF").unwrap();
    }
    // Three hours back, so that their hours have ended and can be
    // compacted.
    for log in [&a_log, &b_log] {
        shift(log, -3 * 3600);
    }
    std::fs::create_dir_all(scratch.join("s3/digests")).unwrap();
    let mut s3 = S3::start(&scratch.join("s3"), free_port());
    let spool = scratch.join("spool");
    let ship = |log: &Path, host: &str, s3: &S3| {
        let spool = spool.to_str().unwrap();
        let args = [log.to_str().unwrap(), "--ship", "s3://digests/fleet", "--ship-host", host];
        let mut all = args.to_vec();
        all.extend(["--label", "env=test", "--spool-dir", spool, "--ship-wait", "5s", "--ship-window", "5"]);
        digest_with_store(&all, s3)
    };

    // The store is down: the report is written, the files wait in the
    // queue, and the run says so and fails.
    s3.stop();
    let (code, a_report, stderr) = ship(&a_log, "db-a", &s3);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("wait in") && stderr.contains("is the store up"), "{stderr}");
    let queued = std::fs::read_dir(&spool)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "parquet"))
        .count();
    assert!(queued >= 1, "{stderr}");
    assert!(a_report["events"].as_u64().unwrap() >= 900);

    // Back up: the next run ships its own windows and the queued ones.
    s3.restart();
    let (code, b_report, stderr) = ship(&b_log, "db-b", &s3);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("shipped"), "{stderr}");
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0, "the queue is empty");
    let stored: Vec<String> = walk(&scratch.join("s3/digests"));
    assert!(stored.iter().any(|k| k.contains("/host=db-a/db-a-")) && stored.iter().any(|k| k.contains("/host=db-b/")));
    assert!(
        stored.iter().all(|k| k.starts_with("fleet/dt=") && k.contains("/hour=") && k.ends_with("-5m.parquet")),
        "{stored:?}"
    );

    // Merged from the store: the same classes, counts and sums as one
    // digest of both logs, and each host's share.
    let (code, merged, stderr) = digest_with_store(&["--from", "s3://digests/fleet", "--since", "5h"], &s3);
    assert_eq!(code, Some(0), "{stderr}");
    let both = digest_json(&[a_log.to_str().unwrap(), b_log.to_str().unwrap()]);
    assert_same_classes(&merged, &both);
    assert_eq!(merged["events"], both["events"]);
    let hosts = merged["fleet"]["hosts"].as_array().unwrap();
    let host = |n: &str| hosts.iter().find(|h| h["host"] == n).unwrap_or_else(|| panic!("{n} in {hosts:?}")).clone();
    assert_eq!(host("db-a")["count"], a_report["events"]);
    assert_eq!(host("db-b")["count"], b_report["events"]);
    assert_eq!(host("db-a")["labels"]["env"], "test");
    let own = merged["classes"].as_array().unwrap().iter().find(|c| c["fingerprint"] == "select ? as host_a").unwrap();
    assert_eq!(own["servers"].as_array().unwrap().len(), 1);
    assert_eq!(own["servers"][0]["host"], "db-a");
    // The percentiles merged from stored histograms, within their bound
    // (a bucket is up to 6.25% of its values wide) of the log's own.
    for m in merged["classes"].as_array().unwrap() {
        let d = both["classes"].as_array().unwrap().iter().find(|d| d["fingerprint"] == m["fingerprint"]).unwrap();
        let (pm, pd) = (
            m["attributes"]["query_time"]["p99"].as_f64().unwrap(),
            d["attributes"]["query_time"]["p99"].as_f64().unwrap(),
        );
        assert!((pm - pd).abs() <= 0.05 * pd + 2e-6, "{}: p99 {pm} against {pd}", m["fingerprint"]);
    }

    // ClickHouse's engine (chDB), with deploy/'s queries on the same
    // files, gets the same answers.
    chdb_agrees(&s3, "fleet", &merged);
    the_profile_alone_is_chdbs_top_classes(&s3, "fleet", &merged);

    // One host, by glob; and a window with nothing in it.
    let (_, only_a, _) = digest_with_store(&["--from", "s3://digests/fleet", "--since", "5h", "--hosts", "db-a*"], &s3);
    assert_eq!(only_a["events"], a_report["events"]);
    assert_same_classes(&only_a, &a_report);
    let (code, none, stderr) =
        digest_with_store(&["--from", "s3://digests/fleet", "--since", "2d", "--until", "1d"], &s3);
    assert_eq!((code, none["events"].as_u64()), (Some(0), Some(0)), "{stderr}");
    assert!(stderr.contains("no rows"), "{stderr}");

    // Compacted: one file per hour, the windows gone, the same report
    // (percentiles too: the question holds whole hours); a window shipped
    // again later is held by the compacted file, not counted twice.
    let mut compact = Command::new(env!("CARGO_BIN_EXE_pileup"));
    compact.args(["digest", "--from", "s3://digests/fleet", "--compact", "--since", "6h", "--until", "2h"]);
    with_store(&mut compact, &s3, S3_SECRET);
    let out = compact.output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stderr).contains("compacted"), "{out:?}");
    let after = walk(&scratch.join("s3/digests"));
    let hours: BTreeSet<&str> = stored.iter().map(|k| &k[..k.find("/host=").unwrap()]).collect();
    let compacted = |k: &String| k.rsplit('/').next().unwrap().starts_with("compact-") && !k.contains("/host=");
    assert!(after.iter().all(compacted) && after.len() == hours.len(), "{after:?}");
    let (_, again, _) = digest_with_store(&["--from", "s3://digests/fleet", "--since", "5h"], &s3);
    assert_same_classes(&again, &both);
    let p99s = |r: &serde_json::Value| -> Vec<(String, f64)> {
        let classes = r["classes"].as_array().unwrap().iter();
        let mut v: Vec<(String, f64)> = classes
            .map(|c| {
                (c["fingerprint"].as_str().unwrap().to_string(), c["attributes"]["query_time"]["p99"].as_f64().unwrap())
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(p99s(&again), p99s(&merged), "the hour's histograms keep the percentiles of whole hours");
    let (code, _, stderr) = ship(&a_log, "db-a", &s3);
    assert_eq!(code, Some(0), "{stderr}");
    let (_, again, _) = digest_with_store(&["--from", "s3://digests/fleet", "--since", "5h"], &s3);
    assert_same_classes(&again, &both);
}

/// chDB's Python, as `make deps` installs it.
fn chdb_python() -> PathBuf {
    let p = PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pileup/chdb-venv/bin/python");
    assert!(p.exists(), "chDB is not installed: `make deps` installs it (python3 -m venv, pip install chdb)");
    p
}

/// Rows of a query of deploy/clickhouse/digests.sql run by chDB on the
/// files under `prefix`, over the last five hours.
fn chdb(s3: &S3, prefix: &str, name: &str) -> Vec<serde_json::Value> {
    let utc = |ago: i64| {
        let out =
            Command::new("date").args(["-u", "-d", &format!("@{}", now_unix() - ago), "+%F %T"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let source = format!("s3('{}/digests/{prefix}/**.parquet', '{S3_KEY}', '{S3_SECRET}', 'Parquet')", s3.endpoint());
    // The benchmark's runner: it also times the query, which is not looked at here.
    let out = Command::new(chdb_python())
        .arg(repo().join("bench/chdb-time.py"))
        .arg(repo().join("deploy/clickhouse/digests.sql"))
        .arg(name)
        .arg(format!("SOURCE={source}"))
        .arg(format!("SINCE={}", utc(5 * 3600)))
        .arg(format!("UNTIL={}", utc(-60)))
        .output()
        .unwrap();
    assert!(out.status.success(), "chDB, {name}: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["rows"].as_array().unwrap().clone()
}

fn now_unix() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// chDB's top classes, their hosts, each host's time and each class's p99
/// bucket are pileup's `merged` report's.
fn chdb_agrees(s3: &S3, prefix: &str, merged: &serde_json::Value) {
    let classes = merged["classes"].as_array().unwrap();
    let top = chdb(s3, prefix, "top_classes");
    assert_eq!(top.len(), classes.len().min(10));
    for (row, c) in top.iter().zip(classes) {
        assert_eq!(row["fingerprint"], c["fingerprint"], "{row} against {c}");
        assert_eq!(row["executions"].as_u64(), c["count"].as_u64(), "{row}");
        let (t, pt) = (row["time_s"].as_f64().unwrap(), c["attributes"]["query_time"]["sum"].as_f64().unwrap());
        assert!((t - pt).abs() <= 1e-5 * pt.max(1e-3), "{row}: pileup {pt}");
        assert_eq!(row["class_id"], c["id"]);
    }
    let class = |fp: &serde_json::Value| classes.iter().find(|c| c["fingerprint"] == *fp).unwrap().clone();
    for row in chdb(s3, prefix, "class_hosts") {
        let c = class(&row["fingerprint"]);
        let on = c["servers"].as_array().unwrap().iter().find(|s| s["host"] == row["host"]).unwrap().clone();
        assert_eq!(on["count"].as_u64(), row["executions"].as_u64(), "{row}");
    }
    let hosts = merged["fleet"]["hosts"].as_array().unwrap();
    let by_host = chdb(s3, prefix, "host_top");
    assert_eq!(by_host.len(), hosts.len());
    for row in by_host {
        let h = hosts.iter().find(|h| h["host"] == row["host"]).unwrap();
        assert_eq!(h["count"].as_u64(), row["executions"].as_u64(), "{row}");
    }
    for row in chdb(s3, prefix, "p99") {
        let low = row["p99_bucket_low_s"].as_f64().unwrap();
        let p99 = class(&row["fingerprint"])["attributes"]["query_time"]["p99"].as_f64().unwrap();
        // In the bucket chDB names: at most a sixteenth of its power of two above its low end.
        assert!(p99 >= low * 0.999 && p99 <= low * 1.0625 * 1.001, "{row}: pileup's p99 {p99}");
    }
}

/// `--profile-only` from the store: chDB's `top_classes` row for row
/// (executions, time, maximum, rows examined, hosts), in the whole
/// report's order, and a text profile with each class's hosts and no class
/// in detail.
fn the_profile_alone_is_chdbs_top_classes(s3: &S3, prefix: &str, merged: &serde_json::Value) {
    let url = format!("s3://digests/{prefix}");
    let (code, brief, stderr) = digest_with_store(&["--from", &url, "--since", "5h", "--profile-only"], s3);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(brief["profile_only"], true);
    let classes = brief["classes"].as_array().unwrap();
    let top = chdb(s3, prefix, "top_classes");
    assert_eq!(top.len(), classes.len().min(10));
    for ((row, c), whole) in top.iter().zip(classes).zip(merged["classes"].as_array().unwrap()) {
        assert_eq!(c["fingerprint"], whole["fingerprint"], "the whole report's order");
        assert_eq!(row["fingerprint"], c["fingerprint"], "{row} against {c}");
        assert_eq!(row["executions"].as_u64(), c["count"].as_u64(), "{row}");
        let qt = &c["attributes"]["query_time"];
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-5 * b.max(1e-3);
        assert!(close(row["time_s"].as_f64().unwrap(), qt["sum"].as_f64().unwrap()), "{row}: {qt}");
        assert!(close(row["max_s"].as_f64().unwrap(), qt["max"].as_f64().unwrap()), "{row}: {qt}");
        // No histogram read: a percentile is known only when every value is one.
        assert!(qt["p95"].is_null() || qt["min"] == qt["max"], "{qt}");
        let examined = c["attributes"]["rows_examined"]["sum"].as_f64().unwrap_or(0.0);
        assert_eq!(row["rows_examined"].as_f64(), Some(examined), "{row}");
        assert_eq!(row["hosts"].as_u64(), Some(c["servers"].as_array().unwrap().len() as u64), "{row}");
        assert!(c["attributes"].get("bytes_sent").is_none() && c["sample"]["query"] == "", "{c}");
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
    cmd.args(["digest", "--from", &url, "--since", "5h", "--profile-only", "--limit", "3"]);
    with_store(&mut cmd, s3, S3_SECRET);
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("Max  Exam/call  Hosts  Statement") && !text.contains("# Class 1:"), "{text}");
    assert!(text.contains("# Hosts: 2"), "{text}");
    // The HTML page is the whole report.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
    cmd.args(["digest", "--from", &url, "--profile-only", "-f", "html", "-o", "/dev/null"]);
    with_store(&mut cmd, s3, S3_SECRET);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--profile-only writes text or JSON") && err.lines().count() == 1, "{err}");
}

/// Move a slow log's statements `by` seconds in time (their `SET
/// timestamp=`, which is what pileup reads).
fn shift(log: &Path, by: i64) {
    let text = std::fs::read_to_string(log).unwrap();
    let moved: Vec<String> = text
        .lines()
        .map(|l| {
            match l.strip_prefix("SET timestamp=").and_then(|r| r.strip_suffix(';')).and_then(|n| n.parse::<i64>().ok())
            {
                Some(t) => format!("SET timestamp={};", t + by),
                None => l.to_string(),
            }
        })
        .collect();
    std::fs::write(log, moved.join("\n") + "\n").unwrap();
}

/// Keys of the Parquet files under `dir` (VersityGW keeps a bucket as a
/// directory), relative to it.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e.path().extension().is_some_and(|x| x == "parquet") {
                out.push(e.path().strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_followed_log_ships_each_window_once_complete_and_the_rest_when_stopped() {
    let scratch = scratch("digest-follow-ship");
    let log = scratch.join("slow.log");
    let sb = slow_logging(&log);
    std::fs::create_dir_all(scratch.join("s3/digests")).unwrap();
    let s3 = S3::start(&scratch.join("s3"), free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
    cmd.args(["digest", "--follow", log.to_str().unwrap(), "--format", "json", "--ship", "s3://digests/f"])
        .args(["--ship-host", "db-f", "--ship-window", "1", "--ship-grace", "0s"])
        .args(["--spool-dir", scratch.join("spool").to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    with_store(&mut cmd, &s3, S3_SECRET);
    let mut pileup = Killed(cmd.spawn().unwrap());
    workload(&sb, 50, "followed");
    // The minute the statements ran in ends, and its file arrives while
    // pileup goes on following.
    let t0 = Instant::now();
    while walk(&scratch.join("s3/digests")).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(100), "no window shipped while following");
        std::thread::sleep(Duration::from_millis(500));
    }
    let first = walk(&scratch.join("s3/digests"));
    workload(&sb, 20, "followed");
    std::thread::sleep(Duration::from_millis(1500));
    let child = &mut pileup.0;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut stdout = vec![];
    std::io::Read::read_to_end(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    let status = child.wait().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert!(status.success());
    let stored = walk(&scratch.join("s3/digests"));
    assert!(stored.len() > first.len(), "the last window shipped at the end: {first:?} then {stored:?}");
    let (_, merged, stderr) = digest_with_store(&["--from", "s3://digests/f", "--since", "1h"], &s3);
    assert_same_classes(&merged, &report);
    assert_eq!(merged["events"], report["events"], "{stderr}");
}

/// `pileup digest --follow LOG --ship …` until `late` is appended to
/// `log` and shipped as a late part: the report.
fn follow_until_a_late_part(log: &Path, late: &Path, store: &Path, ship_args: &[&str], s3: &S3) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
    cmd.args(["digest", "--follow", log.to_str().unwrap(), "--format", "json"])
        .args(ship_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    with_store(&mut cmd, s3, S3_SECRET);
    let started = std::time::SystemTime::now();
    let mut pileup = Killed(cmd.spawn().unwrap());
    let t0 = Instant::now();
    // A file ending so stored since the run began.
    let shipped = |suffix: &str| {
        walk(store).iter().any(|k| {
            let modified = std::fs::metadata(store.join(k)).and_then(|m| m.modified());
            k.ends_with(suffix) && modified.is_ok_and(|m| m >= started)
        })
    };
    // Its windows shipped (again): the log read to its end.
    while !shipped("-5m.parquet") {
        assert!(t0.elapsed() < Duration::from_secs(60), "no window shipped while following");
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_secs(1));
    // Statements of windows already shipped (a long statement is logged
    // when it ends, stamped with when it began): a part of their own.
    let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    std::io::Write::write_all(&mut f, &std::fs::read(late).unwrap()).unwrap();
    drop(f);
    while !shipped("m-2.parquet") {
        assert!(t0.elapsed() < Duration::from_secs(60), "no late part shipped: {:?}", walk(store));
        std::thread::sleep(Duration::from_millis(300));
    }
    let child = &mut pileup.0;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut stdout = vec![];
    std::io::Read::read_to_end(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert!(child.wait().unwrap().success());
    serde_json::from_slice(&stdout).unwrap()
}

#[test]
fn a_log_shipped_again_replaces_the_late_parts_an_earlier_run_shipped_unless_its_hour_is_compacted() {
    let scratch = scratch("digest-reship");
    let logs: Vec<PathBuf> =
        ["early", "late", "later", "latest"].iter().map(|n| scratch.join(format!("{n}.log"))).collect();
    {
        let sb = slow_logging(&logs[0]);
        workload(&sb, 40, "early");
        for (log, tag) in [(&logs[1], "late"), (&logs[2], "later"), (&logs[3], "latest")] {
            use mysql::prelude::Queryable;
            let mut c = sb.connect().unwrap();
            c.query_drop(format!("SET GLOBAL slow_query_log_file = '{}'", log.display())).unwrap();
            drop(c);
            workload(&sb, 20, tag);
        }
        sb.sql("SET GLOBAL slow_query_log = OFF").unwrap();
    }
    // Three hours back: the windows are closed by the clock as soon as the
    // reader is at the log's end, and their hour can be compacted.
    for f in &logs {
        shift(f, -3 * 3600);
    }
    let log = scratch.join("slow.log");
    std::fs::copy(&logs[0], &log).unwrap();
    std::fs::create_dir_all(scratch.join("s3/digests")).unwrap();
    let s3 = S3::start(&scratch.join("s3"), free_port());
    let store = scratch.join("s3/digests");
    let spool = scratch.join("spool");
    // A host name that is not one path segment as it is.
    let ship_args = [
        "--ship",
        "s3://digests/re",
        "--ship-host",
        "db-r:3307",
        "--ship-window",
        "5",
        "--ship-grace",
        "0s",
        "--spool-dir",
        spool.to_str().unwrap(),
    ];
    let followed = follow_until_a_late_part(&log, &logs[1], &store, &ship_args, &s3);
    let merged = |s3: &S3| digest_with_store(&["--from", "s3://digests/re", "--since", "5h"], s3).1;
    assert_same_classes(&merged(&s3), &followed);

    // The same log digested again (a restart, a re-run): each window's
    // file holds the late rows, and the late parts shipped before go.
    let mut again = vec![log.to_str().unwrap()];
    again.extend(ship_args);
    let (code, report, stderr) = digest_with_store(&again, &s3);
    assert_eq!(code, Some(0), "{stderr}");
    let stored = walk(&store);
    assert!(stored.iter().all(|k| k.ends_with("-5m.parquet")), "{stored:?}");
    assert_same_classes(&merged(&s3), &report);
    assert_eq!(merged(&s3)["events"], followed["events"], "each statement once");
    let (_, by_host, _) = digest_with_store(&["--from", "s3://digests/re", "--since", "5h", "--hosts", "db-r:*"], &s3);
    assert_eq!(by_host["events"], followed["events"], "the host's name as given");

    let compact = |hosts: Option<&str>| {
        let mut compact = Command::new(env!("CARGO_BIN_EXE_pileup"));
        compact.args(["digest", "--from", "s3://digests/re", "--compact", "--since", "6h", "--until", "2h"]);
        compact.args(hosts.map(|h| vec!["--hosts", h]).unwrap_or_default());
        with_store(&mut compact, &s3, S3_SECRET);
        let out = compact.output().unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    let db_r_parts = || walk(&store).into_iter().filter(|k| k.contains("db-r") && k.ends_with("m-2.parquet")).count();

    // Another host's windows of the hour compacted: db-r's are not in
    // that file, so its window shipped again still replaces its parts.
    let mut other = vec![logs[0].to_str().unwrap()];
    other.extend(ship_args);
    other[4] = "db-o";
    let (code, _, stderr) = digest_with_store(&other, &s3);
    assert_eq!(code, Some(0), "{stderr}");
    compact(Some("db-o"));
    let followed = follow_until_a_late_part(&log, &logs[2], &store, &ship_args, &s3);
    assert!(db_r_parts() >= 1);
    let (code, _, stderr) = digest_with_store(&again, &s3);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(db_r_parts(), 0, "{:?}", walk(&store));
    let (_, by_host, _) = digest_with_store(&["--from", "s3://digests/re", "--since", "5h", "--hosts", "db-r:*"], &s3);
    assert_eq!(by_host["events"], followed["events"], "each statement once");

    // The hour compacted with db-r's windows; then a late part comes (a
    // follow from the log's start, its windows held by the compacted hour
    // already), and the log is digested again: the late part stays, as
    // the compacted hour holds the earlier windows and readers keep that.
    compact(None);
    let followed = follow_until_a_late_part(&log, &logs[3], &store, &ship_args, &s3);
    let (code, _, stderr) = digest_with_store(&again, &s3);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(db_r_parts() >= 1, "{:?}", walk(&store));
    let (_, by_host, _) = digest_with_store(&["--from", "s3://digests/re", "--since", "5h", "--hosts", "db-r:*"], &s3);
    assert_eq!(by_host["events"], followed["events"], "each statement once");
}

#[test]
fn performance_schema_ships_minute_by_minute_with_counts_and_sums_and_reads_on_after_a_restart() {
    let scratch = scratch("digest-ps-ship");
    let mut sb = sandbox_with(vec![("performance_schema", "ON")]);
    std::fs::create_dir_all(scratch.join("s3/digests")).unwrap();
    let s3 = S3::start(&scratch.join("s3"), free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
    cmd.args(["digest", "--server", "--follow", "-S", sb.endpoint.socket.to_str().unwrap(), "-u", "root"])
        .args(["--format", "json", "--ship", "s3://digests/ps", "--ship-host", "db-p"])
        .args(["--ship-window", "1", "--ship-grace", "0s", "--spool-dir", scratch.join("spool").to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    with_store(&mut cmd, &s3, S3_SECRET);
    let mut pileup = Killed(cmd.spawn().unwrap());
    std::thread::sleep(Duration::from_secs(1));
    workload(&sb, 100, "ps_minutes");
    let t0 = Instant::now();
    while walk(&scratch.join("s3/digests")).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(100), "no minute shipped while reading");
        std::thread::sleep(Duration::from_millis(500));
    }
    workload(&sb, 30, "ps_minutes");
    let first = walk(&scratch.join("s3/digests")).len();
    while walk(&scratch.join("s3/digests")).len() == first {
        assert!(t0.elapsed() < Duration::from_secs(200), "the minute of the 30 statements was not shipped");
        std::thread::sleep(Duration::from_millis(500));
    }
    // The server restarts (its counters start again from nothing): pileup
    // reads on from a new first read, and says which minutes it lost.
    sb.restart().unwrap();
    std::thread::sleep(Duration::from_secs(4));
    workload(&sb, 20, "ps_after");
    let child = &mut pileup.0;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let (mut stdout, mut stderr) = (vec![], String::new());
    std::io::Read::read_to_end(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(child.wait().unwrap().success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert!(report["notes"].to_string().contains("performance_schema keeps sums"), "{}", report["notes"]);
    assert!(report["notes"].to_string().contains("the server was away from"), "{}", report["notes"]);
    assert!(stderr.contains("reading again once it answers"), "{stderr}");
    let (_, merged, _) = digest_with_store(&["--from", "s3://digests/ps", "--since", "1h"], &s3);
    assert_same_classes(&merged, &report);
    let tagged = merged["classes"].as_array().unwrap().iter().find(|c| c["fingerprint"] == "select ? as ps_minutes");
    assert_eq!(tagged.unwrap_or_else(|| panic!("{stderr}"))["count"], 130);
    let after = merged["classes"].as_array().unwrap().iter().find(|c| c["fingerprint"] == "select ? as ps_after");
    assert_eq!(after.unwrap_or_else(|| panic!("{stderr}"))["count"], 20, "read after the restart");
    // Sums only: no extremes, no histogram.
    assert!(tagged.unwrap()["attributes"]["query_time"]["max"].is_null(), "{}", tagged.unwrap());
    // Two runs one after the other within one window (an upgrade, a
    // restart of pileup): each keeps its own minutes, the second under a
    // name of its own beside the first's.
    let run = |tag: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
        cmd.args(["digest", "--server", "--follow", "-S", sb.endpoint.socket.to_str().unwrap(), "-u", "root"])
            .args(["--format", "json", "--ship", "s3://digests/ps60", "--ship-host", "db-p", "--ship-window", "60"])
            .args(["--spool-dir", scratch.join("spool").to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        with_store(&mut cmd, &s3, S3_SECRET);
        let mut pileup = Killed(cmd.spawn().unwrap());
        // Its first read of the counters (statements before it are not
        // the run's).
        std::thread::sleep(Duration::from_secs(2));
        workload(&sb, 10, tag);
        let child = &mut pileup.0;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(child.wait().unwrap().success(), "{err}");
    };
    run("ps_first");
    run("ps_second");
    let (_, merged, _) = digest_with_store(&["--from", "s3://digests/ps60", "--since", "2h"], &s3);
    for tag in ["ps_first", "ps_second"] {
        let fp = format!("select ? as {tag}");
        let c = merged["classes"].as_array().unwrap().iter().find(|c| c["fingerprint"] == fp.as_str());
        let names: Vec<&serde_json::Value> =
            merged["classes"].as_array().unwrap().iter().map(|c| &c["fingerprint"]).collect();
        assert_eq!(c.unwrap_or_else(|| panic!("{tag} not among {names:?}"))["count"], 10, "{tag}");
    }
}
