//! Allocations of chosen threads, sampled by bytes with uprobes on the
//! server's allocator (`bpf/malloc.bpf.c`): what they allocated and still
//! hold, by stack, and what a probe costs the server's threads, measured
//! on this machine.
//!
//! A uprobe is a breakpoint: every malloc, calloc, realloc and free of
//! every thread of the server traps into the kernel while it is attached,
//! chosen thread or not. That trap is the cost; it is timed here before
//! attaching (on a function of pileup's own, probed the same way) and
//! multiplied by the calls probed, so the report says what the server paid.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder, UprobeOpts};

use crate::error::MemoryError;
use pileup_engine::{Regs, Resolver};
use pileup_growth::record::StackCopy;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/malloc.skel.rs"));
}
use skel::{MallocSkel, MallocSkelBuilder};

const REC_ALLOC: u64 = 1;
const REC_FREE: u64 = 2;
const ALLOC_HEADER: usize = 72;

/// A sampled allocation, or the free of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MallocEvent {
    Alloc {
        time_ns: u64,
        tid: i32,
        addr: u64,
        /// The call's size, and the sample's weight (bytes since the
        /// thread's last sample).
        size: u64,
        weight: u64,
        /// Registers at the return into the caller, and its stack, within
        /// the budget.
        regs: Option<StackCopy>,
    },
    Free {
        time_ns: u64,
        addr: u64,
    },
}

impl MallocEvent {
    pub fn decode(b: &[u8]) -> Option<MallocEvent> {
        let u64_at = |o: usize| b.get(o..o + 8).map(|x| u64::from_le_bytes(x.try_into().unwrap()));
        let u32_at = |o: usize| b.get(o..o + 4).map(|x| u32::from_le_bytes(x.try_into().unwrap()));
        match u64_at(0)? {
            REC_FREE => Some(MallocEvent::Free { time_ns: u64_at(8)?, addr: u64_at(16)? }),
            REC_ALLOC if b.len() >= ALLOC_HEADER => {
                let len = (u32_at(44)? as usize).min(b.len() - ALLOC_HEADER);
                let ip = u64_at(48)?;
                Some(MallocEvent::Alloc {
                    time_ns: u64_at(8)?,
                    addr: u64_at(16)?,
                    size: u64_at(24)?,
                    weight: u64_at(32)?,
                    tid: u32_at(40)? as i32,
                    regs: (ip != 0 && len > 0).then(|| StackCopy {
                        ip,
                        sp: u64_at(56).unwrap_or(0),
                        bp: u64_at(64).unwrap_or(0),
                        stack: b[ALLOC_HEADER..ALLOC_HEADER + len].to_vec(),
                    }),
                })
            }
            _ => None,
        }
    }
}

/// What the uprobes cost: the trap of one probed call, timed on this
/// machine, and the calls probed.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct MallocCost {
    /// Nanoseconds one probed allocation (entry and return) and one probed
    /// free (entry) cost the calling thread.
    pub alloc_call_ns: f64,
    pub free_call_ns: f64,
    /// Calls probed over the trace, by every thread of the server.
    pub alloc_calls: u64,
    pub free_calls: u64,
    /// The server's CPU time the probes took: calls × their cost.
    pub server_cpu_s: f64,
}

/// Counts of the trace.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MallocCounters {
    /// Allocations by the chosen threads, and the bytes they asked for.
    pub calls: u64,
    pub bytes: u64,
    pub sampled: u64,
    pub with_stack: u64,
    pub over_budget: u64,
    pub ring_full: u64,
    pub live_full: u64,
    pub frees_matched: u64,
}

/// The allocator module probed: the first mapping of the process that
/// defines malloc (an allocator preloaded, else the C library).
pub fn allocator_of(pid: i32) -> Result<String, MemoryError> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|_| MemoryError::ProcessGone(pid))?;
    let paths: Vec<&str> =
        maps.lines().filter_map(|l| l.split_whitespace().nth(5)).filter(|p| p.starts_with('/')).collect();
    let name = |p: &&str| p.rsplit('/').next().unwrap_or("").to_string();
    paths
        .iter()
        .find(|p| ["libjemalloc", "libtcmalloc", "libmimalloc"].iter().any(|a| name(p).starts_with(a)))
        .or_else(|| paths.iter().find(|p| name(p).starts_with("libc.so") || name(p).starts_with("libc-")))
        .map(|p| format!("/proc/{pid}/root{p}"))
        .ok_or_else(|| {
            MemoryError::Usage(format!("no allocator (libc, jemalloc, tcmalloc) is mapped in process {pid}"))
        })
}

