//! Frame classes: the one table of which frames mean a thread waits on a
//! lock, a condition, the disk, or is extending a file. Every tool that
//! reads a stack for what the thread was doing (`stacks`' where-time-went,
//! lock waits, `lag`'s categories, `watch`'s stall classes) asks here.
//!
//! The names are the C library's wait and I/O primitives (their glibc
//! internal names vary: `___pthread_mutex_lock`, `__GI___lll_lock_wait`,
//! `__libc_pread64`), MariaDB's exported InnoDB latch and file functions,
//! and the raw `syscall` wrapper InnoDB's own latches wait through. They
//! are names a stripped server still exports; frames a binary does not
//! name (`mariadbd+0x…`) match nothing.

/// What a frame says its thread was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameClass {
    /// Waiting on a condition variable (for work, or for a lock the SQL
    /// layer keeps: metadata, table and row locks wait here).
    CondWait,
    /// Waiting for a pthread rwlock.
    RwlockWait,
    /// Waiting for a pthread mutex.
    MutexWait,
    /// In one of InnoDB's own latches (`srw_lock`, `ssux_lock`).
    Latch,
    /// A futex wait with no more said (or the `syscall` wrapper InnoDB's
    /// latches wait through).
    FutexWait,
    /// A semaphore wait.
    SemWait,
    /// Reading a file: the C library's read call.
    DiskRead,
    /// InnoDB reading a page (its functions above the read call; threads
    /// also wait in them for the latch of a page another thread reads).
    PageRead,
    /// Writing a file.
    DiskWrite,
    /// Flushing a file to the device.
    DiskSync,
    /// Waiting for asynchronous I/O to complete.
    AsyncIoWait,
    /// Extending a data file.
    FileExtend,
    /// A connection waiting for its client's next statement (idle, not
    /// the server's time).
    ClientWait,
    /// Asleep in the kernel for an event or a time: `poll`, `epoll_wait`,
    /// `select`, `accept`, `nanosleep` (a listener, a timer, a thread
    /// with nothing to do).
    EventWait,
}

impl FrameClass {
    /// A wait for a lock (not a condition): mutex, rwlock, latch or futex.
    pub fn is_lock_wait(self) -> bool {
        matches!(self, FrameClass::RwlockWait | FrameClass::MutexWait | FrameClass::Latch | FrameClass::FutexWait)
    }

    /// Any sleep on a futex: a lock, a condition or a semaphore.
    pub fn is_wait(self) -> bool {
        self.is_lock_wait() || matches!(self, FrameClass::CondWait | FrameClass::SemWait)
    }

    /// Any file I/O, or waiting for it.
    pub fn is_disk(self) -> bool {
        matches!(
            self,
            FrameClass::DiskRead
                | FrameClass::PageRead
                | FrameClass::DiskWrite
                | FrameClass::DiskSync
                | FrameClass::AsyncIoWait
                | FrameClass::FileExtend
        )
    }
}

#[derive(Clone, Copy)]
enum Match {
    Exact,
    Prefix,
    Contains,
}

use FrameClass as C;
use Match::{Contains, Exact, Prefix};

/// The table, searched in order (the first match wins).
const TABLE: &[(&str, Match, FrameClass)] = &[
    // Conditions before locks: a condition wait re-takes its mutex inside.
    ("pthread_cond_wait", Contains, C::CondWait),
    ("pthread_cond_timedwait", Contains, C::CondWait),
    ("pthread_cond_clockwait", Contains, C::CondWait),
    ("pthread_rwlock_", Contains, C::RwlockWait),
    ("pthread_mutex_lock", Contains, C::MutexWait),
    ("pthread_mutex_timedlock", Contains, C::MutexWait),
    ("pthread_mutex_clocklock", Contains, C::MutexWait),
    ("lll_lock", Contains, C::MutexWait),
    ("srw_mutex_impl", Contains, C::Latch),
    ("ssux_lock_impl", Contains, C::Latch),
    ("srw_lock", Contains, C::Latch),
    ("sux_lock", Contains, C::Latch),
    ("srw_spin", Contains, C::Latch),
    ("futex", Contains, C::FutexWait),
    ("syscall", Exact, C::FutexWait),
    ("sem_wait", Contains, C::SemWait),
    ("sem_timedwait", Contains, C::SemWait),
    // Extending before writing: zero-filling writes run inside these.
    ("fsp_try_extend_data_file", Prefix, C::FileExtend),
    ("fil_space_extend", Prefix, C::FileExtend),
    ("os_file_set_size", Prefix, C::FileExtend),
    ("posix_fallocate", Contains, C::FileExtend),
    ("fallocate64", Exact, C::FileExtend),
    ("fallocate", Exact, C::FileExtend),
    ("fdatasync", Contains, C::DiskSync),
    ("fsync", Contains, C::DiskSync),
    ("pread", Contains, C::DiskRead),
    ("buf_read_page", Contains, C::PageRead),
    ("os_file_read", Contains, C::PageRead),
    ("fil_io", Contains, C::PageRead),
    ("pwrite", Contains, C::DiskWrite),
    ("io_uring_wait", Prefix, C::AsyncIoWait),
    ("__io_uring_get_cqe", Prefix, C::AsyncIoWait),
    ("io_getevents", Contains, C::AsyncIoWait),
    // The network layer's wait for a client packet (under vio_read /
    // my_net_read_packet): `poll` on the socket.
    ("vio_io_wait", Exact, C::ClientWait),
    ("vio_socket_io_wait", Exact, C::ClientWait),
];

