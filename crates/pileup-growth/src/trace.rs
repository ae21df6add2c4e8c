//! The growth probe in the kernel: loading it, reading its ring buffer,
//! keeping its sampling period to the stack budget, and its exact counts
//! per thread at the end.
//!
//! Everything the kernel holds for pileup (the programs, maps and the
//! tracepoint links) lives in file descriptors of this process: when pileup
//! exits, by any means, SIGKILL included, the kernel closes them and every
//! probe is gone.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder};
use pileup_engine::ebpf::ProbeCost;

use super::error::GrowthError;
use super::record::{Event, ThreadCounts};

mod skel {
    include!(concat!(env!("OUT_DIR"), "/growth.skel.rs"));
}
use skel::{GrowthSkel, GrowthSkelBuilder};

/// What the kernel side counted besides the per-thread table.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Samples and growth sent with their stack.
    pub stacks: u64,
    /// Sent without their stack: over the per-second budget.
    pub over_budget: u64,
    /// Lost: the ring buffer was full (pileup fell behind).
    pub ring_full: u64,
    /// Stacks that could not be read.
    pub no_stack: u64,
    /// Threads past the table's size, not counted.
    pub threads_full: u64,
    /// Faults whose mapping could not be looked up (counted as anonymous).
    pub no_mapping: u64,
}

/// What a trace leaves.
pub struct Traced {
    pub threads: HashMap<i32, ThreadCounts>,
    pub counters: Counters,
    pub elapsed: Duration,
    pub probe_cost: Option<ProbeCost>,
    /// The sampling period at the end, bytes.
    pub period: u64,
}

#[derive(Debug, Clone)]
pub struct TraceOptions {
    pub pid: i32,
    /// Stacks copied per second, at most.
    pub stack_budget: u64,
    /// Time the probes with the kernel's BPF run-time statistics.
    pub probe_cost: bool,
}

/// The smallest and largest sampling periods: a sample per 128 KiB at the
/// least growth, per GiB at the most.
const MIN_PERIOD: u64 = 128 << 10;
const MAX_PERIOD: u64 = 1 << 30;
/// The period at attach, before any rate is known.
const FIRST_PERIOD: u64 = 256 << 10;

/// A record with a stack in the ring buffer: its 72-byte header, the
/// 16 KiB copy of the stack's top and the ring's own 8-byte header.
const STACK_RECORD_BYTES: u64 = 72 + 16384 + 8;

/// How often the ring buffer is read.
const READ_EVERY: Duration = Duration::from_millis(100);

/// Trace until `on_tick` says to stop: every ~100 ms the events since the
/// last read go to `on_events` in time order, then `on_tick` gets the time
/// since attaching.
pub fn trace(
    opts: &TraceOptions,
    mut on_events: impl FnMut(Vec<Event>),
    mut on_tick: impl FnMut(Duration) -> bool,
) -> Result<Traced, GrowthError> {
    libbpf_rs::set_print(None);
    let mut storage = MaybeUninit::uninit();
    let mut open = GrowthSkelBuilder::default().open(&mut storage).map_err(|e| load_error("opening", &e))?;
    let ro =
        open.maps.rodata_data.as_deref_mut().ok_or_else(|| GrowthError::Ebpf("the program has no .rodata".into()))?;
    ro.target_tgid = opts.pid as u32;
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u64;
    let cpu_budget = opts.stack_budget.div_ceil(cpus).max(1);
    ro.cpu_budget = cpu_budget;
    // What the CPUs together may copy in a second (each rounded up).
    open.maps
        .events
        .set_max_entries(pileup_engine::ebpf::ring_bytes(cpu_budget * cpus, STACK_RECORD_BYTES))
        .map_err(|e| load_error("sizing the ring buffer of", &e))?;
    let mut skel: GrowthSkel = open.load().map_err(|e| load_error("loading", &e))?;
    set_period(&mut skel, FIRST_PERIOD);
    let stats = if opts.probe_cost {
        Some(pileup_engine::ebpf::enable_run_time_stats().map_err(|e| {
            GrowthError::Ebpf(format!("turning on the kernel's BPF run-time statistics for --probe-cost: {e}"))
        })?)
    } else {
        None
    };
    skel.attach().map_err(|e| load_error("attaching", &e))?;
    let started = Instant::now();

    let batch = std::cell::RefCell::new(Vec::<Event>::new());
    let mut bad = 0u64;
    let mut builder = RingBufferBuilder::new();
    builder
        .add(&skel.maps.events, |data: &[u8]| {
            match Event::decode(data) {
                Some(e) => batch.borrow_mut().push(e),
                None => bad += 1,
            }
            0
        })
        .map_err(|e| GrowthError::Ebpf(format!("ring buffer: {e}")))?;
    let ring = builder.build().map_err(|e| GrowthError::Ebpf(format!("ring buffer: {e}")))?;
    let mut period = FIRST_PERIOD;
    let (mut window_start, mut window_bytes) = (Instant::now(), 0u64);
    let hand_over = |on_events: &mut dyn FnMut(Vec<Event>)| -> u64 {
        let mut b = std::mem::take(&mut *batch.borrow_mut());
        // Per-CPU order only in the ring: put them in time order.
        b.sort_by_key(|e| e.time_ns);
        let faulted = b.iter().filter(|e| e.what.is_fault()).map(|e| e.bytes).sum();
        if !b.is_empty() {
            on_events(b);
        }
        faulted
    };
    // Read every READ_EVERY, not as records arrive: the probes submit
    // without waking pileup (a wake per record would preempt a server
    // thread on a saturated host).
    loop {
        std::thread::sleep(READ_EVERY);
        match ring.consume() {
            Ok(()) => {}
            Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => {}
            Err(e) => return Err(GrowthError::Ebpf(format!("reading the ring buffer: {e}"))),
        }
        window_bytes += hand_over(&mut on_events);
        // Keep the samples to about the budget: the period is the growth
        // rate of the last second over the stacks a second allowed.
        if window_start.elapsed() >= Duration::from_secs(1) {
            let rate = window_bytes as f64 / window_start.elapsed().as_secs_f64();
            period = next_period(rate, fault_share(opts.stack_budget));
            set_period(&mut skel, period);
            (window_start, window_bytes) = (Instant::now(), 0);
        }
        if !on_tick(started.elapsed()) || !pileup_engine::process::alive(opts.pid) {
            break;
        }
    }
    // Detach, let a probe running on another CPU finish (microseconds),
    // then read what is queued and what the tables hold.
    skel.links = Default::default();
    std::thread::sleep(Duration::from_millis(10));
    let elapsed = started.elapsed();
    let probe_cost = stats.and_then(|_held| cost_of_probes(&skel));
    let _ = ring.consume();
    drop(ring);
    hand_over(&mut on_events);
    if bad > 0 {
        tracing::warn!(bad, "ring buffer records of no known kind");
    }
    Ok(Traced {
        threads: read_threads(&skel.maps.threads),
        counters: read_counters(&skel.maps.counters),
        elapsed,
        probe_cost,
        period,
    })
}

