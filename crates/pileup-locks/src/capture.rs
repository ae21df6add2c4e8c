//! Capture: the eBPF program on the scheduler's switch tracepoint, its
//! ring buffer of waits with stacks, and its exact per-word counts.
//!
//! Everything the kernel holds for pileup (the program, maps, the
//! tracepoint link) lives in file descriptors of this process: when pileup exits, by
//! any means, SIGKILL included, the kernel closes them and every probe is
//! gone.

use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder};

use crate::error::LocksError;
use crate::event::{Event, Record, WordStats, HIST_BUCKETS};
use pileup_engine::ebpf::Unavailable;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/futex.skel.rs"));
}
use skel::{FutexSkel, FutexSkelBuilder};

/// What the kernel side counted besides the per-word table.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Contended waits that ended while tracing.
    pub waits: u64,
    /// Waits recorded with their stack.
    pub recorded: u64,
    /// Waits counted but not recorded: over the per-second stack budget.
    pub over_budget: u64,
    /// Waits counted but not recorded: the ring buffer was full (pileup
    /// fell behind).
    pub ring_full: u64,
    /// Waits on futex words past the table's size, not counted per word.
    pub table_full: u64,
    /// Recorded waits whose stack could not be read.
    pub no_stack: u64,
    /// Waits not followed: another thread of the process, whose id shares
    /// the low 16 bits, was waiting at the same time.
    pub slot_shared: u64,
    /// Waits counted in the kernel's per-word table instead of the log
    /// (pileup read the log too late); counted all the same.
    pub log_full: u64,
}

/// What a trace leaves: the kernel's exact counts per futex word, its
/// counters, and how long it was attached.
pub struct Traced {
    pub words: Vec<(u64, WordStats)>,
    pub counters: Counters,
    pub elapsed: Duration,
    /// What the probe cost, when that was asked for.
    pub probe_cost: Option<ProbeCost>,
}

pub use pileup_engine::ebpf::ProbeCost;

/// Options for one trace.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    pub pid: i32,
    pub duration: Duration,
    /// Waits recorded with their stack per second, at most; the others are
    /// counted only.
    pub stack_budget: u64,
    /// Time the probe with the kernel's BPF run-time statistics, which are
    /// on for every BPF program of the host while pileup holds them.
    pub probe_cost: bool,
    /// Follow only the threads `watch` names (`--focus`); otherwise every
    /// thread of the process.
    pub filter_threads: bool,
}

/// Check what tracing needs, with the fix in the error: privileges and
/// the kernel's BTF (the scheduler tracepoint's typed arguments and the
/// waiter's registers). The tracepoint is attached through BTF, so tracefs
/// is not needed.
pub fn preflight() -> Result<(), LocksError> {
    pileup_engine::ebpf::preflight().map_err(|e| match e {
        Unavailable::Privileges(m) => LocksError::Privileges(m),
        Unavailable::Kernel(m) => LocksError::NoEbpf(m),
    })
}