/// The C library's calls that sleep for an event or a time, by the name
/// its wrappers end in (`__poll`, `__GI___poll`, `__clock_nanosleep`).
const EVENT_WAITS: &[&str] = &[
    "poll",
    "ppoll",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "select",
    "pselect",
    "pselect6",
    "accept",
    "accept4",
    "nanosleep",
    "clock_nanosleep",
    "sigtimedwait",
    "sigwaitinfo",
    "pause",
];

/// Whether `label` is one of [`EVENT_WAITS`], under the C library's
/// prefixes (`__`, `__GI_`, `__libc_`).
fn event_wait(label: &str) -> bool {
    let mut l = label.trim_start_matches('_');
    for p in ["GI_", "libc_"] {
        l = l.strip_prefix(p).map_or(l, |r| r.trim_start_matches('_'));
    }
    EVENT_WAITS.contains(&l)
}

/// The class of a frame, by its label.
pub fn class_of(label: &str) -> Option<FrameClass> {
    if event_wait(label) {
        return Some(FrameClass::EventWait);
    }
    TABLE
        .iter()
        .find(|(name, how, _)| match how {
            Exact => label == *name,
            Prefix => label.starts_with(name),
            Contains => label.contains(name),
        })
        .map(|&(_, _, c)| c)
}

/// Whether a frame is of a class that `want` accepts.
pub fn is(label: &str, want: impl Fn(FrameClass) -> bool) -> bool {
    class_of(label).is_some_and(want)
}

/// The first class among `labels` (innermost first) that `want` accepts.
pub fn first_class<'a>(
    labels: impl IntoIterator<Item = &'a str>,
    want: impl Fn(FrameClass) -> bool,
) -> Option<FrameClass> {
    labels.into_iter().filter_map(class_of).find(|c| want(*c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_librarys_internal_names_and_innodbs_exports_are_classed() {
        assert_eq!(class_of("___pthread_mutex_lock"), Some(C::MutexWait));
        assert_eq!(class_of("__GI___lll_lock_wait"), Some(C::MutexWait));
        assert_eq!(class_of("__pthread_cond_wait"), Some(C::CondWait));
        assert_eq!(class_of("__pthread_rwlock_wrlock_full64"), Some(C::RwlockWait));
        assert_eq!(class_of("srw_mutex_impl<true>::wait(unsigned int)"), Some(C::Latch));
        assert_eq!(class_of("syscall"), Some(C::FutexWait));
        assert_eq!(class_of("futex_wait"), Some(C::FutexWait));
        assert_eq!(class_of("__libc_pread64"), Some(C::DiskRead));
        assert_eq!(class_of("pwrite64"), Some(C::DiskWrite));
        assert_eq!(class_of("fdatasync"), Some(C::DiskSync));
        assert_eq!(class_of("__libc_fsync"), Some(C::DiskSync));
        assert_eq!(class_of("fsp_try_extend_data_file(fil_space_t*, buf_block_t*, mtr_t*)"), Some(C::FileExtend));
        assert_eq!(class_of("posix_fallocate64"), Some(C::FileExtend));
        assert_eq!(class_of("io_uring_wait_cqe_timeout"), Some(C::AsyncIoWait));
        for none in ["mariadbd+0x8299d0", "handle_one_connection", "__syscall_cancel_arch", "mysql_parse", "??"] {
            assert_eq!(class_of(none), None, "{none}");
        }
    }

    #[test]
    fn a_condition_wait_is_no_lock_wait_though_it_takes_its_mutex() {
        let stack = ["futex_wait", "__pthread_cond_wait_common", "pthread_cond_timedwait", "MDL_wait::timed_wait"];
        assert_eq!(first_class(stack, |c| c == C::CondWait || c == C::MutexWait), Some(C::CondWait));
        for l in ["__poll", "__GI___poll", "epoll_wait", "__clock_nanosleep", "accept4", "__libc_accept"] {
            assert_eq!(class_of(l), Some(C::EventWait), "{l}");
        }
        assert_eq!(class_of("buf_pool_poll_stats"), None, "only the C library's calls");
        assert!(C::CondWait.is_wait() && !C::CondWait.is_lock_wait());
        assert!(C::Latch.is_lock_wait() && !C::DiskRead.is_wait() && C::FileExtend.is_disk());
    }
}