/// What the probes cost the kernel so far, summed over every program
/// (None when a program's statistics cannot be read).
fn cost_of_probes(skel: &GrowthSkel) -> Option<ProbeCost> {
    let p = &skel.progs;
    let mut total = ProbeCost::default();
    for fd in [
        p.growth_fault.as_fd(),
        p.growth_mmap.as_fd(),
        p.growth_munmap.as_fd(),
        p.growth_mremap.as_fd(),
        p.growth_mprotect.as_fd(),
        p.growth_madvise.as_fd(),
        p.growth_brk.as_fd(),
    ] {
        total += pileup_engine::ebpf::run_time(fd)?;
    }
    Some(total)
}

/// The stacks a second that fault samples may spend: the probe keeps the
/// last quarter of the budget for large address-space growth.
fn fault_share(budget: u64) -> u64 {
    (budget - (budget / 4).max(u64::from(budget >= 2))).max(1)
}

/// The sampling period for a growth `rate` (bytes a second) and a budget
/// of stacks a second: a stack for every `rate / budget` bytes.
pub(crate) fn next_period(rate: f64, budget: u64) -> u64 {
    let p = rate / budget.max(1) as f64;
    (p as u64).clamp(MIN_PERIOD, MAX_PERIOD)
}

fn set_period(skel: &mut GrowthSkel, period: u64) {
    if let Some(bss) = skel.maps.data_data.as_deref_mut() {
        bss.sample_period = period;
    }
}

fn read_threads(map: &impl MapCore) -> HashMap<i32, ThreadCounts> {
    let mut out = HashMap::new();
    for key in map.keys() {
        let Ok(k) = <[u8; 4]>::try_from(key.as_slice()) else { continue };
        if let Ok(Some(v)) = map.lookup(&key, MapFlags::ANY) {
            if let Some(c) = ThreadCounts::decode(&v) {
                out.insert(u32::from_ne_bytes(k) as i32, c);
            }
        }
    }
    out
}

fn read_counters(map: &impl MapCore) -> Counters {
    let mut c = [0u64; 6];
    for (i, slot) in c.iter_mut().enumerate() {
        if let Ok(Some(per_cpu)) = map.lookup_percpu(&(i as u32).to_le_bytes(), MapFlags::ANY) {
            *slot = per_cpu.iter().filter_map(|v| v.get(..8)).map(|b| u64::from_le_bytes(b.try_into().unwrap())).sum();
        }
    }
    Counters { stacks: c[0], over_budget: c[1], ring_full: c[2], no_stack: c[3], threads_full: c[4], no_mapping: c[5] }
}

fn load_error(what: &str, e: &libbpf_rs::Error) -> GrowthError {
    match pileup_engine::ebpf::refused(what, e) {
        Some(refused) => GrowthError::NoEbpf(refused.to_string()),
        None => GrowthError::Ebpf(format!("{what} the eBPF program: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_spends_the_budget_within_its_bounds() {
        // 1 GiB/s over 200 stacks a second: a stack per ~5 MiB.
        assert_eq!(next_period(1024.0 * 1024.0 * 1024.0, 200), (1u64 << 30) / 200);
        // A quiet server: the smallest period.
        assert_eq!(next_period(0.0, 200), MIN_PERIOD);
        assert_eq!(next_period(1e15, 1), MAX_PERIOD);
    }

    #[test]
    fn faults_leave_a_quarter_of_the_budget_to_large_growth() {
        assert_eq!(fault_share(800), 600);
        assert_eq!(fault_share(200), 150);
        // At least one stack kept from two a second up.
        assert_eq!(fault_share(3), 2);
        assert_eq!(fault_share(2), 1);
        assert_eq!(fault_share(1), 1);
        assert_eq!(fault_share(0), 1);
    }
}
