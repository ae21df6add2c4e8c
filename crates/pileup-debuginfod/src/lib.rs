//! `pileup-debuginfod`: the network side of debug-file lookup. A module's
//! separate debug file fetched by its build-id (`GET
//! URL/buildid/ID/debuginfo`), as gdb and eu-stack fetch it, into the
//! standard client cache the engine reads, so a file is fetched once and
//! shared with them. The `debuginfod` crate speaks the protocol and keeps
//! the cache; ureq is its HTTP client, with a timeout. The engine asks
//! through its [`DebugFetcher`] trait, and only for what the cache lacks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use debuginfod::{BuildId, CachingClient, Client, HttpClient, HttpClientError, Readable};
use pileup_engine::debug_files::{cache_dir, DebugFetcher, DebuginfodOptions, FetchProgress, OnProgress};

/// From the environment, as elfutils' client reads it: `DEBUGINFOD_URLS`
/// (space-separated), `DEBUGINFOD_CACHE_PATH`, `DEBUGINFOD_TIMEOUT`
/// (seconds). `None` when no server is named.
pub fn from_env() -> Option<DebuginfodOptions> {
    for_servers(&[std::env::var("DEBUGINFOD_URLS").ok()?])
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
        fetcher: Some(Arc::new(Fetcher)),
    })
}

/// Server URLs from a `DEBUGINFOD_URLS`-style list (spaces or commas).
pub fn urls_of(list: &str) -> Vec<String> {
    list.split([' ', ',']).map(str::trim).filter(|u| !u.is_empty()).map(String::from).collect()
}

/// `DEBUGINFOD_TIMEOUT` (seconds), else 90 s as elfutils.
pub fn timeout_from_env() -> Duration {
    std::env::var("DEBUGINFOD_TIMEOUT")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(90))
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

/// The debuginfod protocol over ureq.
struct Fetcher;

impl DebugFetcher for Fetcher {
    fn fetch(&self, o: &DebuginfodOptions, module: &str, build_id: &str) -> Result<Option<PathBuf>, String> {
        let agent = ureq::Agent::config_builder().timeout_global(Some(o.timeout)).build().new_agent();
        let urls: Vec<&str> = o.urls.iter().map(String::as_str).collect();
        let progress = o.on_progress.clone().map(|cb| (cb, module.to_string()));
        let http = Http { agent, progress, bases: o.urls.clone() };
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let Some(client) = Client::builder().http_client(http).build(urls).map_err(|e| text(&e))? else {
            return Ok(None);
        };
        let caching = CachingClient::new(client, &o.cache_dir).map_err(|e| text(&e))?;
        caching.fetch_debug_info(&BuildId::formatted(build_id.to_string())).map_err(|e| text(&e))
    }
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