/// Trace `opts.pid`'s contended futex waits for `opts.duration` (or until
/// `stop`), handing each recorded wait to `on_event` as it arrives, and
/// `on_tick` about every 100 ms. With `opts.filter_threads`, `watch` gives
/// the threads to follow, asked before attaching and at every tick (threads
/// come and go). Returns the exact per-word counts and the kernel side's
/// counters.
pub fn trace(
    opts: &TraceOptions,
    stop: &AtomicBool,
    mut on_event: impl FnMut(Event),
    mut on_tick: impl FnMut(Duration),
    mut watch: impl FnMut() -> HashSet<i32>,
) -> Result<Traced, LocksError> {
    // libbpf's own messages (a verifier log runs to pages) are not the
    // user's: a failure is reported in one line below.
    libbpf_rs::set_print(None);
    let mut storage = MaybeUninit::uninit();
    let mut open = FutexSkelBuilder::default().open(&mut storage).map_err(|e| load_error("opening", &e))?;
    let ro =
        open.maps.rodata_data.as_deref_mut().ok_or_else(|| LocksError::Ebpf("the program has no .rodata".into()))?;
    ro.target_tgid = opts.pid as u32;
    ro.has_prev_state = pileup_engine::ebpf::running_kernel().is_some_and(|v| v >= (5, 18)) as u32;
    // The budget is kept per CPU (no counter shared between CPUs on the
    // lock handoff's path): each CPU gets its share.
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u64;
    ro.cpu_budget = opts.stack_budget.div_ceil(cpus);
    ro.fresh_budget = FRESH_BUDGET.div_ceil(cpus);
    // The wait log has a part for every CPU the kernel may number.
    let possible = libbpf_rs::num_possible_cpus().map_err(|e| LocksError::Ebpf(format!("counting CPUs: {e}")))?;
    let entries = log_entries(possible);
    ro.log_entries = entries;
    ro.log_stride = entries + 1;
    ro.filter_threads = opts.filter_threads as u32;
    open.maps
        .wait_log
        .set_max_entries(possible as u32 * (entries + 1))
        .map_err(|e| LocksError::Ebpf(format!("sizing the wait log: {e}")))?;
    let mut skel: FutexSkel = open.load().map_err(|e| load_error("loading", &e))?;
    let mut log = WaitLog::map(&skel.maps.wait_log, possible, entries)?;
    // The statistics stay on while this descriptor is open: they end with
    // pileup, however it exits.
    let stats = if opts.probe_cost {
        Some(pileup_engine::ebpf::enable_run_time_stats().map_err(|e| {
            LocksError::Ebpf(format!("turning on the kernel's BPF run-time statistics for --probe-cost: {e}"))
        })?)
    } else {
        None
    };
    let mut watched = HashSet::new();
    if opts.filter_threads {
        update_watched(&skel.maps.watched, &mut watched, watch())?;
    }
    skel.attach().map_err(|e| load_error("attaching", &e))?;
    let started = Instant::now();

    let mut bad = 0u64;
    // Recorded waits whose end has not arrived yet, by thread: a thread's
    // wait ends before its next begins, so a start replaces any wait of
    // its thread still pending (whose end record was lost).
    let mut pending: HashMap<i32, Event> = HashMap::new();
    let mut builder = RingBufferBuilder::new();
    builder
        .add(&skel.maps.events, |data: &[u8]| {
            match Record::decode(data) {
                Some(Record::Start(e)) => {
                    pending.insert(e.tid, e);
                }
                Some(Record::End { tid, start_ns, end_ns }) => {
                    if pending.get(&tid).is_some_and(|e| e.start_ns == start_ns) {
                        let mut e = pending.remove(&tid).unwrap();
                        e.wait_ns = end_ns.saturating_sub(start_ns);
                        on_event(e);
                    }
                }
                None => bad += 1,
            }
            0
        })
        .map_err(|e| LocksError::Ebpf(format!("ring buffer: {e}")))?;
    let ring = builder.build().map_err(|e| LocksError::Ebpf(format!("ring buffer: {e}")))?;
    let mut words: HashMap<u64, WordStats> = HashMap::new();
    // The ring buffer and the wait log are read every READ_EVERY, not as
    // records arrive: the probe submits without waking pileup, since on a
    // saturated server every wake of a reader preempts a server thread (a
    // wake per recorded wait would be hundreds a second). The ring holds
    // seconds of records at the stack budgets' most.
    while started.elapsed() < opts.duration && !stop.load(Ordering::Relaxed) {
        let left = opts.duration.saturating_sub(started.elapsed());
        std::thread::sleep(left.min(READ_EVERY));
        match ring.consume() {
            Ok(()) => {}
            Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => {}
            Err(e) => return Err(LocksError::Ebpf(format!("reading the ring buffer: {e}"))),
        }
        log.drain(&mut words);
        if opts.filter_threads {
            update_watched(&skel.maps.watched, &mut watched, watch())?;
        }
        on_tick(started.elapsed());
        if !pileup_engine::process::alive(opts.pid) {
            break;
        }
    }
    // Detach first, then drain what is queued: the counts below cover
    // exactly the waits that began while attached. Detaching does not wait
    // for a probe already running on another CPU: a few milliseconds let
    // it finish (it runs for microseconds).
    skel.links = Default::default();
    std::thread::sleep(Duration::from_millis(10));
    let elapsed = started.elapsed();
    let probe_cost = stats.and_then(|_held| pileup_engine::ebpf::run_time(skel.progs.futex_switch.as_fd()));
    let detached_ns = pileup_engine::ebpf::monotonic_ns();
    let _ = ring.consume();
    drop(ring);

    // The waits logged since the last drain, then those the kernel counted
    // in its table while the log was full.
    log.drain(&mut words);
    count_table(&skel.maps.locks, &mut words);
    let last_waits = count_last_waits(&skel.maps.slots, detached_ns, &mut words, &mut pending, &mut on_event)?;
    let words: Vec<(u64, WordStats)> = words.into_iter().filter(|(_, w)| w.count > 0).collect();
    let counters = read_counters(&skel.maps.counters, last_waits);
    if bad > 0 {
        tracing::warn!(bad, "ring buffer records shorter than expected");
    }
    Ok(Traced { words, counters, elapsed, probe_cost })
}

