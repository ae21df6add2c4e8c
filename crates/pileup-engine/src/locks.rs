//! Lock owners: for threads blocked in a futex, work out what kind of lock they
//! wait on and, where the lock records it, which thread holds it.
//!
//! What can be resolved, and how:
//! * **pthread mutexes** (`mysql_mutex_t`: LOCK_open, LOCK_thd_data, …):
//!   glibc stores the owner's tid in `__owner` (offset 8), so the holder is
//!   exact at the moment of the capture.
//! * **pthread rwlocks held for writing** (`mysql_rwlock_t`, `mysql_prlock_t`
//!   writers): glibc stores the writer in `__cur_writer`. Read-held rwlocks do
//!   not record their readers.
//!
//! What cannot, and is reported as such:
//! * condition variables (MDL, table locks, InnoDB row locks, thread pools):
//!   a waiter does not know whom it waits for; SQL views (InnoDB lock waits,
//!   metadata_lock_info) tell, and `pileup watch` reads them;
//! * InnoDB's own futex locks (`srw_mutex`, `ssux_lock`, `srw_lock`) record no
//!   owner in release builds;
//! * readers of an rwlock.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use crate::frames::{self, FrameClass};
use crate::regs::FUTEX_BEFORE;

/// What kind of lock a futex waiter waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockKind {
    /// A pthread mutex (`mysql_mutex_t`): the lock records its owner's tid.
    PthreadMutex,
    /// A pthread rwlock (`mysql_rwlock_t`, `mysql_prlock_t`): a writer is
    /// recorded, readers are not.
    PthreadRwlock,
    /// A condition variable wait (MDL, table and row locks, thread pools): no owner is recorded.
    Condition,
    /// One of InnoDB's own futex locks (`srw_mutex`, `ssux_lock`, `srw_lock`):
    /// no owner in release builds.
    InnodbSrwLock,
    /// InnoDB's group commit waiter (log0sync.cc): a per-thread semaphore
    /// a committing thread sleeps on until the redo log it needs is written.
    InnodbLogWait,
    /// A futex wait pileup does not recognise as a lock.
    Futex,
}

impl LockKind {
    /// The kind's name in words (`pthread mutex`, `InnoDB srw lock`, …).
    pub fn describe(&self) -> &'static str {
        match self {
            LockKind::PthreadMutex => "pthread mutex",
            LockKind::PthreadRwlock => "pthread rwlock",
            LockKind::Condition => "condition variable",
            LockKind::InnodbSrwLock => "InnoDB srw lock",
            LockKind::InnodbLogWait => "InnoDB group commit wait",
            LockKind::Futex => "futex",
        }
    }
    /// Whether an owner can be read from memory for this kind.
    pub fn resolvable(&self) -> bool {
        matches!(self, LockKind::PthreadMutex | LockKind::PthreadRwlock)
    }
    /// Why a wait of this kind names no owner, in words.
    pub fn why_unresolved(&self) -> &'static str {
        match self {
            LockKind::PthreadMutex => "held, but its owner field names no thread of this process",
            LockKind::PthreadRwlock => "held by readers, which glibc does not record",
            LockKind::Condition => {
                "a condition wait records no owner (MDL, table and row locks: see the SQL lock views)"
            }
            LockKind::InnodbSrwLock => "InnoDB srw locks record no owner in release builds",
            LockKind::InnodbLogWait => "it waits for the redo log write or flush its commit needs, done by whichever thread leads the group commit",
            LockKind::Futex => "not a lock pileup recognises",
        }
    }
}

/// What one thread waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockWait {
    /// The kind of lock, from the thread's innermost frames.
    pub kind: LockKind,
    /// Address of the lock (the futex word's lock, not always the futex itself).
    pub addr: u64,
    /// The thread holding the lock, when the lock records one that is a thread of the process.
    pub owner_tid: Option<i32>,
    /// For a pthread mutex: the lock word was 0 at the capture instant.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub free: bool,
}

