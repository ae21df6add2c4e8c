//! Profiles pulled the way continuous profilers pull a Go service's. On
//! `watch --listen`, with the server's pid:
//!
//! - `GET /debug/pprof/profile?seconds=N`: the server's thread stacks over
//!   N seconds as a gzipped pprof profile (`application/octet-stream`),
//!   which `go tool pprof`, Parca and Pyroscope read. The stacks are taken
//!   without stopping any thread (the engine's passive mode): a running
//!   thread is sampled on its CPU, a blocked one read where it sleeps, so
//!   the profile holds on-CPU and off-CPU time together, each sample
//!   labelled with its thread, 10 samples a second.
//! - Other profiles the caller adds as [`Endpoint`]s (the CLI adds
//!   `/debug/pprof/locks`, the lock waits traced by `pileup locks`): this
//!   crate only serves them.
//!
//! The cost is bounded: at most 60 seconds a profile, one profile of each
//! kind at a time (a second request for the same path while one is taken
//! gets 429), each on its own thread so `/metrics` is served meanwhile.

use std::sync::Arc;
use std::time::Duration;

use pileup_engine::{Sampler, SamplerOptions};
use pileup_output::{render, Format, Options};

/// The longest profile served, and the one given without `seconds`
/// (Go's default).
pub const MAX_SECONDS: u64 = 60;
pub const DEFAULT_SECONDS: u64 = 30;
/// Time between samples.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// Makes one profile: given the server's pid and the seconds asked for,
/// the gzipped pprof bytes, or why not (one line, for the HTTP answer).
pub type Take = Arc<dyn Fn(i32, u64) -> Result<Vec<u8>, String> + Send + Sync>;

/// A profile served at `path`.
#[derive(Clone)]
pub struct Endpoint {
    /// `/debug/pprof/NAME`.
    pub path: String,
    pub take: Take,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("path", &self.path).finish_non_exhaustive()
    }
}

/// The server's stacks at `/debug/pprof/profile` ([`profile`]).
pub fn cpu(any_process: bool) -> Endpoint {
    Endpoint { path: "/debug/pprof/profile".into(), take: Arc::new(move |pid, secs| profile(pid, secs, any_process)) }
}

/// `seconds` from a request's query string: 1 to [`MAX_SECONDS`], else
/// why not (the answer to a bad request).
pub fn seconds_of(query: &str) -> Result<u64, String> {
    let given = query.split('&').find_map(|kv| kv.strip_prefix("seconds="));
    match given {
        None => Ok(DEFAULT_SECONDS),
        Some(s) => match s.parse::<u64>() {
            Ok(n) if (1..=MAX_SECONDS).contains(&n) => Ok(n),
            _ => Err(format!("seconds must be a whole number from 1 to {MAX_SECONDS}, not {s:?}")),
        },
    }
}

/// Sample `pid`'s threads for `secs` seconds without stopping them; the
/// gzipped pprof profile.
pub fn profile(pid: i32, secs: u64, any_process: bool) -> Result<Vec<u8>, String> {
    let opts = SamplerOptions::passive_profile(any_process, Duration::ZERO);
    let samples = (Duration::from_secs(secs).as_millis() / INTERVAL.as_millis()) as usize;
    let mut sampler = Sampler::new(pid, opts, None).map_err(|e| format!("{e:#}"))?;
    sampler
        .run_until(samples, INTERVAL, Some(Duration::from_secs(secs)), None, |_| {})
        .map_err(|e| format!("{e:#}"))?;
    let p = sampler.finish();
    let mut out = vec![];
    render(&pileup_profile::ProfileReport(&p), Format::Pprof, &Options::default(), &mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_bounded() {
        assert_eq!(seconds_of(""), Ok(30));
        assert_eq!(seconds_of("seconds=5"), Ok(5));
        assert_eq!(seconds_of("debug=1&seconds=60"), Ok(60));
        for bad in ["seconds=0", "seconds=61", "seconds=x", "seconds=-1"] {
            assert!(seconds_of(bad).unwrap_err().starts_with("seconds must be a whole number from 1 to 60"), "{bad}");
        }
    }
}
