//! Annotate: what a recorded wait waited on. The kind of lock comes from
//! the waiter's innermost frames (the stacks engine's classification of
//! pthread mutexes, rwlocks and condition variables), and, where the
//! server's code is unnamed, from how the wait was made; the holder from
//! the lock's owner field as it was when the wait began; the lock's name
//! from where its address lies, or, for a lock on the heap, from the
//! function that takes it.

use std::collections::HashSet;

use pileup_engine::analysis::classify_lock_wait as classify;
use pileup_engine::Frame;
use pileup_engine::{LockKind, LockWait};

use crate::event::Event;

/// Classify one wait from its named frames (innermost first).
pub fn lock_wait(frames: &[Frame], e: &Event, tids: &HashSet<i32>) -> LockWait {
    let labels: Vec<&str> = frames.iter().map(|f| f.label.as_str()).collect();
    let w = classify(&labels, e.uaddr, &e.window, tids, e.tid);
    if w.kind != LockKind::Futex {
        return w;
    }
    // The server's SQL layer waits through pthread functions; only InnoDB
    // (MariaDB 10.6+) calls futex itself, through libc's syscall(), with
    // FUTEX_WAIT_PRIVATE, and its frames are unnamed on a stripped server.
    // What it expects in the word tells which wait it is:
    // * 0: the group commit waiter (log0sync.cc binary_semaphore);
    // * bit 31 set: an ssux_lock's exclusive waiter waiting for its readers
    //   (WRITER = 1 << 31), or, in releases before the lock word moved its
    //   holder flag to bit 0, an srw_mutex (HOLDER = 1 << 31);
    // * odd, 3 or more: an srw_mutex held (HOLDER = 1) with waiters (2 each),
    //   which is also how ssux_lock's writers and blocked readers wait.
    let from_server =
        frames.get(1).and_then(|f| f.module.as_deref()).is_some_and(pileup_engine::process::is_server_name);
    if labels.first() != Some(&"syscall") || !from_server || e.op & 127 != 0 {
        return w;
    }
    let kind = match e.val {
        0 => LockKind::InnodbLogWait,
        v if v & 0x8000_0000 != 0 || (v & 1 == 1 && v >= 3) => LockKind::InnodbSrwLock,
        _ => return w,
    };
    LockWait { kind, ..w }
}

/// Frames that are the locking machinery itself, not the code that takes
/// the lock: libc's and the server's lock wrappers.
fn is_machinery(f: &Frame) -> bool {
    let libc = f.module.as_deref().is_some_and(|m| m.starts_with("libc.") || m.starts_with("libpthread"));
    libc || [
        "inline_mysql_mutex_lock",
        "inline_mysql_rwlock",
        "inline_mysql_prlock",
        "inline_mysql_cond",
        "psi_mutex_lock",
        "psi_rwlock",
        "psi_cond",
        "safe_mutex_lock",
        "srw_mutex_impl",
        "ssux_lock_impl",
        "srw_lock_impl",
        "sux_lock",
        "::wait_and_lock",
        "::wr_lock",
        "::rd_lock",
        "::u_lock",
        "::x_lock",
        "::s_lock",
        "rw_pr_",
        "my_cond_",
    ]
    .iter()
    .any(|p| f.label.contains(p))
}

/// Where the lock is taken: the first frame outside the locking machinery,
/// and, if that one is unnamed, the first named frame above it.
/// A lock libc takes for its caller (malloc's arena locks) is named as
/// libc's, with the caller.
pub fn taken_in(frames: &[Frame]) -> Option<String> {
    let i = frames.iter().position(|f| !is_machinery(f))?;
    let first = &frames[i];
    let at = if first.function.is_some() {
        first.label.clone()
    } else {
        match frames[i + 1..].iter().find(|f| f.function.is_some()) {
            Some(named) => format!("{} (in {})", first.label, named.label),
            None => first.label.clone(),
        }
    };
    let malloc = frames[..i].iter().find(|f| {
        let l = f.label.trim_start_matches("__libc_").trim_start_matches('_');
        ["malloc", "free", "calloc", "realloc", "int_malloc", "int_free", "arena_get", "tcache"]
            .iter()
            .any(|m| l.starts_with(m))
    });
    Some(match malloc {
        Some(f) => format!("libc {} (malloc arena lock) for {at}", f.label),
        None => at,
    })
}