/// Add the waits the kernel counted in its table of words (while the wait
/// log was full) to `words`.
fn count_table(locks: &impl MapCore, words: &mut HashMap<u64, WordStats>) {
    for key in locks.keys() {
        let Ok(Some(per_cpu)) = locks.lookup_percpu(&key, MapFlags::ANY) else { continue };
        let Ok(k) = <[u8; 8]>::try_from(key.as_slice()) else { continue };
        let w = words.entry(u64::from_le_bytes(k)).or_default();
        for v in per_cpu.iter().filter_map(|v| word_stats(v)) {
            w.op = v.op.max(w.op);
            w.add(&v);
        }
    }
}

/// Each thread's last wait is in its slot, not yet counted (a wait is
/// counted when its thread's next wait begins): ended, or still in
/// progress (counted with the time waited so far, to `detached_ns`). A
/// recorded wait still pending is handed to `on_event`. Returns how many
/// waits were counted.
fn count_last_waits(
    slots: &impl MapCore,
    detached_ns: u64,
    words: &mut HashMap<u64, WordStats>,
    pending: &mut HashMap<i32, Event>,
    on_event: &mut impl FnMut(Event),
) -> Result<u64, LocksError> {
    // In batches: one system call per 4,096 slots, not one per slot.
    let mut last_waits = 0;
    let batch = slots
        .lookup_batch(4096, MapFlags::ANY, MapFlags::ANY)
        .map_err(|e| LocksError::Ebpf(format!("reading the slots: {e}")))?;
    for (_, v) in batch {
        let Some(sl) = Slot::decode(&v) else { continue };
        if sl.start == 0 {
            continue;
        }
        let in_progress = sl.end == 0;
        let end = if in_progress { detached_ns.max(sl.start) } else { sl.end };
        if end < sl.start {
            continue; // torn by two threads sharing the slot
        }
        last_waits += 1;
        let w = words.entry(sl.uaddr).or_default();
        w.op = sl.op;
        w.add_wait(end - sl.start, in_progress);
        if pending.get(&(sl.tid as i32)).is_some_and(|e| e.start_ns == sl.start) {
            let mut e = pending.remove(&(sl.tid as i32)).unwrap();
            e.wait_ns = end - sl.start;
            e.in_progress = in_progress;
            on_event(e);
        }
    }
    Ok(last_waits)
}

/// The kernel side's counters, summed over the CPUs.
fn read_counters(map: &impl MapCore, last_waits: u64) -> Counters {
    let mut c = [0u64; 8];
    for (i, slot) in c.iter_mut().enumerate() {
        if let Ok(Some(per_cpu)) = map.lookup_percpu(&(i as u32).to_le_bytes(), MapFlags::ANY) {
            *slot = per_cpu.iter().filter_map(|v| v.get(..8)).map(|b| u64::from_le_bytes(b.try_into().unwrap())).sum();
        }
    }
    Counters {
        waits: c[0] + last_waits,
        recorded: c[1],
        over_budget: c[2],
        ring_full: c[3],
        table_full: c[4],
        no_stack: c[5],
        slot_shared: c[6],
        log_full: c[7],
    }
}

/// Make the kernel's `watched` set `now`: threads that appeared are added,
/// threads gone are removed (their ids may be reused by others).
fn update_watched(map: &impl MapCore, watched: &mut HashSet<i32>, now: HashSet<i32>) -> Result<(), LocksError> {
    for &t in now.difference(watched) {
        map.update(&(t as u32).to_ne_bytes(), &[1], MapFlags::ANY)
            .map_err(|e| LocksError::Ebpf(format!("following thread {t}: {e}")))?;
    }
    for &t in watched.difference(&now) {
        let _ = map.delete(&(t as u32).to_ne_bytes());
    }
    *watched = now;
    Ok(())
}

/// Decode a `struct lock_stats` value.
fn word_stats(v: &[u8]) -> Option<WordStats> {
    let u64_at = |o: usize| v.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    let mut hist = [0u64; HIST_BUCKETS];
    for (i, h) in hist.iter_mut().enumerate() {
        *h = u64_at(32 + 8 * i)?;
    }
    Some(WordStats {
        count: u64_at(0)?,
        in_progress: 0,
        total_ns: u64_at(8)?,
        max_ns: u64_at(16)?,
        op: u32::from_le_bytes(v.get(24..28)?.try_into().ok()?),
        hist,
    })
}

fn load_error(what: &str, e: &libbpf_rs::Error) -> LocksError {
    match pileup_engine::ebpf::refused(what, e) {
        Some(refused) => LocksError::NoEbpf(refused.to_string()),
        None => LocksError::Ebpf(format!("{what} the eBPF program: {e}")),
    }
}

/// First waits on words not seen before recorded with their stack per
/// second beyond the budget, so every lock gets a stack to be named by.
const FRESH_BUDGET: u64 = 500;

