//! Prometheus exposition: the latest derived metrics on `GET /metrics`, so a
//! fleet is watched by Prometheus/VictoriaMetrics and Grafana while pileup
//! stays a per-host agent. Every metric is a gauge named `pileup_<metric>`
//! (rates are already per second) in base units, as the exposition
//! conventions ask: a metric pileup names in milliseconds (`poll_cost_ms`)
//! or seconds (`pl_active_longest_s`) is exposed in seconds
//! (`pileup_poll_cost_seconds`), a percentage (`checkpoint_age_pct`) as a
//! ratio (`pileup_checkpoint_age_ratio`, 0 to 1). Counters pileup keeps
//! itself (`pileup_captures_total`, `pileup_polls_failed_total`) are
//! counters. Stalls are announced as `pileup_stalls_total{class}`, the
//! newest capture of each class in the last hour as
//! `pileup_capture_timestamp_seconds{class}` (an alert per class, lasting
//! as long as its rule says, whatever captures of other classes follow),
//! and the last capture as `pileup_last_capture_timestamp_seconds` and
//! `pileup_last_capture_info{class,url}`, for dashboard annotations and the
//! alert's link. Label values come from closed sets (a class is one of
//! [`crate::verdict::CLASSES`] as a word such as `flushing_storm`), but for
//! the info metric's `url`, one series at a time; the verdict's text is in
//! the capture, not in a label. Every metric has HELP; `promtool check
//! metrics` passes.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Result, WatchError};

#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub derived: BTreeMap<String, f64>,
    pub polls_total: u64,
    pub polls_failed_total: u64,
    pub captures_total: u64,
    pub last_poll_unix: f64,
    /// Captures by the class their verdict leads with.
    pub stalls: BTreeMap<String, u64>,
    pub last_capture: Option<LastCapture>,
    /// The captures of the last hour, oldest first.
    pub recent: Vec<LastCapture>,
    /// With `--ship`: captures waiting for the store, uploaded, and
    /// uploads (or queueings) that failed.
    pub ship_queued: Option<u64>,
    pub ship_uploaded_total: u64,
    pub ship_failed_total: u64,
}

/// The newest capture, as the exposition announces it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LastCapture {
    pub unix: f64,
    pub class: String,
    /// The verdict's first line.
    pub verdict: String,
    /// Where the capture is: its directory, or its URL once shipped.
    pub url: String,
}

impl Snapshot {
    /// Count a capture and make it the last one.
    pub fn captured(&mut self, c: LastCapture) {
        self.captures_total += 1;
        *self.stalls.entry(c.class.clone()).or_default() += 1;
        self.recent.retain(|r| r.unix >= c.unix - RECENT_SECS);
        self.recent.push(c.clone());
        self.last_capture = Some(c);
    }

    /// A capture now at `url` (shipped to the store) that was at `dir`.
    pub fn moved(&mut self, dir: &str, url: &str) {
        for c in self.recent.iter_mut().chain(self.last_capture.as_mut()) {
            if c.url == dir {
                c.url = url.to_string();
            }
        }
    }
}

/// How long a capture stays in `pileup_capture_timestamp_seconds`.
const RECENT_SECS: f64 = 3600.0;

/// A label value as the exposition format escapes it, cut to `max` chars.
fn label_value(v: &str, max: usize) -> String {
    let mut out = String::new();
    for c in v.chars().take(max) {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The name a derived metric is exposed under and the factor that brings
/// its value to that name's unit: seconds for `_ms` and `_s`, a ratio for
/// `_pct`, seconds named for the replica's lag.
pub fn exposed(metric: &str) -> (String, f64) {
    let m = sanitize(metric);
    let (name, scale) = if let Some(b) = m.strip_suffix("_pct") {
        (format!("{b}_ratio"), 0.01)
    } else if let Some(b) = m.strip_suffix("_ms") {
        (format!("{b}_seconds"), 0.001)
    } else if let Some(b) = m.strip_suffix("_s") {
        (format!("{b}_seconds"), 1.0)
    } else if m == "replica_lag" {
        ("replica_lag_seconds".to_string(), 1.0)
    } else {
        (m, 1.0)
    };
    (format!("pileup_{name}"), scale)
}

/// A class as a label value: lower case, words joined by `_`
/// (`flushing storm` → `flushing_storm`).
pub fn class_label(class: &str) -> String {
    let mut out = String::new();
    for w in class.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push('_');
        }
        out.push_str(&w.to_ascii_lowercase());
    }
    if out.is_empty() {
        "unclassified".into()
    } else {
        out
    }
}

