//! One crash, timed from outside: SIGKILL the sandbox's server, start it
//! again on the same datadir, and time it until it answers a query, while
//! its stacks are sampled without stopping it and its error log is read
//! as it is written (each line timed as it appears: the log's own
//! timestamps are whole seconds).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pileup_engine::{Profile, Sampler, SamplerOptions};
use pileup_sandbox::Sandbox;

use crate::error::{ExperimentError, Result};
use crate::recovery::report::Phase;

/// Between captures of the recovering server's stacks.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// Between attempts to connect.
const POLL_EVERY: Duration = Duration::from_millis(10);
/// Error-log lines kept per crash.
const PHASES_KEPT: usize = 40;

/// What a crash and the start after it measured.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// From SIGKILL until the old process was gone.
    pub seconds_to_die: f64,
    /// From the new process's start until it answered a query.
    pub seconds_to_answer: f64,
    /// The server's error-log lines of the start, timed.
    pub phases: Vec<Phase>,
    /// The server's own figures from its log: redo to apply (end of log
    /// minus the checkpoint, in LSN bytes) and the pages it recovered.
    pub redo_to_apply: Option<u64>,
    pub pages_to_recover: Option<u64>,
    /// The recovering server's stacks, or why none were taken.
    pub profile: std::result::Result<Profile, String>,
}

/// Crash the sandbox's server and time its start; give up after `within`.
pub(crate) fn crash_and_time(sb: &mut Sandbox, within: Duration, sample: bool) -> Result<Recovered> {
    let log = sb.error_log();
    let mut tail = LogTail::at_end(&log);
    let t_kill = Instant::now();
    sb.crash().map_err(|e| ExperimentError::Server(format!("killing the sandbox's server: {e}")))?;
    let seconds_to_die = t_kill.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let pid = sb.spawn_again().map_err(|e| ExperimentError::Server(format!("starting the server again: {e}")))?;
    let ready = Arc::new(AtomicBool::new(false));
    let sampler = sample.then(|| {
        let ready = ready.clone();
        std::thread::spawn(move || sample_until(pid as i32, &ready))
    });
    let mut phases = vec![];
    let answered = loop {
        tail.read(t0, &mut phases);
        if sb.answers() {
            break Ok(t0.elapsed().as_secs_f64());
        }
        if sb.exited() {
            break Err(format!("mariadbd exited while recovering; see {}", log.display()));
        }
        if t0.elapsed() > within {
            break Err(format!("mariadbd did not answer within {} s of its start", within.as_secs()));
        }
        std::thread::sleep(POLL_EVERY);
    };
    ready.store(true, Ordering::SeqCst);
    let profile = match sampler {
        Some(h) => h.join().unwrap_or_else(|_| Err("the sampling thread panicked".into())),
        None => Err("not sampled".into()),
    };
    tail.read(t0, &mut phases);
    let seconds_to_answer = answered.map_err(ExperimentError::Server)?;
    let (redo_to_apply, pages_to_recover) = server_figures(&phases);
    phases.truncate(PHASES_KEPT);
    Ok(Recovered { seconds_to_die, seconds_to_answer, phases, redo_to_apply, pages_to_recover, profile })
}