/// The probes attached to the server, with their ring buffer.
pub struct MallocProbe<'obj> {
    skel: MallocSkel<'obj>,
    ring: RingBuffer<'obj>,
    arrived: Rc<RefCell<Vec<MallocEvent>>>,
    watched: HashSet<i32>,
    /// The entry and return probes (one program can be attached at many
    /// places; the skeleton keeps one link per program).
    links: Vec<libbpf_rs::Link>,
    pub allocator: String,
    started: Instant,
}

impl<'obj> MallocProbe<'obj> {
    /// Load and attach to `pid`'s allocator, sampling a chosen thread's
    /// allocations every `period` bytes, with at most `stack_budget`
    /// stacks a second.
    pub fn attach(
        storage: &'obj mut MaybeUninit<OpenObject>,
        pid: i32,
        period: u64,
        stack_budget: u64,
    ) -> Result<MallocProbe<'obj>, MemoryError> {
        let allocator = allocator_of(pid)?;
        libbpf_rs::set_print(None);
        let mut open = MallocSkelBuilder::default().open(storage).map_err(|e| ebpf("opening", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| MemoryError::Ebpf("no .rodata".into()))?;
        ro.target_tgid = pid as u32;
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u64;
        ro.cpu_budget = stack_budget.div_ceil(cpus).max(1);
        let mut skel = open.load().map_err(|e| ebpf("loading", &e))?;
        if let Some(d) = skel.maps.data_data.as_deref_mut() {
            d.sample_period = period;
        }
        let arrived: Rc<RefCell<Vec<MallocEvent>>> = Rc::default();
        let mut builder = RingBufferBuilder::new();
        let sink = arrived.clone();
        builder
            .add(&skel.maps.events, move |data: &[u8]| {
                if let Some(e) = MallocEvent::decode(data) {
                    sink.borrow_mut().push(e);
                }
                0
            })
            .map_err(|e| MemoryError::Ebpf(format!("ring buffer: {e}")))?;
        let ring = builder.build().map_err(|e| MemoryError::Ebpf(format!("ring buffer: {e}")))?;
        let mut links = vec![];
        {
            let p = &skel.progs;
            let attach = |prog: &libbpf_rs::ProgramMut, func: &str, retprobe: bool| {
                let opts = UprobeOpts { func_name: Some(func.to_string()), retprobe, ..Default::default() };
                prog.attach_uprobe_with_opts(pid, &allocator, 0, opts)
                    .map_err(|e| MemoryError::Ebpf(format!("attaching to {func} in {allocator}: {e}")))
            };
            links.push(attach(&p.malloc_enter, "malloc", false)?);
            links.push(attach(&p.calloc_enter, "calloc", false)?);
            links.push(attach(&p.realloc_enter, "realloc", false)?);
            links.push(attach(&p.alloc_return, "malloc", true)?);
            links.push(attach(&p.alloc_return, "calloc", true)?);
            links.push(attach(&p.alloc_return, "realloc", true)?);
            links.push(attach(&p.free_enter, "free", false)?);
        }
        let allocator_name = allocator.rsplit('/').next().unwrap_or("").to_string();
        Ok(MallocProbe {
            skel,
            ring,
            arrived,
            watched: HashSet::new(),
            links,
            allocator: allocator_name,
            started: Instant::now(),
        })
    }

    /// Follow exactly the threads in `now`.
    pub fn watch(&mut self, now: HashSet<i32>) -> Result<(), MemoryError> {
        let map = &self.skel.maps.watched;
        for &t in now.difference(&self.watched) {
            map.update(&(t as u32).to_ne_bytes(), &[1], MapFlags::ANY)
                .map_err(|e| MemoryError::Ebpf(format!("following thread {t}: {e}")))?;
        }
        for &t in self.watched.difference(&now) {
            let _ = map.delete(&(t as u32).to_ne_bytes());
        }
        self.watched = now;
        Ok(())
    }