/// What the watch loop updates and the HTTP thread reads.
pub type Shared = Arc<Mutex<Snapshot>>;

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// Render the exposition text.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::new();
    for (k, v) in &s.derived {
        if !v.is_finite() {
            continue;
        }
        let (n, scale) = exposed(k);
        let help = crate::derive::meaning(k).unwrap_or_else(|| format!("the derived metric {k}"));
        // The meaning names the unit pileup keeps (", ms", ", %",
        // ", seconds"); the exposition says its own.
        let bare = help.trim_end_matches(", ms").trim_end_matches(", %").trim_end_matches(", seconds");
        let unit = if n.ends_with("_ratio") {
            ", as a ratio from 0 to 1"
        } else if n.ends_with("_seconds") && !bare.contains("seconds") {
            ", in seconds"
        } else {
            ""
        };
        let _ = writeln!(out, "# HELP {n} {bare}{unit}");
        let _ = writeln!(out, "# TYPE {n} gauge\n{n} {}", v * scale);
    }
    for (n, v, help) in [
        ("pileup_polls_total", s.polls_total, "polls made"),
        ("pileup_polls_failed_total", s.polls_failed_total, "polls the server did not answer in time"),
        ("pileup_captures_total", s.captures_total, "stall captures written"),
    ] {
        let _ = writeln!(out, "# HELP {n} {help}\n# TYPE {n} counter\n{n} {v}");
    }
    let _ = writeln!(
        out,
        "# HELP pileup_last_poll_timestamp_seconds when the last poll was made (Unix time)\n\
         # TYPE pileup_last_poll_timestamp_seconds gauge\npileup_last_poll_timestamp_seconds {}",
        s.last_poll_unix
    );
    if let Some(q) = s.ship_queued {
        for (n, v, kind, help) in [
            ("pileup_ship_queued", q, "gauge", "captures waiting on local disk for the object store"),
            ("pileup_ship_uploaded_total", s.ship_uploaded_total, "counter", "captures uploaded to the object store"),
            ("pileup_ship_failed_total", s.ship_failed_total, "counter", "failed uploads and captures not queued"),
        ] {
            let _ = writeln!(out, "# HELP {n} {help}\n# TYPE {n} {kind}\n{n} {v}");
        }
    }
    if !s.stalls.is_empty() {
        let _ = writeln!(out, "# HELP pileup_stalls_total stalls captured, by the class their verdict leads with");
        let _ = writeln!(out, "# TYPE pileup_stalls_total counter");
        for (class, n) in &s.stalls {
            let _ = writeln!(out, "pileup_stalls_total{{class=\"{}\"}} {n}", class_label(class));
        }
    }
    // The last hour's, as of the last poll (a watcher with no capture since
    // stops announcing the old ones): the newest of each class.
    let mut newest: BTreeMap<String, f64> = BTreeMap::new();
    for c in s.recent.iter().filter(|c| c.unix >= s.last_poll_unix - RECENT_SECS) {
        let t = newest.entry(class_label(&c.class)).or_insert(c.unix);
        *t = t.max(c.unix);
    }
    if !newest.is_empty() {
        let _ = writeln!(
            out,
            "# HELP pileup_capture_timestamp_seconds when the newest capture of each class in the last hour began (Unix time)\n\
             # TYPE pileup_capture_timestamp_seconds gauge"
        );
        for (class, unix) in newest {
            let _ = writeln!(out, "pileup_capture_timestamp_seconds{{class=\"{class}\"}} {unix}");
        }
    }
    if let Some(c) = &s.last_capture {
        let _ = writeln!(
            out,
            "# HELP pileup_last_capture_timestamp_seconds when the last capture began (Unix time)\n\
             # TYPE pileup_last_capture_timestamp_seconds gauge\n\
             pileup_last_capture_timestamp_seconds {}",
            c.unix
        );
        let _ = writeln!(
            out,
            "# HELP pileup_last_capture_info the last capture: its class and place (always 1; its verdict is in the capture)\n\
             # TYPE pileup_last_capture_info gauge\n\
             pileup_last_capture_info{{class=\"{}\",url=\"{}\"}} 1",
            class_label(&c.class),
            label_value(&c.url, 1024)
        );
    }
    out
}

