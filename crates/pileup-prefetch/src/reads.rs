//! Whose page reads: what the applier's threads read from storage
//! themselves, and what the prefetcher's readers read for them
//! (/proc/PID/task/TID/io of the server threads the server names,
//! [`pileup_replica::threads`]). Of the two together, the readers' part is
//! the share of the applier's page reads the prefetcher took away.
//!
//! Counted for the prefetcher: its SQL readers' own reads. Pages that
//! InnoDB's buffer pool load reads for `--warm pages` are read by InnoDB's
//! background threads among their other work and are not counted here
//! (they show as `page_loads`). Nothing is counted when the server's
//! threads cannot be seen from here: a server in another PID namespace, a
//! thread pool, a server that does not list thread ids (MySQL).

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pileup_replica::device::task_io;
use pileup_replica::threads;

use crate::metrics::Counters;

/// How often the applier's threads are looked up again (they change only
/// when the SQL thread or its workers start).
const REFRESH: Duration = Duration::from_secs(10);

/// Bytes each thread had read at the last look.
#[derive(Debug, Default)]
struct Seen(HashMap<i32, u64>);

impl Seen {
    /// `tid` has read `now` bytes in all: what it read since the last
    /// look. A thread not seen before counts from `start` (its bytes now,
    /// for a thread that did its reads before it was ours to count, or 0
    /// for one born since the last look).
    fn observe(&mut self, tid: i32, now: u64, start: u64) -> u64 {
        let last = self.0.insert(tid, now).unwrap_or(start);
        now.saturating_sub(last)
    }

    fn keep_only(&mut self, tids: &[i32]) {
        self.0.retain(|t, _| tids.contains(t));
    }

    /// What `tids` of `pid` read since the last look, in all; a thread not
    /// seen before counts from now (`from_now`) or from its birth. Threads
    /// no longer in `tids` are forgotten.
    fn read_since(&mut self, pid: i32, tids: &[i32], from_now: bool) -> u64 {
        let mut sum = 0;
        for &tid in tids {
            if let Some(io) = task_io(pid, tid) {
                sum += self.observe(tid, io.read, if from_now { io.read } else { 0 });
            }
        }
        self.keep_only(tids);
        sum
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Every read the prefetcher causes is its readers' (no `--warm pages`).
    readers_do_all: bool,
    /// The server process (None: not found yet, or not on this host).
    pid: Option<i32>,
    /// Reader slot → its connection's thread.
    readers: HashMap<usize, i32>,
    reader_seen: Seen,
    appliers: Vec<i32>,
    applier_seen: Seen,
    /// When the applier's threads were looked up, and whether the SQL
    /// thread ran then.
    refreshed: Option<(Instant, bool)>,
    /// The applier's threads have been looked at once (their reads before
    /// that are not counted).
    counted: bool,
}

/// The tally, shared by the readers (which say which thread is theirs)
/// and the loop (which measures).
#[derive(Debug, Default)]
pub struct ReadTally(Mutex<Inner>);

impl ReadTally {
    /// `readers_do_all`: the readers cause every read the prefetcher
    /// causes (not so with `--warm pages`), so the share can be told.
    pub fn new(readers_do_all: bool) -> ReadTally {
        ReadTally(Mutex::new(Inner { readers_do_all, ..Default::default() }))
    }

    /// Reader `slot` has a new connection `c`: count its thread's reads
    /// from now (a thread the server took from its cache has read for
    /// others before).
    pub fn reader_connected(&self, slot: usize, c: &mut mysql::Conn) {
        let tid = threads::own_os_thread(c);
        let mut g = self.0.lock().unwrap();
        match tid {
            Some(tid) => {
                if g.pid.is_none() {
                    g.pid = threads::server_process_of(tid);
                }
                if let Some(now) = g.pid.and_then(|pid| task_io(pid, tid)) {
                    g.reader_seen.0.insert(tid, now.read);
                }
                g.readers.insert(slot, tid);
            }
            None => {
                g.readers.remove(&slot);
            }
        }
    }

    /// Add what the applier's threads and the readers read since the last
    /// look to the counters. `ctl` finds the applier's threads (every
    /// [`REFRESH`], and at once when the SQL thread starts or stops).
    pub fn measure(&self, ctl: &mut mysql::Conn, sql_running: bool, counters: &Counters) {
        let mut g = self.0.lock().unwrap();
        if g.refreshed.is_none_or(|(at, running)| at.elapsed() >= REFRESH || running != sql_running) {
            g.appliers = threads::applier_os_threads(ctl).unwrap_or_default();
            g.refreshed = Some((Instant::now(), sql_running));
            if g.pid.is_none() {
                g.pid = g.appliers.first().and_then(|t| threads::server_process_of(*t));
            }
        }
        let Some(pid) = g.pid else { return };
        let first = !std::mem::replace(&mut g.counted, true);
        let Inner { appliers, applier_seen, readers, reader_seen, .. } = &mut *g;
        // At the first look the applier's past reads are not ours to count;
        // a thread found later started since. A reader's thread counts from
        // its first look (it served other connections before).
        let applier = applier_seen.read_since(pid, appliers, first);
        let tids: Vec<i32> = readers.values().copied().collect();
        let prefetch = reader_seen.read_since(pid, &tids, true);
        counters.reads_attributed.store(u64::from(g.readers_do_all), Relaxed);
        counters.applier_read_bytes.fetch_add(applier, Relaxed);
        counters.prefetch_read_bytes.fetch_add(prefetch, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_counts_from_its_first_look_or_from_its_birth() {
        let mut s = Seen::default();
        // Seen at the start with 1 MB read before: none of it counts.
        assert_eq!(s.observe(7, 1_000_000, 1_000_000), 0);
        assert_eq!(s.observe(7, 1_016_384, 0), 16_384);
        // Born since the last look: everything it read counts.
        assert_eq!(s.observe(8, 32_768, 0), 32_768);
        // A counter that went backwards (a reused id) adds nothing.
        assert_eq!(s.observe(8, 100, 0), 0);
        s.keep_only(&[7]);
        assert_eq!(s.observe(8, 200, 0), 200, "a forgotten thread starts again");
    }

    #[test]
    fn this_process_is_not_a_server() {
        // A thread id that is not a server's gives no process to read.
        assert_eq!(threads::server_process_of(std::process::id() as i32), None);
    }
}