    /// The events since the last poll, in time order.
    pub fn poll(&mut self) -> Vec<MallocEvent> {
        let _ = self.ring.consume();
        let mut v = std::mem::take(&mut *self.arrived.borrow_mut());
        v.sort_by_key(|e| match e {
            MallocEvent::Alloc { time_ns, .. } | MallocEvent::Free { time_ns, .. } => *time_ns,
        });
        v
    }

    /// Detach; the last events and the counts.
    pub fn finish(mut self, calibration: Calibration) -> (Vec<MallocEvent>, MallocCounters, MallocCost, Duration) {
        self.links.clear();
        let elapsed = self.started.elapsed();
        std::thread::sleep(Duration::from_millis(10));
        let last = self.poll();
        let c = read_counters(&self.skel.maps.counters);
        let mut counters = MallocCounters {
            sampled: c[1],
            with_stack: c[2],
            over_budget: c[3],
            ring_full: c[4],
            live_full: c[5],
            frees_matched: c[6],
            ..Default::default()
        };
        for key in self.skel.maps.threads.keys() {
            if let Ok(Some(v)) = self.skel.maps.threads.lookup(&key, MapFlags::ANY) {
                let u = |o: usize| v.get(o..o + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
                counters.calls += u(0);
                counters.bytes += u(8);
            }
        }
        let (alloc_calls, free_calls) = (c[0], c[7]);
        let cost = MallocCost {
            alloc_call_ns: calibration.alloc_ns,
            free_call_ns: calibration.free_ns,
            alloc_calls,
            free_calls,
            server_cpu_s: (alloc_calls as f64 * calibration.alloc_ns + free_calls as f64 * calibration.free_ns) / 1e9,
        };
        (last, counters, cost, elapsed)
    }
}

fn read_counters(map: &impl MapCore) -> [u64; 8] {
    let mut c = [0u64; 8];
    for (i, slot) in c.iter_mut().enumerate() {
        if let Ok(Some(per_cpu)) = map.lookup_percpu(&(i as u32).to_le_bytes(), MapFlags::ANY) {
            *slot = per_cpu.iter().filter_map(|v| v.get(..8)).map(|b| u64::from_le_bytes(b.try_into().unwrap())).sum();
        }
    }
    c
}

fn ebpf(what: &str, e: &libbpf_rs::Error) -> MemoryError {
    MemoryError::Ebpf(format!("{what} the allocation probes: {e}"))
}

/// What one probed call costs the thread that makes it, timed here.
#[derive(Debug, Clone, Copy, Default)]
pub struct Calibration {
    pub alloc_ns: f64,
    pub free_ns: f64,
}

/// A function of pileup's own, probed to time the trap of a uprobe.
#[no_mangle]
#[inline(never)]
pub extern "C" fn pileup_memory_probe_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(3).wrapping_add(1))
}

/// Time a probed call on this machine: the same programs attached to a
/// function of pileup's own (entry and return, then entry alone), called
/// in a loop, against the same loop unprobed. The programs see another
/// process and return at once, as they do for the server's threads that
/// are not chosen: the trap is the cost.
pub fn calibrate() -> Result<Calibration, MemoryError> {
    let (path, offset) = own_function_offset(pileup_memory_probe_target as *const () as usize)
        .ok_or_else(|| MemoryError::Ebpf("finding pileup's own code to time a probe on".into()))?;
    let mut storage = MaybeUninit::uninit();
    let open = MallocSkelBuilder::default().open(&mut storage).map_err(|e| ebpf("opening", &e))?;
    let skel = open.load().map_err(|e| ebpf("loading", &e))?;
    // The least time of many short batches: a batch the scheduler
    // interrupted (a busy server shares the cores) is never the least.
    const BATCH: u64 = 500;
    const BATCHES: usize = 40;
    let time = || {
        let mut best = f64::INFINITY;
        for b in 0..BATCHES {
            let t = Instant::now();
            let mut x = 0u64;
            for i in 0..BATCH {
                x = x.wrapping_add(pileup_memory_probe_target(i + b as u64));
            }
            std::hint::black_box(x);
            best = best.min(t.elapsed().as_nanos() as f64 / BATCH as f64);
        }
        best
    };
    let base = time();
    let me = std::process::id() as i32;
    let attach = |prog: &libbpf_rs::ProgramMut, ret: bool| {
        prog.attach_uprobe(ret, me, &path, offset).map_err(|e| MemoryError::Ebpf(format!("timing a probe: {e}")))
    };
    let entry = attach(&skel.progs.free_enter, false)?;
    let free_ns = (time() - base).max(0.0);
    let ret = attach(&skel.progs.alloc_return, true)?;
    let alloc_ns = (time() - base).max(0.0);
    drop((entry, ret));
    Ok(Calibration { alloc_ns, free_ns })
}