/// The server's process as it is now (0: none): a restart changes it.
pub type ServerPid = Arc<std::sync::atomic::AtomicI32>;

/// How `--listen` serves: where, who may reach it (the web
/// configuration file: TLS and basic auth, [`crate::web`]) and whether the
/// profile endpoints are on.
#[derive(Clone, Debug, Default)]
pub struct ListenOptions {
    /// HOST:PORT.
    pub addr: String,
    pub web_config: Option<std::path::PathBuf>,
    /// Serve `/debug/pprof/*` (off unless asked for). On an address that
    /// is not loopback they are served only with TLS and basic auth.
    pub profiles: bool,
}

/// Where the listener is and how it serves.
#[derive(Clone, Debug)]
pub struct Listening {
    pub addr: std::net::SocketAddr,
    pub tls: bool,
    /// Why the profile endpoints answer 403, when they do.
    pub profiles_refused: Option<String>,
}

/// Serve `/metrics` from a background thread, and with `pid` the server's
/// `profiles` ([`crate::profiles`]).
pub fn serve(
    l: &ListenOptions,
    shared: Shared,
    pid: Option<ServerPid>,
    profiles: Vec<crate::profiles::Endpoint>,
) -> Result<Listening> {
    let profiles = match pid {
        Some(_) => profiles.into_iter().map(|e| (e, Arc::new(AtomicBool::new(false)))).collect(),
        None => vec![],
    };
    serve_with(l, move || render(&shared.lock().unwrap()), pid.map(|p| (p, profiles)))
}

/// Serve `/metrics` from a background thread, the body made by `body` at
/// each scrape (other pileup agents, e.g. `pileup prefetch`, use this too).
pub fn serve_fn(l: &ListenOptions, body: impl Fn() -> String + Send + 'static) -> Result<Listening> {
    serve_with(l, body, None)
}

fn text(s: String, status: u16) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    tiny_http::Response::from_string(s).with_status_code(status)
}

/// A profile path with its "one at a time" flag.
type Served = (crate::profiles::Endpoint, Arc<AtomicBool>);

/// Frees a profile kind and its client for the next request when its
/// thread is done with it, whatever happens on that thread (a profiler
/// that panics is caught and answered 500 first).
struct Done(Arc<AtomicBool>, Arc<Mutex<HashSet<IpAddr>>>, IpAddr);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
        self.1.lock().unwrap().remove(&self.2);
    }
}

/// The HTTP server, on the address itself or, with TLS, on a loopback
/// port behind the TLS front ([`crate::tls`]): the server, the public
/// address, and the map from the front's connections to their clients.
fn bind(
    l: &ListenOptions,
    web: Option<&Arc<crate::web::WebConfig>>,
) -> Result<(tiny_http::Server, std::net::SocketAddr, Option<crate::tls::Clients>)> {
    let listen = |why: String| WatchError::Listen { addr: l.addr.clone(), why };
    match web.filter(|w| w.tls_on()) {
        Some(w) => {
            let public = std::net::TcpListener::bind(&l.addr).map_err(|e| listen(e.to_string()))?;
            let local = public.local_addr()?;
            let server = tiny_http::Server::http("127.0.0.1:0").map_err(|e| listen(e.to_string()))?;
            let inner = server.server_addr().to_ip().ok_or_else(|| listen("not an IP address".into()))?;
            let clients = crate::tls::Clients::default();
            let (w, c) = (w.clone(), clients.clone());
            std::thread::Builder::new()
                .name("pileup-tls".into())
                .spawn(move || crate::tls::terminate(public, inner, w, c))?;
            Ok((server, local, Some(clients)))
        }
        None => {
            let server = tiny_http::Server::http(&l.addr).map_err(|e| listen(e.to_string()))?;
            let local = server.server_addr().to_ip().ok_or_else(|| listen("not an IP address".into()))?;
            Ok((server, local, None))
        }
    }
}

