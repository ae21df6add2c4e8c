//! The replica's device, probed before the rounds: random O_DIRECT reads
//! alone, in parallel, and beside writers.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pileup_bench_drivers::median;

use crate::bench::Bench;

/// What the device did while a probe ran: random 16 KiB O_DIRECT reads
/// from a table file and, optionally, random 16 KiB O_DIRECT writes to a
/// scratch file at the same time.
pub(crate) struct Probe {
    /// Median read latency, microseconds.
    pub(crate) read_us: f64,
    pub(crate) reads_per_s: f64,
    pub(crate) writes_per_s: f64,
}

/// Random 16 KiB reads with O_DIRECT from `file`, `readers` at a time, for
/// `secs`, while `writers` threads write random 16 KiB pages to `scratch`
/// (a file of `file`'s filesystem, created and removed here). One page read
/// alone and several at once say what parallel reads gain on an idle
/// device; with writers they say what is left when the device is also
/// flushing, as an I/O-bound replica's is: the numbers that decide what any
/// prefetcher can win. `sync_every`: each writer syncs the file after that
/// many writes, as InnoDB does after each doublewrite batch; sustained for
/// many seconds this says how much the device writes beside reads (a few
/// seconds without syncs flatter it: measured here, 3 s unsynced gave 13,752
/// reads/s beside 13,170 writes/s; 15 s syncing, 7,352 reads/s beside 13,656
/// writes/s, 224 MB/s — and no catch-up mode of the replica wrote more than
/// 219 MB/s).
fn device_probe(
    file: &std::path::Path,
    readers: usize,
    writers: usize,
    sync_every: Option<u64>,
    scratch: &std::path::Path,
    secs: f64,
) -> Result<Probe> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(file)
        .with_context(|| format!("opening {}", file.display()))?;
    let pages = f.metadata()?.len() / 16384;
    if pages < 2 {
        bail!("{} is too small to probe", file.display());
    }
    let w = if writers > 0 { Some(scratch_file(scratch)?) } else { None };
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut lat: Vec<f64> = Vec::new();
    let mut written = 0u64;
    std::thread::scope(|sc| -> Result<()> {
        let rs: Vec<_> = (0..readers)
            .map(|t| {
                let f = &f;
                sc.spawn(move || read_pages(f, pages, t, deadline))
            })
            .collect();
        let ws: Vec<_> = (0..writers)
            .map(|t| {
                let w = w.as_ref();
                sc.spawn(move || -> Result<u64> {
                    let Some(w) = w else { return Ok(0) };
                    write_pages(w, t, deadline, sync_every)
                })
            })
            .collect();
        for h in rs {
            lat.extend(h.join().map_err(|_| anyhow::anyhow!("probe thread panicked"))??);
        }
        for h in ws {
            written += h.join().map_err(|_| anyhow::anyhow!("probe thread panicked"))??;
        }
        Ok(())
    })?;
    if writers > 0 {
        let _ = std::fs::remove_file(scratch);
    }
    let n = lat.len() as f64;
    Ok(Probe { read_us: median(&lat), reads_per_s: n / secs, writes_per_s: written as f64 / secs })
}

/// Pages of the scratch file the writers overwrite (256 MiB).
const SCRATCH_PAGES: u64 = 16384;

/// The writers' scratch file, opened O_DIRECT: 256 MiB written
/// sequentially first, so the random writes overwrite allocated blocks
/// like InnoDB's page flushes do.
fn scratch_file(scratch: &std::path::Path) -> Result<std::fs::File> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let w = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(scratch)
        .with_context(|| format!("creating {}", scratch.display()))?;
    let mut v = vec![0x5au8; (1 << 20) + 4096];
    let off = v.as_ptr().align_offset(4096);
    for i in 0..SCRATCH_PAGES / 64 {
        w.write_all_at(&v[off..off + (1 << 20)], i << 20)?;
    }
    w.sync_all()?;
    v.clear();
    Ok(w)
}

/// O_DIRECT wants an aligned buffer: 16 KiB inside a 20 KiB vector.
fn aligned() -> Vec<u8> {
    vec![0u8; 20480]
}