/// The file and offset in it of code at `addr` in pileup's own process.
fn own_function_offset(addr: usize) -> Option<(String, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    for l in maps.lines() {
        let mut w = l.split_whitespace();
        let (range, perms, off) = (w.next()?, w.next()?, w.next()?);
        let path = w.nth(2).unwrap_or("");
        let (a, b) = range.split_once('-')?;
        let (start, end) = (usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?);
        if addr >= start && addr < end && perms.contains('x') && path.starts_with('/') {
            return Some((path.to_string(), addr - start + usize::from_str_radix(off, 16).ok()?));
        }
    }
    None
}

/// The sampled allocations as they arrive: unwound, named, kept by stack.
#[derive(Default)]
pub struct Allocations {
    pub live: LiveSet,
    /// Each stack's frames (leaf first), by the index `live` keeps.
    pub stacks: Vec<Vec<String>>,
    ids: HashMap<Vec<String>, usize>,
}

impl Allocations {
    /// One event of the allocation probes: a sample unwound and kept, or a
    /// free.
    pub fn take(&mut self, e: MallocEvent, resolver: &mut Resolver) {
        match e {
            MallocEvent::Free { addr, .. } => self.live.free(addr),
            MallocEvent::Alloc { time_ns, addr, size, weight, regs, .. } => {
                let stack = regs.map(|r| {
                    let regs = Regs { ip: r.ip, sp: r.sp, bp: r.bp, orig_ax: -1, ax: 0, di: 0, si: 0, dx: 0 };
                    let (addrs, _) = resolver.unwind(&regs, r.sp, &r.stack);
                    let frames: Vec<String> = resolver.frames(&addrs).into_iter().map(|f| f.label).collect();
                    let stacks = &mut self.stacks;
                    *self.ids.entry(frames.clone()).or_insert_with(|| {
                        stacks.push(frames);
                        stacks.len() - 1
                    })
                });
                self.live.alloc(time_ns, addr, weight, size, stack);
            }
        }
    }
}

/// Sampled allocations charged by stack: what each allocated and still
/// holds at the end. Pure.
#[derive(Default)]
pub struct LiveSet {
    allocs: Vec<(u64, u64, u64, Option<usize>, bool)>, // time, weight, size, stack, freed
    by_addr: HashMap<u64, usize>,
}

/// One stack's sampled allocations.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AllocStack {
    /// Frames, leaf first.
    pub frames: Vec<String>,
    /// Bytes allocated (estimated from the samples' weights).
    pub alloc_space: u64,
    /// Of those, still allocated at the end.
    pub inuse_space: u64,
    /// Allocations, estimated (weight over size), and those still live.
    pub alloc_objects: u64,
    pub inuse_objects: u64,
    /// The oldest allocation still live: seconds before the end.
    pub oldest_live_s: Option<f64>,
}

impl LiveSet {
    /// A sampled allocation at `addr` (stack: an index the caller keeps).
    pub fn alloc(&mut self, time_ns: u64, addr: u64, weight: u64, size: u64, stack: Option<usize>) {
        // An address given out again was freed before (its free unseen).
        if let Some(&i) = self.by_addr.get(&addr) {
            self.allocs[i].4 = true;
        }
        self.by_addr.insert(addr, self.allocs.len());
        self.allocs.push((time_ns, weight, size, stack, false));
    }

    pub fn free(&mut self, addr: u64) {
        if let Some(i) = self.by_addr.remove(&addr) {
            self.allocs[i].4 = true;
        }
    }