/// Sample `pid` without stopping it until `ready`, once its executable and
/// shared libraries are mapped (a sampler reads the mappings when made).
fn sample_until(pid: i32, ready: &AtomicBool) -> std::result::Result<Profile, String> {
    let t0 = Instant::now();
    loop {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        let server = exe.file_name().is_some_and(|n| pileup_engine::process::is_server_name(&n.to_string_lossy()));
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if server && maps.contains("libc.so") {
            break;
        }
        if ready.load(Ordering::SeqCst) || t0.elapsed() > Duration::from_secs(10) {
            return Err("the server's process was not seen running mariadbd with its libraries mapped".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let opts = SamplerOptions::passive_profile(false, Duration::from_secs(3600));
    let mut s = Sampler::new(pid, opts, None).map_err(|e| pileup_conn::error_text(&e))?;
    // Not Sampler::run_until: its stop flag is a signal's, and the profile
    // would say the run was stopped by one.
    while !ready.load(Ordering::SeqCst) {
        let t = Instant::now();
        if let Err(e) = s.sample() {
            // What was taken before is kept; with nothing taken, the why.
            let p = s.finish();
            return if p.thread_stacks > 0 { Ok(p) } else { Err(pileup_conn::error_text(&e)) };
        }
        std::thread::sleep(SAMPLE_EVERY.saturating_sub(t.elapsed()));
    }
    Ok(s.finish())
}

/// The error log from an offset on, read in whole lines.
struct LogTail {
    path: PathBuf,
    at: u64,
    partial: String,
}

impl LogTail {
    fn at_end(path: &Path) -> LogTail {
        let at = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        LogTail { path: path.to_path_buf(), at, partial: String::new() }
    }

    /// The lines written since the last read, each timed now.
    fn read(&mut self, t0: Instant, out: &mut Vec<Phase>) {
        let Ok(mut f) = std::fs::File::open(&self.path) else { return };
        if f.seek(SeekFrom::Start(self.at)).is_err() {
            return;
        }
        let mut buf = String::new();
        let Ok(n) = f.read_to_string(&mut buf) else { return };
        self.at += n as u64;
        self.partial.push_str(&buf);
        let seconds = t0.elapsed().as_secs_f64();
        while let Some(i) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=i).collect();
            if let Some(text) = logged(line.trim_end()) {
                out.push(Phase { seconds, line: text });
            }
        }
    }
}

/// A log line without its timestamp and thread number, if it is a note,
/// a warning or an error.
fn logged(line: &str) -> Option<String> {
    let i = line.find(" [")?;
    let rest = &line[i + 1..];
    (rest.starts_with("[Note]") || rest.starts_with("[Warning]") || rest.starts_with("[ERROR]"))
        .then(|| rest.to_string())
}

/// The number after `key` in the first line that has it.
fn number_after(phases: &[Phase], key: &str) -> Option<u64> {
    phases.iter().find_map(|p| {
        let rest = &p.line[p.line.find(key)? + key.len()..];
        let digits: String = rest.trim_start().chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

/// Redo to apply and pages to recover, as the server's log states them:
/// `Starting crash recovery from checkpoint LSN=A`, `End of log at LSN=B`,
/// `To recover: N pages` (or the final batch's count, if larger).
fn server_figures(phases: &[Phase]) -> (Option<u64>, Option<u64>) {
    let from = number_after(phases, "crash recovery from checkpoint LSN=");
    let to = number_after(phases, "End of log at LSN=");
    let redo = match (from, to) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    };
    let pages = [number_after(phases, "To recover:"), number_after(phases, "Starting final batch to recover")]
        .into_iter()
        .flatten()
        .max();
    (redo, pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phases(lines: &[&str]) -> Vec<Phase> {
        lines.iter().filter_map(|l| logged(l)).map(|line| Phase { seconds: 0.0, line }).collect()
    }

    #[test]
    fn the_servers_own_figures_are_read_from_its_log() {
        let p = phases(&[
            "2026-11-29 18:59:59 0 [Note] InnoDB: Starting crash recovery from checkpoint LSN=51628881",
            "2026-11-29 18:59:59 0 [Note] InnoDB: End of log at LSN=99532481",
            "2026-11-29 18:59:59 0 [Note] InnoDB: To recover: 5442 pages",
            "Version: '10.11.19-MariaDB'  socket: '/tmp/x.sock'",
        ]);
        assert_eq!(p.len(), 3, "the version banner is not a logged line");
        assert_eq!(p[0].line, "[Note] InnoDB: Starting crash recovery from checkpoint LSN=51628881");
        assert_eq!(server_figures(&p), (Some(99532481 - 51628881), Some(5442)));
    }

    #[test]
    fn a_clean_start_has_no_figures_and_the_larger_page_count_wins() {
        assert_eq!(server_figures(&phases(&["2026-11-29 0 [Note] InnoDB: log sequence number 44744"])), (None, None));
        let p = phases(&[
            "x 0 [Note] InnoDB: To recover: 100 pages",
            "x 0 [Note] InnoDB: Starting final batch to recover 180 pages from redo log.",
        ]);
        assert_eq!(server_figures(&p), (None, Some(180)));
    }
}
