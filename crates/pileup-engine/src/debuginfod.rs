//! Debug info from debuginfod servers: a module's separate debug file
//! fetched by its build-id (`GET URL/buildid/ID/debuginfo`), as gdb and
//! eu-stack fetch it, into the standard client cache
//! (`DEBUGINFOD_CACHE_PATH`, else `~/.cache/debuginfod_client`), so a file
//! is fetched once and shared with them. The `debuginfod` crate speaks the
//! protocol and keeps the cache; ureq is its HTTP client, with a timeout.
//! Fetches happen before the first stop, never during a capture.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use debuginfod::{BuildId, CachingClient, Client, HttpClient, HttpClientError, Readable};

use crate::error::DebugFileError;

/// How far a fetch is, for a progress line.
#[derive(Debug, Clone)]
pub struct FetchProgress {
    /// The module the file is for (`mariadbd`).
    pub module: String,
    pub bytes: u64,
    /// The file's size, when the server says.
    pub total: Option<u64>,
    /// The last report of this fetch.
    pub done: bool,
}

/// Called as a fetch proceeds (on the fetching thread).
#[derive(Clone)]
pub struct OnProgress(pub std::sync::Arc<dyn Fn(&FetchProgress) + Send + Sync>);

impl std::fmt::Debug for OnProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("progress callback")
    }
}

/// Where and how long to look.
#[derive(Debug, Clone)]
pub struct DebuginfodOptions {
    /// Server base URLs, in order (`DEBUGINFOD_URLS`, or `--debuginfod`).
    pub urls: Vec<String>,
    /// The client cache directory.
    pub cache_dir: PathBuf,
    /// Longest a fetch may take, whole (connecting, answering, the body).
    pub timeout: Duration,
    /// Told how each fetch proceeds.
    pub on_progress: Option<OnProgress>,
}

impl DebuginfodOptions {
    /// From the environment, as elfutils' client reads it: `DEBUGINFOD_URLS`
    /// (space-separated), `DEBUGINFOD_CACHE_PATH`, `DEBUGINFOD_TIMEOUT`
    /// (seconds). `None` when no server is named.
    pub fn from_env() -> Option<DebuginfodOptions> {
        DebuginfodOptions::for_servers(&[std::env::var("DEBUGINFOD_URLS").ok()?])
    }

    /// The servers of `lists` (each a `DEBUGINFOD_URLS`-style list, as
    /// `--debuginfod` flags give them), with the environment's cache and
    /// timeout. `None` when no server is named.
    pub fn for_servers(lists: &[String]) -> Option<DebuginfodOptions> {
        let urls: Vec<String> = lists.iter().flat_map(|l| urls_of(l)).collect();
        (!urls.is_empty()).then(|| DebuginfodOptions {
            urls,
            cache_dir: cache_dir(),
            timeout: timeout_from_env(),
            on_progress: None,
        })
    }

    /// The client cache alone, no server: debug files fetched earlier (by
    /// `pileup stacks`, gdb or eu-stack) are used, nothing is fetched. For
    /// captures that must not wait on the network.
    pub fn cache_only() -> DebuginfodOptions {
        DebuginfodOptions { urls: vec![], cache_dir: cache_dir(), timeout: Duration::ZERO, on_progress: None }
    }

    /// What the user reads when a lookup of `module`'s debug file failed.
    pub fn failed(&self, module: &str, e: &DebugFileError) -> String {
        format!(
            "debuginfod ({}): no debug info for {module} ({e}); its unexported functions are labelled {module}+0xFUNCSTART",
            self.urls.join(" ")
        )
    }

    /// What the user reads when `module`'s debug file was fetched.
    pub fn fetched(&self, module: &str, size: u64, took: Duration) -> String {
        format!(
            "debug info for {module} fetched from debuginfod ({:.1} MB in {:.1} s) into {}",
            size as f64 / 1e6,
            took.as_secs_f64(),
            self.cache_dir.display()
        )
    }
}

/// Server URLs from a `DEBUGINFOD_URLS`-style list (spaces or commas).
pub fn urls_of(list: &str) -> Vec<String> {
    list.split([' ', ',']).map(str::trim).filter(|u| !u.is_empty()).map(String::from).collect()
}

/// The client cache: `DEBUGINFOD_CACHE_PATH`, `$XDG_CACHE_HOME/debuginfod_client`
/// or `~/.cache/debuginfod_client`.
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("DEBUGINFOD_CACHE_PATH") {
        return PathBuf::from(p);
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME") {
        return Path::new(&x).join("debuginfod_client");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache").join("debuginfod_client")
}

/// `DEBUGINFOD_TIMEOUT` (seconds), else 90 s as elfutils.
pub fn timeout_from_env() -> Duration {
    std::env::var("DEBUGINFOD_TIMEOUT")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(90))
}