/// How often the ring buffer and the wait log are read while tracing.
const READ_EVERY: Duration = Duration::from_millis(100);

/// Bytes of one wait log element (`struct logged_wait`).
const LOGGED_BYTES: usize = 32;

/// Entries per CPU in the wait log: 65,536 (2 MiB a CPU: 1.3 s of waits at
/// 50,000 a second on one CPU, while pileup is busy unwinding, loading a
/// binary's symbols at the first stacks), fewer on a host with so many
/// CPUs that the log would pass 64 MiB.
fn log_entries(cpus: usize) -> u32 {
    let mut n: u32 = 65536;
    while n > 1024 && cpus * (n as usize + 1) * LOGGED_BYTES > 64 << 20 {
        n /= 2;
    }
    n
}

/// The kernel's wait log (`wait_log`), mapped into pileup: per CPU a
/// header (head: waits written; tail: waits read) and a ring of finished
/// waits. The probe writes an entry and then moves the head; pileup reads
/// up to the head and then moves the tail.
struct WaitLog {
    base: *mut u64,
    len: usize,
    cpus: usize,
    entries: u64,
}

impl WaitLog {
    fn map(map: &libbpf_rs::Map, cpus: usize, entries: u32) -> Result<WaitLog, LocksError> {
        use std::os::fd::{AsFd, AsRawFd};
        let bytes = cpus * (entries as usize + 1) * LOGGED_BYTES;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = bytes.div_ceil(page) * page;
        // SAFETY: a shared mapping of the map's own file descriptor, of the
        // map's size (the kernel checks it); unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(LocksError::Ebpf(format!("mapping the wait log: {e}")));
        }
        Ok(WaitLog { base: p.cast(), len, cpus, entries: entries as u64 })
    }

    /// The u64 at word `w` of element `i`.
    fn at(&self, i: usize, w: usize) -> *mut u64 {
        debug_assert!((i * LOGGED_BYTES + w * 8) < self.len);
        // SAFETY: within the mapping (every index is below cpus × stride).
        unsafe { self.base.add(i * LOGGED_BYTES / 8 + w) }
    }

    /// Move every wait logged since the last drain into `words`.
    fn drain(&mut self, words: &mut HashMap<u64, WordStats>) {
        use std::sync::atomic::AtomicU64;
        let stride = self.entries as usize + 1;
        for cpu in 0..self.cpus {
            let hdr = cpu * stride;
            // SAFETY: aligned u64s inside the mapping, shared with the
            // probe: the head is the probe's (read with Acquire, after
            // which the entries before it are written), the tail ours.
            let (head, tail) = unsafe { (AtomicU64::from_ptr(self.at(hdr, 0)), AtomicU64::from_ptr(self.at(hdr, 1))) };
            let h = head.load(Ordering::Acquire);
            let mut t = tail.load(Ordering::Relaxed);
            while t < h {
                let e = hdr + 1 + (t % self.entries) as usize;
                // SAFETY: as above; the probe does not write this entry
                // again until the tail has moved past it.
                let (uaddr, start, end, op) = unsafe {
                    (
                        self.at(e, 0).read_volatile(),
                        self.at(e, 1).read_volatile(),
                        self.at(e, 2).read_volatile(),
                        self.at(e, 3).read_volatile() as u32,
                    )
                };
                let w = words.entry(uaddr).or_default();
                w.op = w.op.max(op);
                w.add_wait(end.saturating_sub(start), false);
                t += 1;
            }
            tail.store(t, Ordering::Release);
        }
    }
}

impl Drop for WaitLog {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, not used after this.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// One thread's last wait (`struct slot`).
struct Slot {
    start: u64,
    end: u64,
    uaddr: u64,
    tid: u32,
    op: u32,
}

impl Slot {
    fn decode(v: &[u8]) -> Option<Slot> {
        let u64_at = |o: usize| v.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        let u32_at = |o: usize| v.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
        Some(Slot { start: u64_at(0)?, end: u64_at(8)?, uaddr: u64_at(16)?, tid: u32_at(24)?, op: u32_at(28)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_decode_at_the_kernel_layout() {
        let mut v = vec![0u8; 40];
        v[0..8].copy_from_slice(&10u64.to_le_bytes());
        v[8..16].copy_from_slice(&25u64.to_le_bytes());
        v[16..24].copy_from_slice(&0x1000u64.to_le_bytes());
        v[24..28].copy_from_slice(&77u32.to_le_bytes());
        v[28..32].copy_from_slice(&128u32.to_le_bytes());
        let s = Slot::decode(&v).unwrap();
        assert_eq!((s.start, s.end, s.uaddr, s.tid, s.op), (10, 25, 0x1000, 77, 128));
    }
}