/// Classify a futex wait from the thread's innermost frame labels and the bytes
/// around the futex word. `tids` are the process's threads (owner sanity check).
pub fn classify(labels: &[&str], futex_addr: u64, window: &[u8], tids: &HashSet<i32>, self_tid: i32) -> LockWait {
    let top: Vec<&str> = labels.iter().take(8).copied().collect();
    let has = |class: FrameClass| frames::first_class(top.iter().copied(), |c| c == class).is_some();
    let u32_at = |off: usize| window.get(off..off + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let b = FUTEX_BEFORE as usize;
    let valid = |t: u32| {
        let t = (t & 0x3fff_ffff) as i32; // robust mutexes keep flags in the top bits
        (t != 0 && t != self_tid && tids.contains(&t)).then_some(t)
    };
    if has(FrameClass::CondWait) {
        return LockWait { kind: LockKind::Condition, addr: futex_addr, owner_tid: None, free: false };
    }
    if has(FrameClass::RwlockWait) {
        // Waiters sleep on __wrphase_futex (+8) or __writers_futex (+12); the
        // writer's tid is __cur_writer (+24). Try both layouts.
        for field in [8u64, 12] {
            let base = futex_addr.wrapping_sub(field);
            let off = b - field as usize + 24;
            if let Some(t) = u32_at(off).and_then(valid) {
                return LockWait { kind: LockKind::PthreadRwlock, addr: base, owner_tid: Some(t), free: false };
            }
        }
        return LockWait {
            kind: LockKind::PthreadRwlock,
            addr: futex_addr.wrapping_sub(12),
            owner_tid: None,
            free: false,
        };
    }
    if has(FrameClass::MutexWait) {
        let lock_word = u32_at(b).unwrap_or(0);
        let owner = if lock_word != 0 { u32_at(b + 8).and_then(valid) } else { None };
        return LockWait { kind: LockKind::PthreadMutex, addr: futex_addr, owner_tid: owner, free: lock_word == 0 };
    }
    if has(FrameClass::Latch) {
        return LockWait { kind: LockKind::InnodbSrwLock, addr: futex_addr, owner_tid: None, free: false };
    }
    LockWait { kind: LockKind::Futex, addr: futex_addr, owner_tid: None, free: false }
}

/// All threads waiting on one lock.
#[derive(Debug, Clone, Serialize)]
pub struct LockGroup {
    /// The kind of lock.
    pub kind: LockKind,
    /// Address of the lock.
    pub addr: u64,
    /// Distinct threads seen waiting on it (over all samples).
    pub waiters: Vec<i32>,
    /// Each wait seen (the first [`WAITS_KEPT`]): the sample it was seen in
    /// and the waiting thread.
    pub waits: Vec<WaitSeen>,
    /// The first waiter's frame labels at its wait, innermost first.
    pub waiting_in: Vec<String>,
    /// Their addresses (to name them again when debug info arrives late).
    #[serde(skip)]
    pub waiting_in_addrs: Vec<u64>,
    /// The most threads waiting on it in one sample.
    pub most_at_once: usize,
    /// The thread holding the lock, when the lock records it.
    pub owner_tid: Option<i32>,
    /// The sample the owner was read in.
    pub owner_sample: Option<usize>,
    /// The owner as it was in that sample: its frame labels (innermost
    /// first) and its SQL connection's statement or its thread name; `None`
    /// when the owner was not among the sampled threads.
    pub holder_stack: Option<Vec<String>>,
    /// The owner's lookup addresses, innermost first (to name its frames again
    /// when debug info arrives late).
    #[serde(skip)]
    pub holder_addrs: Vec<u64>,
    /// The owner's SQL connection summary, or its thread name without one.
    pub holder: Option<String>,
    /// The mutex was free at the capture instant while threads still slept
    /// on it: a convoy (released, next waiter not yet running).
    pub free: bool,
    /// Why the owner is unknown, when it is.
    pub unresolved_reason: Option<String>,
    /// In how many samples this lock was seen with these waiters' owner.
    pub samples: usize,
}

/// One thread seen waiting in one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WaitSeen {
    /// [`crate::Sample::index`].
    pub sample: usize,
    /// The waiting thread.
    pub tid: i32,
}