/// How long elfutils treats an empty cache entry (a recorded miss) as a miss.
const MISS_FOR: Duration = Duration::from_secs(600);

/// What a lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// In the cache already (fetched earlier, by pileup, gdb or eu-stack).
    Cached(PathBuf),
    /// Fetched now: the file, its size and how long it took.
    Downloaded(PathBuf, u64, Duration),
    /// The servers do not have it (or a recent lookup recorded a miss).
    NotFound,
}

/// The body of an answer: ureq's reader, named for the client trait, and
/// counted for the progress line.
struct Body {
    inner: Box<dyn std::io::Read + Send>,
    progress: Option<(OnProgress, FetchProgress)>,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("debuginfod response body")
    }
}

impl std::io::Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some((cb, p)) = &mut self.progress {
            let before = p.bytes >> 20;
            p.bytes += n as u64;
            p.done = n == 0;
            // A report per MiB read, and the last.
            if p.done || p.bytes >> 20 != before {
                (cb.0)(p);
            }
        }
        Ok(n)
    }
}

#[derive(Debug)]
struct Http {
    agent: ureq::Agent,
    progress: Option<(OnProgress, String)>,
    bases: Vec<String>,
}

/// The `debuginfod` crate puts `buildid/…` in place of a server URL's
/// path; elfutils appends it, so `https://host/prefix` serves
/// `https://host/prefix/buildid/…`. Put the prefix back.
fn with_prefix(url: &str, bases: &[String]) -> String {
    let Some(at) = url.find("/buildid/") else { return url.to_string() };
    let (origin, rest) = url.split_at(at);
    for b in bases {
        let b = b.trim_end_matches('/');
        let b_origin_end = b.find("://").map(|i| i + 3).and_then(|i| b[i..].find('/').map(|j| i + j));
        if let Some(end) = b_origin_end {
            if b[..end].eq_ignore_ascii_case(origin) {
                return format!("{b}{rest}");
            }
        }
    }
    url.to_string()
}

impl HttpClient for Http {
    fn get(&self, url: &str) -> Result<Box<dyn Readable>, HttpClientError> {
        let url = with_prefix(url, &self.bases);
        match self.agent.get(&url).call() {
            Ok(r) => {
                let body = r.into_body();
                let progress = self.progress.as_ref().map(|(cb, module)| {
                    let p =
                        FetchProgress { module: module.clone(), bytes: 0, total: body.content_length(), done: false };
                    (cb.0)(&p);
                    (cb.clone(), p)
                });
                Ok(Box::new(Body { inner: Box::new(body.into_reader()), progress }))
            }
            Err(ureq::Error::StatusCode(c)) => Err(HttpClientError::StatusCode(
                ureq::http::StatusCode::from_u16(c).unwrap_or(ureq::http::StatusCode::BAD_GATEWAY),
            )),
            Err(e) => Err(HttpClientError::Other(Box::new(e))),
        }
    }
}

/// Look up the debug file of `build_id` (hex) of `module`: the cache
/// first, then each server in turn.
pub fn fetch(o: &DebuginfodOptions, module: &str, build_id: &str) -> Result<Lookup, DebugFileError> {
    let entry = o.cache_dir.join(build_id).join("debuginfo");
    if let Ok(m) = std::fs::metadata(&entry) {
        if m.len() > 0 {
            return Ok(Lookup::Cached(entry));
        }
        // elfutils records a miss as an empty file; it holds for a while.
        let age = m.modified().ok().and_then(|t| SystemTime::now().duration_since(t).ok()).unwrap_or_default();
        if age < MISS_FOR {
            return Ok(Lookup::NotFound);
        }
        let _ = std::fs::remove_file(&entry);
    }
    if o.urls.is_empty() {
        return Ok(Lookup::NotFound);
    }
    let agent = ureq::Agent::config_builder().timeout_global(Some(o.timeout)).build().new_agent();
    let urls: Vec<&str> = o.urls.iter().map(String::as_str).collect();
    let progress = o.on_progress.clone().map(|cb| (cb, module.to_string()));
    let http = Http { agent, progress, bases: o.urls.clone() };
    let lookup = |e: &dyn std::fmt::Display| DebugFileError::Lookup(e.to_string());
    let Some(client) = Client::builder().http_client(http).build(urls).map_err(|e| lookup(&e))? else {
        return Ok(Lookup::NotFound);
    };
    let t = std::time::Instant::now();
    let caching = CachingClient::new(client, &o.cache_dir).map_err(|e| lookup(&e))?;
    match caching.fetch_debug_info(&BuildId::formatted(build_id.to_string())).map_err(|e| lookup(&e))? {
        Some(p) => {
            let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            Ok(Lookup::Downloaded(p, size, t.elapsed()))
        }
        None => Ok(Lookup::NotFound),
    }
}

/// One module's lookup, as it arrives.
pub struct Arrival {
    /// Index of the module in its [`crate::modules::ModuleSet`].
    pub module: usize,
    pub result: Result<Lookup, DebugFileError>,
}

