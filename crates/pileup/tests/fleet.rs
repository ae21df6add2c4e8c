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
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .new_agent()
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
        pileup_watch::derive::metric_names().into_iter().map(|n| format!("pileup_{n}")).collect();
    for n in [
        "pileup_polls_total",
        "pileup_polls_failed_total",
        "pileup_captures_total",
        "pileup_last_poll_timestamp_seconds",
        "pileup_stalls_total",
        "pileup_last_capture_timestamp_seconds",
        "pileup_last_capture_info",
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

#[test]
fn every_rule_and_dashboard_expression_runs_on_a_live_prometheus_and_the_consoles_show_the_stall() {
    let sb = sandbox();
    let _load = Killed(sysbench(&sb, "oltp_read_only", 2, 120));
    let scratch = scratch("fleet");
    // A watcher whose trigger holds from the start: one capture, announced
    // to Prometheus.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pileup"));
    cmd.args(["watch", "-S", sb.endpoint.socket.to_str().unwrap(), "-u", "root", "--pid", &sb.pid().to_string()])
        .args(["--data-dir", scratch.join("watch").to_str().unwrap(), "--json", "--interval", "1s"])
        .args(["--listen", "127.0.0.1:0", "--trigger", "poll_ok > 0 for 3s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut watch = Killed(cmd.spawn().unwrap());
    let out = BufReader::new(watch.0.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&l) {
                let _ = tx.send(v);
            }
        }
    });
    let addr = loop {
        let v = rx.recv_timeout(Duration::from_secs(20)).expect("watch says where it listens");
        if v["event"] == "listening" {
            break v["addr"].as_str().unwrap().to_string();
        }
    };

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
    std::fs::write(scratch.join("prometheus.yml"), config).unwrap();
    let _prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", scratch.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", scratch.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .arg(format!("--web.console.templates={}", repo().join("deploy/prometheus/consoles").display()))
            .arg(format!("--web.console.libraries={}", repo().join("deploy/prometheus/console_libraries").display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(scratch.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (make deps installs it)"),
    );

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
    assert!(!class.is_empty() && alert["url"].as_str().unwrap().starts_with(scratch.to_str().unwrap()), "{alert}");
    // The read-workload group is evaluated every 30 s: wait for its first
    // evaluation, then one more scrape.
    let t0 = Instant::now();
    while query(&prom, "instance:pileup_rows_read_rate:avg5m").unwrap_or_default().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the recording rules were never evaluated");
        std::thread::sleep(Duration::from_millis(500));
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
        query(&prom, "pileup_threads_running * on (instance) group_left (version) mysql_version_info{job='mysql'}").unwrap();
    assert_eq!(joined.len(), 1, "{joined:?}");
    assert!(joined[0]["metric"]["version"].as_str().is_some_and(|v| v.contains("MariaDB")), "{joined:?}");

    // The consoles: the fleet page lists the server with its stall, the
    // server's page shows the verdict.
    let (status, page) = get(&format!("{prom}/consoles/pileup-fleet.html"));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&instance) && page.contains(&class), "{page}");
    assert!(page.contains("MySQLStallCaptured"), "the firing alert is listed: {page}");
    let server_page = format!("{prom}/consoles/pileup-server.html?instance={instance}");
    let (status, page) = get(&server_page);
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("<b>{class}</b>")), "{page}");
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
