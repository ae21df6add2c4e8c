//! Where the applier is against the work in flight. The loop says which
//! event the applier is about to apply; the readers and the page warmer
//! skip jobs it has passed (their pages are already read) and mark their
//! jobs done, so the loop can tell how far ahead the warming is complete.
//!
//! Events are numbered in reading order (`seq`); a job carries the number
//! of the last event whose reads are in it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct Progress {
    /// The event the applier is about to apply, as of the last poll.
    applier_seq: AtomicU64,
    /// Jobs queued or running, by the number of their last event.
    pending: Mutex<BTreeMap<u64, u32>>,
    /// The newest event number queued.
    issued_seq: AtomicU64,
}

impl Progress {
    /// The applier is about to apply event number `seq`.
    pub fn applier_at(&self, seq: u64) {
        self.applier_seq.store(seq, Ordering::Relaxed);
    }

    /// Has the applier passed every event up to number `seq` (a job's
    /// last event)? The event it is about to apply is not passed.
    pub fn passed(&self, seq: u64) -> bool {
        seq < self.applier_seq.load(Ordering::Relaxed)
    }

    /// A job for events up to `seq` was queued; it is done when its
    /// [`JobDone`] is dropped (or [`Progress::job_done`] is called).
    pub fn job_queued(&self, seq: u64) {
        *self.pending.lock().unwrap().entry(seq).or_default() += 1;
        self.issued_seq.fetch_max(seq, Ordering::Relaxed);
    }

    pub fn job_done(&self, seq: u64) {
        let mut p = self.pending.lock().unwrap();
        if let Some(n) = p.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                p.remove(&seq);
            }
        }
    }

    /// Every lookup for events up to this number has completed (jobs
    /// finish out of order across readers: the oldest unfinished one bounds
    /// it).
    pub fn done_through(&self) -> u64 {
        match self.pending.lock().unwrap().keys().next() {
            Some(&oldest) => oldest.saturating_sub(1),
            None => self.issued_seq.load(Ordering::Relaxed),
        }
    }
}

/// Marks a job finished however its worker leaves it (done, dropped,
/// failed).
pub struct JobDone<'a> {
    pub progress: &'a Progress,
    pub seq: u64,
}

impl Drop for JobDone<'_> {
    fn drop(&mut self) {
        self.progress.job_done(self.seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_the_applier_passed_are_stale() {
        let c = Progress::default();
        assert!(!c.passed(0) && !c.passed(5), "nothing is passed before the first poll");
        c.applier_at(10);
        assert!(c.passed(9), "every event of the job is behind the applier");
        assert!(!c.passed(10), "the applier has not applied its last event yet");
        assert!(!c.passed(11));
        // A jump puts the applier past everything read so far.
        c.applier_at(31);
        assert!(c.passed(30));
    }

    #[test]
    fn warmed_through_the_oldest_unfinished_job() {
        let c = Progress::default();
        assert_eq!(c.done_through(), 0);
        for seq in [10, 20, 20, 30] {
            c.job_queued(seq);
        }
        assert_eq!(c.done_through(), 9, "nothing finished: warm only before the first job");
        // Readers finish out of order: the job for 30 is done, 10 and 20 are not.
        c.job_done(30);
        assert_eq!(c.done_through(), 9);
        c.job_done(10);
        assert_eq!(c.done_through(), 19);
        c.job_done(20);
        assert_eq!(c.done_through(), 19, "one of the two jobs for 20 is still running");
        drop(JobDone { progress: &c, seq: 20 });
        assert_eq!(c.done_through(), 30, "all done: up to the newest queued");
    }
}