    /// By stack (`frames[i]` for stack index `i`), largest still held first.
    pub fn by_stack(&self, frames: &[Vec<String>], end_ns: u64, top: usize) -> Vec<AllocStack> {
        let mut m: HashMap<usize, AllocStack> = HashMap::new();
        for &(time, weight, size, stack, freed) in &self.allocs {
            let Some(k) = stack else { continue };
            let e = m.entry(k).or_insert_with(|| AllocStack {
                frames: frames[k].clone(),
                alloc_space: 0,
                inuse_space: 0,
                alloc_objects: 0,
                inuse_objects: 0,
                oldest_live_s: None,
            });
            let objects = (weight / size.max(1)).max(1);
            e.alloc_space += weight;
            e.alloc_objects += objects;
            if !freed {
                e.inuse_space += weight;
                e.inuse_objects += objects;
                let age = end_ns.saturating_sub(time) as f64 / 1e9;
                e.oldest_live_s = Some(e.oldest_live_s.map_or(age, |a: f64| a.max(age)));
            }
        }
        let mut v: Vec<AllocStack> = m.into_values().collect();
        v.sort_by(|a, b| {
            b.inuse_space
                .cmp(&a.inuse_space)
                .then(b.alloc_space.cmp(&a.alloc_space))
                .then_with(|| a.frames.cmp(&b.frames))
        });
        v.truncate(top);
        v
    }

    /// Sampled bytes allocated, and still held.
    pub fn totals(&self) -> (u64, u64) {
        let alloc = self.allocs.iter().map(|a| a.1).sum();
        let held = self.allocs.iter().filter(|a| !a.4).map(|a| a.1).sum();
        (alloc, held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_decoded_at_the_kernel_layout() {
        let mut b = vec![0u8; ALLOC_HEADER + 64];
        b[0..8].copy_from_slice(&REC_ALLOC.to_le_bytes());
        b[8..16].copy_from_slice(&5u64.to_le_bytes());
        b[16..24].copy_from_slice(&0xabc0u64.to_le_bytes());
        b[24..32].copy_from_slice(&100u64.to_le_bytes());
        b[32..40].copy_from_slice(&(1u64 << 19).to_le_bytes());
        b[40..44].copy_from_slice(&77u32.to_le_bytes());
        b[44..48].copy_from_slice(&64u32.to_le_bytes());
        b[48..56].copy_from_slice(&0x5000u64.to_le_bytes());
        let e = MallocEvent::decode(&b).unwrap();
        let MallocEvent::Alloc { tid, addr, size, weight, regs, .. } = e else { panic!() };
        assert_eq!((tid, addr, size, weight), (77, 0xabc0, 100, 1 << 19));
        assert_eq!(regs.unwrap().stack.len(), 64);
        let mut f = vec![0u8; 32];
        f[0..8].copy_from_slice(&REC_FREE.to_le_bytes());
        f[16..24].copy_from_slice(&0xabc0u64.to_le_bytes());
        assert_eq!(MallocEvent::decode(&f), Some(MallocEvent::Free { time_ns: 0, addr: 0xabc0 }));
        assert_eq!(MallocEvent::decode(&f[..8]), None);
    }

    #[test]
    fn what_is_not_freed_is_held_and_its_age_kept() {
        let mut l = LiveSet::default();
        let frames = vec![vec!["a".to_string()], vec!["b".to_string()]];
        l.alloc(1_000_000_000, 0x10, 1000, 100, Some(0));
        l.alloc(2_000_000_000, 0x20, 500, 500, Some(1));
        l.alloc(3_000_000_000, 0x30, 300, 100, Some(0));
        l.free(0x30);
        // Address 0x20 handed out again: the first one was freed.
        l.alloc(4_000_000_000, 0x20, 200, 200, Some(1));
        let v = l.by_stack(&frames, 5_000_000_000, 10);
        assert_eq!(v[0].frames, vec!["a"]);
        assert_eq!((v[0].alloc_space, v[0].inuse_space, v[0].alloc_objects, v[0].inuse_objects), (1300, 1000, 13, 10));
        assert_eq!(v[0].oldest_live_s, Some(4.0));
        assert_eq!((v[1].alloc_space, v[1].inuse_space), (700, 200));
        assert_eq!(l.totals(), (2000, 1200));
    }
}