/// Why a profile is refused here, if it is: they are off, or the address
/// is reachable from elsewhere without TLS and basic auth.
fn profiles_refused(
    l: &ListenOptions,
    local: std::net::SocketAddr,
    web: Option<&crate::web::WebConfig>,
) -> Option<String> {
    if !l.profiles {
        return Some("profiles are off; start with --listen-profiles to serve them".into());
    }
    let secured = web.is_some_and(|w| w.tls_on() && w.has_users());
    (!local.ip().is_loopback() && !secured).then(|| {
        format!(
            "profiles are not served on {local}, an address other hosts reach, without TLS and basic auth \
             (--web.config.file)"
        )
    })
}

/// Who asks, if they may: through the TLS front, the client it decrypted
/// for (a connection made to the inner port directly is refused), with
/// the password the web configuration asks for. Otherwise the answer.
fn admit(
    req: &tiny_http::Request,
    clients: Option<&crate::tls::Clients>,
    web: Option<&crate::web::WebConfig>,
) -> std::result::Result<std::net::SocketAddr, tiny_http::Response<std::io::Cursor<Vec<u8>>>> {
    let client = match clients {
        Some(c) => match req.remote_addr().and_then(|a| c.lock().unwrap().get(a).copied()) {
            Some(a) => a,
            None => return Err(text("pileup: this listener speaks TLS; use https\n".into(), 403)),
        },
        None => req.remote_addr().copied().unwrap_or_else(|| ([0, 0, 0, 0], 0).into()),
    };
    if let Some(w) = web {
        let auth = req.headers().iter().find(|h| h.field.equiv("Authorization")).map(|h| h.value.as_str());
        if !w.authorized(auth) {
            let challenge =
                tiny_http::Header::from_bytes(&b"WWW-Authenticate"[..], &b"Basic realm=\"pileup\""[..]).unwrap();
            return Err(text("pileup: unauthorized\n".into(), 401).with_header(challenge));
        }
    }
    Ok(client)
}

