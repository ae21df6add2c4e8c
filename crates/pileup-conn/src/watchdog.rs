//! A server watched on connections of its own while long statements run on
//! others. A dump's or a load's statements may run for hours, so their
//! reads wait as long; a server that stops answering (its process stopped,
//! its host hung) would hold them that long. Every interval the watchdog
//! connects and runs `DO 1`, each probe bounded by the connect timeout;
//! after probes in a row that get no answer in that time, it shuts down
//! the sockets of the connections it watches, so their reads end at once
//! with an error, and keeps why for the caller to say.
//!
//! A server that answers slowly but answers (busy, its disk slow) is not
//! hung: a probe that connects resets the count. A server that is gone
//! (refusing connections) ends the watched reads by itself.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use crate::ConnSpec;

/// What the watchdog and its caller share.
struct Shared {
    fds: Mutex<BTreeMap<u64, RawFd>>,
    next: AtomicU64,
    hung: Mutex<Option<String>>,
    stop: AtomicBool,
}

/// The watchdog: it runs until dropped.
pub struct Watchdog {
    shared: Arc<Shared>,
}

/// A watched connection: unwatched when dropped (drop it before the
/// connection).
pub struct Watched {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.shared.fds.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

/// Whether a probe's failure is the server not answering: it took the
/// whole bound (a refusal, a denied login or too many connections come
/// back at once and say the server is there).
pub fn no_answer(elapsed: Duration, bound: Duration) -> bool {
    elapsed + Duration::from_millis(200) >= bound
}

/// What to do after a probe: `Some(misses)` in a row so far, or declare the
/// server hung when they reach `limit`.
pub fn after_probe(misses: u32, answered: bool, limit: u32) -> (u32, bool) {
    if answered {
        return (0, false);
    }
    let m = misses + 1;
    (m, m >= limit)
}

impl Watchdog {
    /// Probe the server `spec` names every `every`; declare it hung after
    /// `misses` probes in a row without an answer.
    pub fn start(spec: &ConnSpec, every: Duration, misses: u32) -> Watchdog {
        let shared = Arc::new(Shared {
            fds: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
            hung: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let mut probe = spec.clone();
        probe.query_timeout = None;
        let s = shared.clone();
        // Not joined: a probe in flight may take the connect timeout, and
        // the caller's end must not wait for it; the thread ends after it.
        std::thread::Builder::new()
            .name("pileup-watchdog".into())
            .spawn(move || run(&probe, every, misses.max(1), &s))
            .expect("starting a thread");
        Watchdog { shared }
    }

    /// Watch a connection: its socket is shut down if the server hangs.
    pub fn watch(&self, c: &impl AsRawFd) -> Watched {
        let id = self.shared.next.fetch_add(1, Ordering::Relaxed);
        self.shared.fds.lock().unwrap_or_else(|p| p.into_inner()).insert(id, c.as_raw_fd());
        Watched { shared: self.shared.clone(), id }
    }

    /// Why the server was declared hung, once it was.
    pub fn hung(&self) -> Option<String> {
        self.shared.hung.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn run(spec: &ConnSpec, every: Duration, limit: u32, s: &Shared) {
    let mut misses = 0;
    loop {
        let t = Instant::now();
        while t.elapsed() < every {
            if s.stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100).min(every));
        }
        let t0 = Instant::now();
        let answered = match spec.connect() {
            Ok(mut c) => c.query_drop("DO 1").is_ok() || !no_answer(t0.elapsed(), spec.timeout),
            Err(_) => !no_answer(t0.elapsed(), spec.timeout),
        };
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        let (m, hung) = after_probe(misses, answered, limit);
        misses = m;
        if hung {
            let why = format!(
                "the server ({}) stopped answering: {m} new connections {}s apart got no answer within the connect timeout ({} s); its statements were cut off",
                spec.describe(),
                every.as_secs(),
                spec.timeout.as_secs_f64()
            );
            *s.hung.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            for &fd in s.fds.lock().unwrap_or_else(|p| p.into_inner()).values() {
                // SAFETY: shutdown on a descriptor number only changes the
                // state of the socket it names (a number reused by a
                // non-socket fails with ENOTSOCK and changes nothing).
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_probes_that_take_the_whole_bound_count_and_an_answer_resets_them() {
        let bound = Duration::from_secs(2);
        assert!(no_answer(Duration::from_millis(1900), bound));
        assert!(!no_answer(Duration::from_millis(30), bound), "a refusal comes back at once");
        assert_eq!(after_probe(0, false, 2), (1, false));
        assert_eq!(after_probe(1, false, 2), (2, true));
        assert_eq!(after_probe(1, true, 2), (0, false));
        assert_eq!(after_probe(0, false, 1), (1, true));
    }
}