/// Waits kept per lock group: a run of hours sees a lock's waits many
/// thousand times; the count that matters is in `samples` and `waiters`.
pub const WAITS_KEPT: usize = 256;
/// Distinct waiters kept per group, and groups kept in all (the most
/// waited-on): a hot mutex changes owner all the time, and each owner is a
/// group of its own.
pub const WAITERS_KEPT: usize = 4096;
pub const GROUPS_KEPT: usize = 200;

/// Merge per-sample groups of the same lock and owner (waiters: distinct threads).
pub fn merge(groups: Vec<LockGroup>) -> Vec<LockGroup> {
    let mut m: BTreeMap<(LockKind, u64, Option<i32>), LockGroup> = BTreeMap::new();
    for g in groups {
        match m.get_mut(&(g.kind, g.addr, g.owner_tid)) {
            Some(e) => {
                e.waiters.extend(g.waiters);
                e.waiters.sort_unstable();
                e.waiters.dedup();
                e.waiters.truncate(WAITERS_KEPT);
                let room = WAITS_KEPT.saturating_sub(e.waits.len());
                e.waits.extend(g.waits.into_iter().take(room));
                e.most_at_once = e.most_at_once.max(g.most_at_once);
                e.samples += g.samples;
                e.free &= g.free;
                if e.waiting_in.is_empty() {
                    (e.waiting_in, e.waiting_in_addrs) = (g.waiting_in, g.waiting_in_addrs);
                }
                if e.holder_stack.is_none() {
                    (e.holder_stack, e.holder, e.holder_addrs) = (g.holder_stack, g.holder, g.holder_addrs);
                }
            }
            None => {
                m.insert((g.kind, g.addr, g.owner_tid), g);
            }
        }
    }
    let mut v: Vec<LockGroup> = m.into_values().collect();
    v.sort_by(|a, b| {
        (b.most_at_once, b.samples, b.waiters.len())
            .cmp(&(a.most_at_once, a.samples, a.waiters.len()))
            .then(a.addr.cmp(&b.addr))
    });
    v.truncate(GROUPS_KEPT);
    v
}

/// Group waits by lock, most waiters first. Only kinds that are locks (not
/// plain futexes or idle condition waits with one waiter) are reported.
/// `waits` are the futex waits of one sample, `sample` its index.
pub fn group(waits: &[(i32, LockWait)], sample: usize) -> Vec<LockGroup> {
    let mut m: BTreeMap<(LockKind, u64), LockGroup> = BTreeMap::new();
    for (tid, w) in waits {
        let g = m.entry((w.kind, w.addr)).or_insert_with(|| LockGroup {
            kind: w.kind,
            addr: w.addr,
            waiters: vec![],
            waits: vec![],
            waiting_in: vec![],
            waiting_in_addrs: vec![],
            most_at_once: 0,
            owner_tid: None,
            owner_sample: None,
            holder_stack: None,
            holder_addrs: vec![],
            holder: None,
            free: w.free,
            unresolved_reason: None,
            samples: 1,
        });
        g.waiters.push(*tid);
        g.waits.push(WaitSeen { sample, tid: *tid });
        g.most_at_once += 1;
        g.free &= w.free;
        if g.owner_tid.is_none() && w.owner_tid.is_some() {
            g.owner_tid = w.owner_tid;
            g.owner_sample = Some(sample);
        }
    }
    let mut v: Vec<LockGroup> = m
        .into_values()
        .filter(|g| g.kind.resolvable() || (g.kind == LockKind::InnodbSrwLock && g.waiters.len() > 1))
        .map(|mut g| {
            g.waiters.sort_unstable();
            if g.owner_tid.is_none() {
                g.unresolved_reason = Some(if g.free {
                    "free at the capture instant while threads still sleep on it: a convoy (the holder released it and the woken waiter has not run yet)".to_string()
                } else {
                    g.kind.why_unresolved().to_string()
                });
            }
            g
        })
        .collect();
    v.sort_by(|a, b| b.waiters.len().cmp(&a.waiters.len()).then(a.addr.cmp(&b.addr)));
    v
}

