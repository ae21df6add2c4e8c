//! What a run is told (its options) and what its threads share.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Counters;
use crate::{progress, reads};

/// How the prefetcher tells its user something (a lost replica, a
/// corrupt event, an index it cannot map): one line, no prefix.
pub type Say = Arc<dyn Fn(String) + Send + Sync>;

/// What every stage shares.
#[derive(Clone)]
pub struct Shared {
    pub counters: Arc<Counters>,
    pub progress: Arc<progress::Progress>,
    pub stop: Arc<AtomicBool>,
    pub say: Say,
    pub reads: Arc<reads::ReadTally>,
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Parallel readers.
    pub readers: usize,
    /// Stay at most this many events ahead of the applier…
    pub window_events: u64,
    /// …and this many index keys issued ahead (None: a quarter of the buffer
    /// pool's old sublist, so warmed pages are not evicted before the applier gets
    /// to them).
    pub window_keys: Option<u64>,
    /// …and this many seconds of primary time.
    pub window_secs: u32,
    /// Work only while the applier is at least this many seconds of
    /// primary time behind (see [`gate`]).
    pub min_lag: u64,
    /// Keys per lookup statement.
    pub batch: usize,
    /// Bound on each lookup (server-side max_statement_time).
    pub query_timeout: Duration,
    /// How often to ask where the applier is.
    pub poll: Duration,
    /// Stop after this long (None: until stopped).
    pub duration: Option<Duration>,
    /// Warm primary-key rows only, not secondary index entries.
    pub primary_only: bool,
    /// Hold purge off while the replica lags, up to this history list
    /// length (see [`crate::purge`]).
    pub defer_purge: Option<u64>,
    /// How keys are warmed.
    pub warm: Warm,
}

/// How the prefetcher has the server read a key's page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Warm {
    /// Index-only SELECTs (every index, every server).
    #[default]
    Sql,
    /// Integer indexes: the leaf's page number from the index's upper
    /// levels ([`crate::pages`]), read by InnoDB's buffer pool load
    /// ([`crate::load`]); other indexes by SELECTs.
    Pages,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            readers: 4,
            window_events: 50_000,
            window_keys: None,
            window_secs: 30,
            min_lag: 1,
            batch: 16,
            query_timeout: Duration::from_millis(500),
            poll: Duration::from_millis(100),
            duration: None,
            primary_only: false,
            defer_purge: None,
            warm: Warm::Sql,
        }
    }
}