/// The next number of a xorshift sequence: random page numbers.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Reader `t` of a probe: random 16 KiB reads of `f`'s `pages` until
/// `deadline`; each read's latency in microseconds.
fn read_pages(f: &std::fs::File, pages: u64, t: usize, deadline: Instant) -> Result<Vec<f64>> {
    use std::os::unix::fs::FileExt;
    let mut v = aligned();
    let off = v.as_ptr().align_offset(4096);
    let buf = &mut v[off..off + 16384];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1);
    let mut out = Vec::new();
    while Instant::now() < deadline {
        let at = (xorshift(&mut x) % pages) * 16384;
        let t0 = Instant::now();
        f.read_exact_at(buf, at)?;
        out.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    Ok(out)
}

/// Writer `t` of a probe: random 16 KiB writes to the scratch file until
/// `deadline`, syncing after every `sync_every`; how many it wrote.
fn write_pages(w: &std::fs::File, t: usize, deadline: Instant, sync_every: Option<u64>) -> Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut v = aligned();
    let off = v.as_ptr().align_offset(4096);
    let buf = &mut v[off..off + 16384];
    buf.fill(0xa5);
    let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ (t as u64 + 1);
    let mut n = 0;
    while Instant::now() < deadline {
        w.write_all_at(buf, (xorshift(&mut x) % SCRATCH_PAGES) * 16384)?;
        n += 1;
        if sync_every.is_some_and(|k| n % k == 0) {
            w.sync_data()?;
        }
    }
    Ok(n)
}

/// The device, measured before the rounds: one page read alone, several at
/// once, several beside writers, and sustained beside syncing writers.
pub(crate) struct Device {
    pub(crate) one: Probe,
    pub(crate) four: Probe,
    pub(crate) mixed: Probe,
    pub(crate) sustained: Probe,
}

impl Device {
    /// Probe the device that holds the replica's largest table file.
    pub(crate) fn probe(b: &Bench) -> Result<Device> {
        let ibd = std::fs::read_dir(b.replica.endpoint.dir.join("data/sbtest"))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "ibd"))
            .max_by_key(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .map(|e| e.path())
            .context("no sbtest .ibd file in the replica's datadir")?;
        let scratch = b.replica.endpoint.dir.join("tmp/device-probe");
        let d = Device {
            one: device_probe(&ibd, 1, 0, None, &scratch, 3.0)?,
            four: device_probe(&ibd, 4, 0, None, &scratch, 3.0)?,
            mixed: device_probe(&ibd, 4, 4, None, &scratch, 3.0)?,
            sustained: device_probe(&ibd, 4, 8, Some(64), &scratch, 15.0)?,
        };
        let (one, four, mixed, sustained) = (&d.one, &d.four, &d.mixed, &d.sustained);
        eprintln!(
            "device: 16 KiB O_DIRECT random reads: 1 at a time {:.0} µs, {:.0}/s; 4 at a time {:.0} µs, {:.0}/s; \
             4 at a time with 4 writers {:.0} µs, {:.0} reads/s + {:.0} writes/s; sustained with 8 syncing writers {:.0} µs, {:.0} reads/s + {:.0} writes/s",
            one.read_us, one.reads_per_s, four.read_us, four.reads_per_s,
            mixed.read_us, mixed.reads_per_s, mixed.writes_per_s, sustained.read_us, sustained.reads_per_s, sustained.writes_per_s
        );
        Ok(d)
    }

    /// The device's figures as a paragraph of the report.
    pub(crate) fn describe(&self) -> String {
        let (one, four, mixed, sustained) = (&self.one, &self.four, &self.mixed, &self.sustained);
        format!(
            "\nThe device (16 KiB O_DIRECT random reads of the replica's largest table file, measured before the rounds): \
             one read at a time takes {:.0} µs ({:.0} reads/s); four at a time, {:.0} µs each ({:.0} reads/s, {:.1}× the throughput); \
             four at a time while four threads write random 16 KiB pages to a scratch file, {:.0} µs each ({:.0} reads/s + {:.0} writes/s); \
             sustained for 15 s beside eight writers that sync every 64 writes (as InnoDB syncs each doublewrite batch), {:.0} µs each \
             ({:.0} reads/s + {:.0} writes/s, {:.0} MB/s written).\n",
            one.read_us,
            one.reads_per_s,
            four.read_us,
            four.reads_per_s,
            four.reads_per_s / one.reads_per_s.max(1e-9),
            mixed.read_us,
            mixed.reads_per_s,
            mixed.writes_per_s,
            sustained.read_us,
            sustained.reads_per_s,
            sustained.writes_per_s,
            sustained.writes_per_s * 16384.0 / 1e6
        )
    }
}