/// A waiter copied after the rest of its snapshot was let go (it was
/// queued for a CPU until then): its lock word was read at that later stop,
/// so it names no owner and does not tell whether the lock was free.
pub fn read_late(w: LockWait) -> LockWait {
    LockWait { owner_tid: None, free: false, ..w }
}

/// [`group`], where the waiters in `late` were copied late: their lock
/// words do not count towards a lock being free, and a lock whose owner
/// could have been read but whose waiters were all copied late says so.
pub fn group_with_late(waits: &[(i32, LockWait)], late: &HashSet<i32>, sample: usize) -> Vec<LockGroup> {
    // A lock is free when every waiter read it free: a late waiter counts
    // as agreeing.
    let neutral: Vec<(i32, LockWait)> = waits
        .iter()
        .map(|(t, w)| (*t, if late.contains(t) { LockWait { free: true, ..w.clone() } } else { w.clone() }))
        .collect();
    let mut groups = group(&neutral, sample);
    for g in &mut groups {
        if g.waiters.iter().all(|t| late.contains(t)) {
            g.free = false;
            if g.kind.resolvable() {
                g.unresolved_reason = Some(
                    "its waiters were queued for a CPU and stopped after the rest of the snapshot was let go: the owner at the snapshot's instant is not known".into(),
                );
            } else {
                g.unresolved_reason = Some(g.kind.why_unresolved().to_string());
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(words: &[(usize, u32)]) -> Vec<u8> {
        let mut w = vec![0u8; 48];
        for &(off, v) in words {
            w[off..off + 4].copy_from_slice(&v.to_le_bytes());
        }
        w
    }

    #[test]
    fn mutex_owner_from_glibc_layout() {
        let tids: HashSet<i32> = [10, 11, 12].into();
        let w = window(&[(16, 2), (24, 12)]); // __lock = 2 (contended), __owner = 12
        let lw = classify(&["__lll_lock_wait", "___pthread_mutex_lock", "do_work"], 0x1000, &w, &tids, 11);
        assert_eq!(lw, LockWait { kind: LockKind::PthreadMutex, addr: 0x1000, owner_tid: Some(12), free: false });
        // owner not a thread of the process: unresolved rather than wrong
        let w = window(&[(16, 2), (24, 999)]);
        assert_eq!(classify(&["__lll_lock_wait"], 0x1000, &w, &tids, 11).owner_tid, None);
        // released lock word: no owner, and marked free (a convoy)
        let w = window(&[(16, 0), (24, 12)]);
        let lw = classify(&["__lll_lock_wait"], 0x1000, &w, &tids, 11);
        assert_eq!((lw.owner_tid, lw.free), (None, true));
        let g = group(&[(11, lw.clone()), (10, lw)], 0);
        assert!(g[0].unresolved_reason.as_deref().unwrap().contains("convoy"));
    }

    #[test]
    fn rwlock_writer_and_condvar() {
        let tids: HashSet<i32> = [10, 11, 12].into();
        // waiter on __writers_futex (+12): window starts at futex-16 → lock base at offset 4, __cur_writer at 4+24=28
        let w = window(&[(28, 10)]);
        let lw =
            classify(&["futex_wait", "__pthread_rwlock_wrlock_full64", "pthread_rwlock_wrlock"], 0x200c, &w, &tids, 11);
        assert_eq!(lw, LockWait { kind: LockKind::PthreadRwlock, addr: 0x2000, owner_tid: Some(10), free: false });
        let lw = classify(
            &["__futex_abstimed_wait_common", "___pthread_cond_wait", "MDL_wait::timed_wait"],
            0x3000,
            &w,
            &tids,
            11,
        );
        assert_eq!(lw.kind, LockKind::Condition);
        assert_eq!(lw.owner_tid, None);
    }

    #[test]
    fn grouping_orders_by_waiters() {
        let a = LockWait { kind: LockKind::PthreadMutex, addr: 1, owner_tid: Some(9), free: false };
        let b = LockWait { kind: LockKind::PthreadMutex, addr: 2, owner_tid: None, free: false };
        let c = LockWait { kind: LockKind::Condition, addr: 3, owner_tid: None, free: false };
        let g = group(&[(1, b.clone()), (2, a.clone()), (3, a.clone()), (4, c)], 0);
        assert_eq!(g.len(), 2, "idle condition waits are not lock groups");
        assert_eq!(
            (g[0].addr, g[0].waiters.clone(), g[0].owner_tid, g[0].owner_sample),
            (1, vec![2, 3], Some(9), Some(0))
        );
        assert!(g[1].unresolved_reason.is_some());
        // The same lock and owner in two samples is one group; each wait
        // keeps the sample it was seen in, so its stack is the one at the wait.
        let m = merge(group(&[(2, a.clone())], 4).into_iter().chain(group(&[(3, a.clone()), (5, a)], 7)).collect());
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].waiters.clone(), m[0].samples, m[0].most_at_once), (vec![2, 3, 5], 2, 2));
        let seen = |sample, tid| WaitSeen { sample, tid };
        assert_eq!(m[0].waits, vec![seen(4, 2), seen(7, 3), seen(7, 5)]);
        assert_eq!(m[0].owner_sample, Some(4), "the owner as first read");
        // One thread in each of three samples is not three at once.
        let m = merge((0..3).flat_map(|i| group(&[(20 + i, b.clone())], i as usize)).collect());
        assert_eq!((m[0].waiters.len(), m[0].most_at_once), (3, 1));
    }

    #[test]
    fn a_late_waiter_names_no_owner() {
        let tids: HashSet<i32> = [10, 11, 12].into();
        let held = classify(&["__lll_lock_wait"], 0x1000, &window(&[(16, 2), (24, 12)]), &tids, 11);
        let freed = classify(&["__lll_lock_wait"], 0x1000, &window(&[(16, 0)]), &tids, 10);
        assert!(freed.free);
        // Only late waiters: no owner, not free, and the reason is theirs.
        let late: HashSet<i32> = [10, 11].into();
        let g = group_with_late(&[(11, read_late(held.clone())), (10, read_late(freed.clone()))], &late, 0);
        assert_eq!((g[0].owner_tid, g[0].free), (None, false));
        assert!(g[0].unresolved_reason.as_deref().unwrap().contains("queued for a CPU"), "{g:?}");
        // A waiter copied in the snapshot still names the owner.
        let late: HashSet<i32> = [10].into();
        let g = group_with_late(&[(11, held.clone()), (10, read_late(freed.clone()))], &late, 0);
        assert_eq!((g[0].owner_tid, g[0].unresolved_reason.as_deref()), (Some(12), None));
        // A convoy seen by the snapshot's waiters stays a convoy with a late
        // waiter beside them.
        let late: HashSet<i32> = [11].into();
        let g = group_with_late(&[(10, freed.clone()), (12, freed), (11, read_late(held))], &late, 0);
        assert!(g[0].free, "{g:?}");
        assert!(g[0].unresolved_reason.as_deref().unwrap().contains("convoy"), "{g:?}");
        // A kind that never has an owner keeps its own reason.
        let srw = LockWait { kind: LockKind::InnodbSrwLock, addr: 5, owner_tid: None, free: false };
        let late: HashSet<i32> = [10, 11].into();
        let g = group_with_late(&[(10, srw.clone()), (11, srw)], &late, 0);
        assert!(g[0].unresolved_reason.as_deref().unwrap().contains("release builds"), "{g:?}");
    }
}