/// Look up `wanted` (module index, module name, build-id) one after
/// another, handing each outcome to `each` (which returns false to stop).
/// The first failure ends the lookups: a server that does not answer is not
/// asked again for the next module.
fn lookup_each(o: &DebuginfodOptions, wanted: Vec<(usize, String, String)>, mut each: impl FnMut(Arrival) -> bool) {
    for (module, name, id) in wanted {
        let result = fetch(o, &name, &id);
        let failed = result.is_err();
        if !each(Arrival { module, result }) || failed {
            break;
        }
    }
}

/// What one lookup did to a module set.
pub(crate) struct Applied {
    /// The module has its debug file now.
    pub used: bool,
    /// What the user should know (a fetch, a file not used, a failure).
    pub note: Option<String>,
    /// The lookup failed: the servers are not asked again.
    pub failed: bool,
}

/// Use what a lookup found for its module in `mods`.
pub(crate) fn apply(mods: &mut crate::modules::ModuleSet, o: &DebuginfodOptions, a: Arrival) -> Applied {
    let name = mods.modules[a.module].name.clone();
    let (mut used, mut note, mut failed) = (false, None, false);
    match a.result {
        Ok(Lookup::Cached(p)) => match mods.apply_debug_file(a.module, &p) {
            Ok(()) => used = true,
            Err(e) => note = Some(format!("debuginfod cache: {e:#}; not used")),
        },
        Ok(Lookup::Downloaded(p, size, took)) => match mods.apply_debug_file(a.module, &p) {
            Ok(()) => {
                used = true;
                note = Some(o.fetched(&name, size, took));
            }
            Err(e) => note = Some(format!("debuginfod ({}): {e:#}; not used", o.urls.join(" "))),
        },
        Ok(Lookup::NotFound) => {}
        Err(e) => {
            note = Some(o.failed(&name, &e));
            failed = true;
        }
    }
    Applied { used, note, failed }
}

/// Look up, one after another, the debug files `mods` lacks, and use them;
/// returns what the user should know, a line each. For a tool that names
/// nothing before its start (`locks` unwinds after attaching).
pub(crate) fn use_each(mods: &mut crate::modules::ModuleSet, o: &DebuginfodOptions) -> Vec<String> {
    let mut notes = vec![];
    lookup_each(o, mods.wanting_debug_files(), |a| {
        notes.extend(apply(mods, o, a).note);
        true
    });
    notes
}

/// [`lookup_each`] on a thread of its own, so sampling never waits on the
/// network.
pub fn spawn(o: DebuginfodOptions, wanted: Vec<(usize, String, String)>) -> std::sync::mpsc::Receiver<Arrival> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("pileup-debuginfod".into())
        .spawn(move || lookup_each(&o, wanted, |a| tx.send(a).is_ok()))
        .expect("spawning the debuginfod thread");
    rx
}

/// Fetch into the cache the debug files `pid`'s stripped modules lack, so
/// later captures (which read the cache only) name them: a long-running
/// watcher calls this on a thread of its own at start. Returns what the
/// user should know, a line each.
pub fn fill_cache(pid: i32, debug_dirs: &[PathBuf], o: &DebuginfodOptions) -> Vec<String> {
    let maps = match crate::proc::read_maps(pid) {
        Ok(m) => m,
        Err(e) => return vec![format!("debuginfod: the server's modules could not be read ({e})")],
    };
    let mods = crate::modules::ModuleSet::load(pid, &maps, debug_dirs);
    let mut notes = vec![];
    lookup_each(o, mods.wanting_debug_files(), |a| {
        let name = &mods.modules[a.module].name;
        match a.result {
            Ok(Lookup::Downloaded(_, size, took)) => notes.push(o.fetched(name, size, took)),
            Ok(_) => {}
            Err(e) => notes.push(o.failed(name, &e)),
        }
        true
    });
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_lists_split_as_elfutils_splits_them() {
        assert_eq!(
            urls_of(" https://a.example/  http://b:8002,http://c "),
            ["https://a.example/", "http://b:8002", "http://c"]
        );
        assert!(urls_of("   ").is_empty());
    }

    #[test]
    fn a_server_path_prefix_is_kept_as_elfutils_keeps_it() {
        let bases = vec!["https://d.example/debuginfod/".to_string(), "http://plain:8002".to_string()];
        assert_eq!(
            with_prefix("https://d.example/buildid/ab/debuginfo", &bases),
            "https://d.example/debuginfod/buildid/ab/debuginfo"
        );
        assert_eq!(
            with_prefix("http://plain:8002/buildid/ab/debuginfo", &bases),
            "http://plain:8002/buildid/ab/debuginfo"
        );
        assert_eq!(with_prefix("http://other/buildid/ab/debuginfo", &bases), "http://other/buildid/ab/debuginfo");
    }
}
