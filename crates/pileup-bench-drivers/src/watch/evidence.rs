//! What the watchers wrote: when their first stack was taken, and which
//! captures pileup kept with what verdict.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// When the first stack taken from `from` on was taken, in seconds after
/// `onset` (negative: before it): pileup records each sample's time in
/// stacks.json; for pt-stalk, the creation time of its gdb output file (the
/// shell creates it just before gdb attaches: the most favourable reading).
pub(crate) fn first_stack(
    dir: &Path,
    kind: &str,
    from: std::time::SystemTime,
    onset: std::time::SystemTime,
) -> Option<f64> {
    let (from, onset) = (unix_secs(from), unix_secs(onset));
    let at = if kind.starts_with("pileup") {
        // The earliest capture begun since `from` (one before it, on the
        // steady load, is counted apart).
        find_files(dir, "stacks.json")
            .into_iter()
            .filter_map(|f| {
                let j: serde_json::Value = serde_json::from_slice(&std::fs::read(f).ok()?).ok()?;
                Some(j["samples"][0]["at_unix_ms"].as_f64()? / 1000.0)
            })
            .filter(|at| *at >= from)
            .min_by(f64::total_cmp)?
    } else {
        find_files(dir, "stacktrace")
            .into_iter()
            .filter_map(|p| std::fs::metadata(p).ok().and_then(|m| m.created().or_else(|_| m.modified()).ok()))
            .map(unix_secs)
            .filter(|t| *t >= from)
            .min_by(f64::total_cmp)?
    };
    Some(at - onset)
}

/// Files under `dir` whose name holds `pat`.
fn find_files(dir: &Path, pat: &str) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n.to_string_lossy().contains(pat)) {
                out.push(p);
            }
        }
    }
    out
}

/// What one provoked stall gave: seconds from its start to the watcher's
/// first stack, and pileup's verdict (its first words) once the capture
/// is kept.
pub(crate) struct Onset {
    pub(crate) first_stack: Option<f64>,
    pub(crate) verdict: Option<String>,
    /// Captures kept before the stall began (a false alarm on the steady load).
    pub(crate) before: usize,
    /// The watcher's CPU while it watched the load before the stall (% of
    /// one core; the lock stalls come 3 s after it starts, its start-up
    /// included).
    pub(crate) cpu: f64,
    /// CPU-seconds the watcher used from the stall's start to the end of
    /// the run (its capture included).
    pub(crate) stall_cpu: Option<f64>,
}

/// The verdict of the first capture kept after `onset`, up to its first
/// colon (the class), waiting up to `within`.
pub(crate) fn verdict_after(dir: &Path, onset: std::time::SystemTime, within: Duration) -> Option<String> {
    let since = unix_secs(onset);
    let t0 = Instant::now();
    loop {
        let first = kept(dir).into_iter().filter(|(at, _)| *at >= since).min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((_, v)) = first {
            return Some(v.split([':', ';']).next().unwrap_or(&v).to_string());
        }
        if t0.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Captures kept in `dir` before `onset`.
pub(crate) fn kept_before(dir: &Path, onset: std::time::SystemTime) -> usize {
    let since = unix_secs(onset);
    kept(dir).into_iter().filter(|(at, _)| *at < since).count()
}

/// The captures pileup kept in `dir`: when each fired, and its verdict.
fn kept(dir: &Path) -> Vec<(f64, String)> {
    find_files(dir, "evidence.json")
        .into_iter()
        .filter_map(|f| {
            let j: serde_json::Value = serde_json::from_slice(&std::fs::read(f).ok()?).ok()?;
            Some((j["unix"].as_f64()?, j["verdict"].as_str()?.to_string()))
        })
        .collect()
}

/// `t` in seconds since the Unix epoch.
pub(crate) fn unix_secs(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Wait up to 35 s for the watcher's first stack after `onset`.
pub(crate) fn wait_first_stack(dir: &Path, kind: &str, onset: std::time::SystemTime) -> Option<f64> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(35) {
        if let Some(t) = first_stack(dir, kind, onset, onset) {
            return Some(t);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}