fn serve_with(
    l: &ListenOptions,
    body: impl Fn() -> String + Send + 'static,
    profiled: Option<(ServerPid, Vec<Served>)>,
) -> Result<Listening> {
    let web = match &l.web_config {
        Some(p) => Some(crate::web::WebConfig::load(p).map_err(WatchError::WebConfig)?),
        None => None,
    };
    let (server, local, clients) = bind(l, web.as_ref())?;
    let listening =
        Listening { addr: local, tls: clients.is_some(), profiles_refused: profiles_refused(l, local, web.as_deref()) };
    let l = l.clone();
    let profiling: Arc<Mutex<HashSet<IpAddr>>> = Default::default();
    std::thread::Builder::new().name("pileup-metrics".into()).spawn(move || {
        for req in server.incoming_requests() {
            let client = match admit(&req, clients.as_ref(), web.as_deref()) {
                Ok(c) => c,
                Err(resp) => {
                    let _ = req.respond(resp);
                    continue;
                }
            };
            let (path, query) = req.url().split_once('?').unwrap_or((req.url(), ""));
            if path == "/metrics" {
                let resp = tiny_http::Response::from_string(body()).with_header(
                    tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        &b"text/plain; version=0.0.4; charset=utf-8"[..],
                    )
                    .unwrap(),
                );
                let _ = req.respond(resp);
                continue;
            }
            let served = profiled
                .as_ref()
                .and_then(|(pid, all)| Some((pid.load(Ordering::Relaxed), all.iter().find(|(e, _)| e.path == path)?)));
            let Some((pid, (endpoint, busy))) = served else {
                let why = if path.starts_with("/debug/pprof/") && profiled.is_none() {
                    "pileup: no server process to profile (watch has no --pid)\n".to_string()
                } else {
                    let mut paths = vec!["/metrics".to_string()];
                    paths.extend(
                        profiled.iter().flat_map(|(_, all)| all.iter().map(|(e, _)| format!("{}?seconds=N", e.path))),
                    );
                    format!("pileup: served here: {}\n", paths.join(", "))
                };
                let _ = req.respond(text(why, 404));
                continue;
            };
            // Asked again each time: users may have been added or removed.
            if let Some(why) = profiles_refused(&l, local, web.as_deref()) {
                let _ = req.respond(text(format!("pileup: {why}\n"), 403));
                continue;
            }
            let secs = match crate::profiles::seconds_of(query) {
                Ok(s) => s,
                Err(why) => {
                    let _ = req.respond(text(format!("pileup: {why}\n"), 400));
                    continue;
                }
            };
            // One profile per client at a time, and one of a kind, on its
            // own thread: scrapes of /metrics go on meanwhile.
            if !profiling.lock().unwrap().insert(client.ip()) {
                let why = format!("pileup: a profile for {} is being taken; one at a time per client\n", client.ip());
                let _ = req.respond(text(why, 429));
                continue;
            }
            if busy.swap(true, Ordering::SeqCst) {
                profiling.lock().unwrap().remove(&client.ip());
                let why = format!("pileup: a {path} profile is being taken; ask again when it is done\n");
                let _ = req.respond(text(why, 429));
                continue;
            }
            let (done, take) = (Done(busy.clone(), profiling.clone(), client.ip()), endpoint.take.clone());
            std::thread::spawn(move || {
                let taken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| take(pid, secs)))
                    .unwrap_or_else(|_| Err("the profiler failed".into()));
                let resp = match taken {
                    Ok(bytes) => tiny_http::Response::from_data(bytes).with_header(
                        tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/octet-stream"[..]).unwrap(),
                    ),
                    Err(why) => text(format!("pileup: profiling pid {pid}: {why}\n"), 500),
                };
                drop(done);
                let _ = req.respond(resp);
            });
        }
    })?;
    Ok(listening)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn exposition_over_http() {
        let shared: Shared = Default::default();
        {
            let mut s = shared.lock().unwrap();
            s.derived.insert("questions_rate".into(), 1234.5);
            s.derived.insert("bad-name".into(), 1.0);
            s.derived.insert("nan".into(), f64::NAN);
            s.polls_total = 7;
        }
        let l = ListenOptions { addr: "127.0.0.1:0".into(), ..Default::default() };
        let addr = serve(&l, shared, None, vec![]).unwrap().addr;
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.") && body.contains(" 200 "), "{body}");
        assert!(body.contains("text/plain; version=0.0.4"));
        assert!(body.contains("\npileup_questions_rate 1234.5\n"));
        assert!(body.contains("# HELP pileup_questions_rate status counter questions per second\n"), "{body}");
        assert!(body.contains("\npileup_bad_name 1\n"));
        assert!(body.contains("# HELP pileup_bad_name "), "every metric has HELP: {body}");
        assert!(!body.contains("pileup_nan"));
        assert!(body.contains("# TYPE pileup_polls_total counter\npileup_polls_total 7\n"));
        assert!(!body.contains("pileup_stalls_total"), "no stall, no series");
    }

    /// Base units and ratios, as `promtool check metrics` wants them.
    #[test]
    fn metrics_are_exposed_in_base_units_and_ratios() {
        assert_eq!(exposed("poll_cost_ms"), ("pileup_poll_cost_seconds".into(), 0.001));
        assert_eq!(exposed("pl_active_longest_s"), ("pileup_pl_active_longest_seconds".into(), 1.0));
        assert_eq!(exposed("memory_limit_pct"), ("pileup_memory_limit_ratio".into(), 0.01));
        assert_eq!(exposed("replica_lag"), ("pileup_replica_lag_seconds".into(), 1.0));
        assert_eq!(exposed("questions_rate"), ("pileup_questions_rate".into(), 1.0));
        let mut s = Snapshot::default();
        s.derived.insert("checkpoint_age_pct".into(), 87.5);
        s.derived.insert("disk_await_ms".into(), 12.0);
        let body = render(&s);
        assert!(body.contains("\npileup_checkpoint_age_ratio 0.875\n"), "{body}");
        assert!(body.contains("\npileup_disk_await_seconds 0.012\n"), "{body}");
        assert_eq!(class_label("Flushing storm"), "flushing_storm");
        assert_eq!(class_label("metadata-lock / DDL wait"), "metadata_lock_ddl_wait");
    }

    #[test]
    fn a_profiler_that_panics_frees_its_kind_for_the_next_request() {
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let seen = calls.clone();
        let take: crate::profiles::Take = Arc::new(move |_pid, _secs| {
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("a profiler's bug");
            }
            Ok(b"profile".to_vec())
        });
        let ep = crate::profiles::Endpoint { path: "/debug/pprof/test".into(), take };
        let l = ListenOptions { addr: "127.0.0.1:0".into(), profiles: true, ..Default::default() };
        let addr = serve(&l, Shared::default(), Some(Arc::new(1.into())), vec![ep]).unwrap().addr;
        let get = || {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.write_all(b"GET /debug/pprof/test?seconds=1 HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
            let mut body = String::new();
            let _ = c.read_to_string(&mut body);
            body
        };
        // The first request's profiler panics: a 500 for it…
        let first = get();
        assert!(first.contains(" 500 ") && first.contains("the profiler failed"), "{first}");
        // …and the kind is free again, not answered 429 for ever.
        let second = get();
        assert!(second.contains(" 200 ") && second.ends_with("profile"), "{second}");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn captures_are_announced_with_their_class_and_verdict_escaped() {
        let mut s = Snapshot::default();
        let c = |unix, class: &str, verdict: &str| LastCapture {
            unix,
            class: class.into(),
            verdict: verdict.into(),
            url: "/var/lib/pileup/captures/20261128-050000".into(),
        };
        s.captured(c(1.0, "flushing storm", "flushing storm: checkpoint age at 100%"));
        s.captured(c(2.5, "row lock convoy", "row lock convoy: running `UPDATE t SET a=\"x\\n\" WHERE id=1`"));
        s.captured(c(3.0, "flushing storm", "flushing storm: again"));
        let body = render(&s);
        assert!(body.contains("# TYPE pileup_captures_total counter\npileup_captures_total 3\n"), "{body}");
        assert!(body.contains("\npileup_stalls_total{class=\"flushing_storm\"} 2\n"), "{body}");
        assert!(body.contains("\npileup_stalls_total{class=\"row_lock_convoy\"} 1\n"), "{body}");
        assert!(body.contains("\npileup_last_capture_timestamp_seconds 3\n"), "{body}");
        assert!(body.contains(
            "\npileup_last_capture_info{class=\"flushing_storm\",url=\"/var/lib/pileup/captures/20261128-050000\"} 1\n"
        ));
        assert!(!body.contains("verdict="), "the verdict's text is no label: {body}");
        // The newest capture of each class of the last hour, for an alert
        // each; the place is the info metric's alone.
        assert_eq!(body.matches("\npileup_capture_timestamp_seconds{").count(), 2, "{body}");
        assert!(body.contains("\npileup_capture_timestamp_seconds{class=\"row_lock_convoy\"} 2.5\n"), "{body}");
        assert!(body.contains("\npileup_capture_timestamp_seconds{class=\"flushing_storm\"} 3\n"), "{body}");
        assert_eq!(body.matches("url=").count(), 1, "{body}");
        s.captured(c(3700.0, "flushing storm", "an hour later"));
        assert_eq!(render(&s).matches("\npileup_capture_timestamp_seconds{").count(), 1, "older than an hour: gone");
        s.captured(LastCapture { url: "/d/a \"quoted\" \\ dir".into(), ..c(3701.0, "row lock convoy", "v") });
        let body = render(&s);
        assert!(body.contains(r#"url="/d/a \"quoted\" \\ dir""#), "{body}");
    }
}
