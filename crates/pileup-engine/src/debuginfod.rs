//! Debug info from debuginfod's client cache (`DEBUGINFOD_CACHE_PATH`,
//! else `~/.cache/debuginfod_client`), shared with gdb and eu-stack: a
//! module's separate debug file by its build-id. What the cache lacks is
//! fetched from servers by a [`DebugFetcher`] (the network side:
//! `pileup-debuginfod`), so the engine itself speaks no HTTP. Fetches
//! happen before the first stop, never during a capture.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::DebugFileError;

/// How far a fetch is, for a progress line.
#[derive(Debug, Clone)]
pub struct FetchProgress {
    /// The module the file is for (`mariadbd`).
    pub module: String,
    /// Bytes received so far.
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
#[derive(Clone)]
pub struct DebuginfodOptions {
    /// Server base URLs, in order (`DEBUGINFOD_URLS`, or `--debuginfod`).
    pub urls: Vec<String>,
    /// The client cache directory.
    pub cache_dir: PathBuf,
    /// Longest a fetch may take, whole (connecting, answering, the body).
    pub timeout: Duration,
    /// Told how each fetch proceeds.
    pub on_progress: Option<OnProgress>,
    /// What fetches from the servers what the cache lacks; without one,
    /// the cache alone is read.
    pub fetcher: Option<std::sync::Arc<dyn DebugFetcher>>,
}

/// Fetches a module's debug file by build id from the servers of a
/// [`DebuginfodOptions`] into its cache directory (the debuginfod
/// protocol over HTTP, with its timeout and progress reports): the part of
/// debug-file lookup that needs the network, kept out of the engine.
pub trait DebugFetcher: Send + Sync {
    /// The fetched file's path, `None` when no server has it; `Err` says
    /// why the servers could not be asked.
    fn fetch(&self, o: &DebuginfodOptions, module: &str, build_id: &str) -> Result<Option<PathBuf>, String>;
}

impl DebuginfodOptions {
    /// The client cache alone, no server: debug files fetched earlier (by
    /// `pileup stacks`, gdb or eu-stack) are used, nothing is fetched. For
    /// captures that must not wait on the network.
    pub fn cache_only() -> DebuginfodOptions {
        DebuginfodOptions {
            urls: vec![],
            cache_dir: cache_dir(),
            timeout: Duration::ZERO,
            on_progress: None,
            fetcher: None,
        }
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
    let Some(fetcher) = o.fetcher.as_ref() else {
        return Ok(Lookup::NotFound);
    };
    let t = std::time::Instant::now();
    match fetcher.fetch(o, module, build_id).map_err(DebugFileError::Lookup)? {
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

impl std::fmt::Debug for DebuginfodOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebuginfodOptions")
            .field("urls", &self.urls)
            .field("cache_dir", &self.cache_dir)
            .field("timeout", &self.timeout)
            .field("fetches", &self.fetcher.is_some())
            .finish()
    }
}