/// Why a lock's holder cannot be told, by kind.
pub fn holder_note(kind: LockKind) -> Option<&'static str> {
    (!kind.resolvable()).then(|| kind.why_unresolved())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Record, RECORD_BYTES, WINDOW_BEFORE};

    fn frame(label: &str, module: &str, named: bool) -> Frame {
        Frame {
            function: named.then(|| label.to_string()),
            label: label.into(),
            module: Some(module.into()),
            svma: None,
            file: None,
            line: None,
            inlined: false,
        }
    }

    fn event(op: u32, val: u32, owner: u32) -> Event {
        let mut b = vec![0u8; RECORD_BYTES];
        b[0] = 1; // a start record
        let Some(Record::Start(mut e)) = Record::decode(&b) else { panic!("a start record") };
        e.uaddr = 0x1000;
        e.tid = 7;
        e.op = op;
        e.val = val;
        let b = WINDOW_BEFORE as usize;
        e.window[b..b + 4].copy_from_slice(&2u32.to_le_bytes());
        e.window[b + 8..b + 12].copy_from_slice(&owner.to_le_bytes());
        e
    }

    #[test]
    fn a_mutex_wait_names_its_owner_and_its_taker() {
        let frames = vec![
            frame("__futex_abstimed_wait_common", "libc.so.6", true),
            frame("__lll_lock_wait", "libc.so.6", true),
            frame("pthread_mutex_lock", "libc.so.6", true),
            frame("fill_variables", "mariadbd", true),
            frame("mysql_execute_command", "mariadbd", true),
        ];
        let tids: HashSet<i32> = [7, 9].into();
        let w = lock_wait(&frames, &event(128, 2, 9), &tids);
        assert_eq!((w.kind, w.owner_tid), (LockKind::PthreadMutex, Some(9)));
        assert_eq!(taken_in(&frames).as_deref(), Some("fill_variables"));
        assert_eq!(holder_note(w.kind), None);
    }

    #[test]
    fn an_unnamed_syscall_wait_with_the_holder_bit_is_an_innodb_lock() {
        let frames = vec![
            frame("syscall", "libc.so.6", true),
            frame("mariadbd+0x9a1230", "mariadbd", false),
            frame("mariadbd+0x9b0000", "mariadbd", false),
            frame("handler::ha_write_row", "mariadbd", true),
        ];
        let tids: HashSet<i32> = [7].into();
        let w = lock_wait(&frames, &event(128, 0x8000_0001, 0), &tids);
        assert_eq!(w.kind, LockKind::InnodbSrwLock);
        assert!(holder_note(w.kind).is_some());
        assert_eq!(taken_in(&frames).as_deref(), Some("mariadbd+0x9a1230 (in handler::ha_write_row)"));
        // The later lock word: holder bit 0, two per waiter.
        assert_eq!(lock_wait(&frames, &event(128, 127, 0), &tids).kind, LockKind::InnodbSrwLock);
        // The group commit waiter expects 0.
        assert_eq!(lock_wait(&frames, &event(128, 0, 0), &tids).kind, LockKind::InnodbLogWait);
        // Anything else is some other futex.
        assert_eq!(lock_wait(&frames, &event(128, 2, 0), &tids).kind, LockKind::Futex);
        assert_eq!(lock_wait(&frames, &event(137, 0x8000_0001, 0), &tids).kind, LockKind::Futex);
    }

    #[test]
    fn a_condition_wait_is_labelled_so() {
        let frames = vec![
            frame("__futex_abstimed_wait_common", "libc.so.6", true),
            frame("pthread_cond_timedwait", "libc.so.6", true),
            frame("MDL_wait::timed_wait", "mariadbd", true),
        ];
        let w = lock_wait(&frames, &event(393, 0, 0), &HashSet::new());
        assert_eq!(w.kind, LockKind::Condition);
        assert_eq!(taken_in(&frames).as_deref(), Some("MDL_wait::timed_wait"));
    }

    #[test]
    fn malloc_arena_locks_are_named_as_libc_s() {
        let frames = vec![
            frame("__lll_lock_wait_private", "libc.so.6", true),
            frame("_int_free", "libc.so.6", true),
            frame("my_free", "mariadbd", true),
        ];
        assert_eq!(taken_in(&frames).as_deref(), Some("libc _int_free (malloc arena lock) for my_free"));
    }
}
