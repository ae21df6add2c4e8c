//! Record an offline fixture of a live server for the engine's replay test
//! (`tests/replay.rs`): one consistent snapshot of its threads (registers
//! and stack copies, as `pileup stacks` takes them), what the engine made of
//! each live (frames and names), and of each module only the bytes that
//! unwinding and naming those stacks read, at their original file offsets.
//!
//! ```text
//! cargo run -p pileup-engine --example record_fixture -- PID OUT_DIR
//! ```
//!
//! A module's image keeps its ELF and section headers, the `.eh_frame`
//! entries (and their CIEs) of every function a stack word may return
//! into, a rewritten `.eh_frame_hdr` table listing only those, the code
//! around each such address, and the symbols (with their names) that
//! name the frames. Everything else is zero, so the image compresses to a
//! few kilobytes. Before writing, the fixture is replayed and must give
//! every thread the frames and names it had live.
//!
//! Written by hand rather than with an ELF writer: the image must keep the
//! original file's offsets and addresses byte for byte, which copying
//! ranges of the original does and re-linking would not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment};
use pileup_engine::parts::{capture, read_maps, MapEntry};
use pileup_engine::process::{os_thread, tids};
use pileup_engine::{CaptureOptions, ModuleFile, Resolver};

/// Threads with the same frames are kept at most this many times.
const SAME_STACK: usize = 2;
/// Code kept either side of every address a stack may return to.
const CODE_AROUND: u64 = 256;
/// At most this much of one function's code is kept.
const MAX_FUNCTION: u64 = 64 * 1024;

#[path = "../tests/common/fixture.rs"]
mod fixture;
use fixture::{hex, unhex, Fixture, ModuleEntry, ThreadEntry};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: record_fixture PID OUT_DIR");
        std::process::exit(2);
    }
    if let Err(e) = record(args[1].parse().unwrap_or(0), Path::new(&args[2])) {
        eprintln!("record_fixture: {e}");
        std::process::exit(1);
    }
}

fn record(pid: i32, out: &Path) -> Result<(), String> {
    let maps = read_maps(pid).map_err(|e| e.to_string())?;
    let all = tids(pid).map_err(|e| e.to_string())?;
    let os: BTreeMap<i32, _> = all.iter().filter_map(|&t| Some((t, os_thread(pid, t)?))).collect();
    let asleep: Vec<i32> = os.iter().filter(|(_, o)| matches!(o.state, 'S' | 'D')).map(|(t, _)| *t).collect();
    let sample = capture(pid, &all, &asleep, &maps, &CaptureOptions::default()).map_err(|e| e.to_string())?;
    let mut live = Resolver::new(pid, true, false, &[]).map_err(|e| e.to_string())?;

    // The executable mappings of every module, and what of each is needed.
    let exec: Vec<&MapEntry> =
        maps.iter().filter(|m| m.is_exec() && (m.path.starts_with('/') || m.path == "[vdso]")).collect();
    let mut needs: BTreeMap<String, Needs> = BTreeMap::new();
    let mut need = |a: u64, may_return: bool| {
        let Some(m) = exec.iter().find(|m| m.start <= a && a < m.end) else { return };
        let n = needs.entry(m.path.clone()).or_default();
        n.addrs.insert(a);
        if may_return {
            n.returns.insert(a);
        }
    };
    let mut threads = vec![];
    let mut seen: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    for t in &sample.threads {
        let (frames, error) = live.unwind(&t.regs, t.stack_addr, &t.stack);
        let labels: Vec<String> = live.frames(&frames).into_iter().map(|f| f.label).collect();
        let n = seen.entry(labels.clone()).or_default();
        *n += 1;
        if *n > SAME_STACK {
            continue;
        }
        // Every stack word in a module's code may be a return address the
        // unwinder tries (threads read asleep have no frame pointer).
        need(t.regs.ip, false);
        for w in t.stack.chunks_exact(8) {
            need(u64::from_le_bytes(w.try_into().unwrap()), true);
        }
        for &f in &frames {
            need(f, false);
            need(f + 1, true);
        }
        let o = os.get(&t.tid);
        threads.push(ThreadEntry {
            name: o.map(|o| o.name.clone()).unwrap_or_default(),
            state: o.map(|o| o.state).unwrap_or('?'),
            read_asleep: t.regs.bp == 0,
            regs: t.regs,
            stack_addr: t.stack_addr,
            stack: hex(&t.stack),
            frames,
            labels,
            error,
        });
    }

    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut modules = vec![];
    let mut targets: Vec<(String, u64)> = vec![];
    // Direct calls found before return addresses lead to more addresses
    // (their targets, for the check that a call goes where the stack says);
    // those are added to their modules in a second round.
    for round in 0..2 {
        for (path, n) in needs.iter_mut() {
            let maps: Vec<&MapEntry> = exec.iter().filter(|m| &m.path == path).copied().collect();
            let bytes = module_bytes(pid, path, maps[0])?;
            let img = Image::parse(&bytes, maps[0])?;
            if round == 0 {
                for &ra in &n.returns {
                    if let Some(t) = img.direct_call_before(&bytes, ra) {
                        targets.push((path.clone(), t));
                    }
                }
                continue;
            }
            let name = Path::new(path).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or(path.clone());
            let name = name.trim_matches(|c| c == '[' || c == ']').to_string();
            let sparse = img.sparse(&bytes, &n.addrs, &threads)?;
            let file = format!("{name}.zst");
            write_zst(&out.join(&file), &sparse)?;
            for m in &maps {
                modules.push(ModuleEntry {
                    path: path.clone(),
                    start: m.start,
                    end: m.end,
                    offset: m.offset,
                    image: file.clone(),
                });
            }
        }
        for (path, t) in targets.drain(..) {
            if let Some(n) = needs.get_mut(&path) {
                n.addrs.insert(t);
            }
        }
    }

    let exe = live.exe.clone();
    verify(out, &exe, &modules, &threads)?;
    let fixture = Fixture { exe, modules, threads };
    let json = serde_json::to_vec_pretty(&fixture).map_err(|e| e.to_string())?;
    write_zst(&out.join("threads.json.zst"), &json)?;
    eprintln!("recorded {} threads and {} modules in {}", fixture.threads.len(), fixture.modules.len(), out.display());
    Ok(())
}

#[derive(Default)]
struct Needs {
    /// Addresses whose function's unwind entry, code and name are kept.
    addrs: BTreeSet<u64>,
    /// Those that may be return addresses: the call before each is read.
    returns: BTreeSet<u64>,
}

/// Replay the written fixture and compare with what the engine saw live.
fn verify(out: &Path, exe: &str, modules: &[ModuleEntry], threads: &[ThreadEntry]) -> Result<(), String> {
    let dir = out.join(".verify");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut files = vec![];
    for m in modules {
        let raw = std::fs::read(out.join(&m.image)).map_err(|e| e.to_string())?;
        let img = dir.join(m.image.trim_end_matches(".zst"));
        std::fs::write(&img, zstd::decode_all(&raw[..]).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        files.push(ModuleFile { path: m.path.clone(), start: m.start, end: m.end, offset: m.offset, file: img });
    }
    let mut r = Resolver::open(exe, &files);
    let mut bad = vec![];
    for t in threads {
        let stack = unhex(&t.stack);
        let (frames, error) = r.unwind(&t.regs, t.stack_addr, &stack);
        let labels: Vec<String> = r.frames(&frames).into_iter().map(|f| f.label).collect();
        if frames != t.frames || labels != t.labels || error != t.error {
            bad.push(format!("{}: live {:?} ({:?}), replayed {:?} ({:?})", t.name, t.labels, t.error, labels, error));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("the replay differs from the live result:\n{}", bad.join("\n")))
    }
}

fn module_bytes(pid: i32, path: &str, m: &MapEntry) -> Result<Vec<u8>, String> {
    if path == "[vdso]" {
        let mut v = vec![0u8; (m.end - m.start) as usize];
        let f = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| e.to_string())?;
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut v, m.start).map_err(|e| format!("[vdso]: {e}"))?;
        return Ok(v);
    }
    let p = PathBuf::from(format!("/proc/{pid}/root{path}"));
    std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))
}

/// Where a module's parts lie in its file.
struct Image {
    bias: u64,
    /// (svma, file offset, size) of each loaded segment.
    segments: Vec<(u64, u64, u64)>,
    hdr: (u64, u64, u64),
    eh_frame: (u64, u64, u64),
    /// Sorted (function start svma, FDE svma) from `.eh_frame_hdr`.
    table: Vec<(u64, u64)>,
    /// File ranges kept whole: the ELF header, program and section
    /// headers, section names and notes.
    whole: Vec<(u64, u64)>,
    /// Symbol tables: (file offset, size, string table file offset).
    symtabs: Vec<(u64, u64, u64)>,
}

impl Image {
    fn parse(data: &[u8], first: &MapEntry) -> Result<Image, String> {
        let obj = object::File::parse(data).map_err(|e| e.to_string())?;
        let segments: Vec<(u64, u64, u64)> =
            obj.segments().map(|s| (s.address(), s.file_range().0, s.file_range().1)).collect();
        let bias = if first.path == "[vdso]" {
            first.start - segments.iter().map(|s| s.0).min().unwrap_or(0)
        } else {
            let s = segments
                .iter()
                .find(|s| s.1 <= first.offset && first.offset < s.1 + s.2.max(1))
                .ok_or("no segment holds the mapping")?;
            first.start - (s.0 + (first.offset - s.1))
        };
        let sect =
            |n: &str| obj.section_by_name(n).and_then(|s| Some((s.address(), s.file_range()?.0, s.file_range()?.1)));
        let hdr = sect(".eh_frame_hdr").ok_or("no .eh_frame_hdr")?;
        let eh_frame = sect(".eh_frame").ok_or("no .eh_frame")?;
        let h = &data[hdr.1 as usize..(hdr.1 + hdr.2) as usize];
        if h[..4] != [1, 0x1b, 0x03, 0x3b] {
            return Err(format!("unexpected .eh_frame_hdr encodings {:02x?}", &h[..4]));
        }
        let count = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
        let i32_at = |o: usize| i32::from_le_bytes(h[o..o + 4].try_into().unwrap()) as i64;
        let table = (0..count)
            .map(|i| {
                let o = 12 + 8 * i;
                ((hdr.0 as i64 + i32_at(o)) as u64, (hdr.0 as i64 + i32_at(o + 4)) as u64)
            })
            .collect();
        let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap());
        let u16_at = |o: usize| u16::from_le_bytes(data[o..o + 2].try_into().unwrap()) as u64;
        let (phoff, shoff) = (u64_at(0x20), u64_at(0x28));
        let mut whole = vec![(0, 64), (phoff, u16_at(0x36) * u16_at(0x38)), (shoff, u16_at(0x3a) * u16_at(0x3c))];
        let mut symtabs = vec![];
        for s in obj.sections() {
            let Some((off, size)) = s.file_range() else { continue };
            let name = s.name().unwrap_or("");
            if name == ".shstrtab" || name.starts_with(".note") {
                whole.push((off, size));
            }
            let strings = match name {
                ".dynsym" => ".dynstr",
                ".symtab" => ".strtab",
                _ => continue,
            };
            if let Some(st) = obj.section_by_name(strings).and_then(|s| s.file_range()) {
                symtabs.push((off, size, st.0));
            }
        }
        Ok(Image { bias, segments, hdr, eh_frame, table, whole, symtabs })
    }

    fn file_offset(&self, svma: u64) -> Option<u64> {
        self.segments.iter().find(|s| s.0 <= svma && svma < s.0 + s.2).map(|s| s.1 + (svma - s.0))
    }

    /// The target of a direct call just before return address `ra` (avma).
    fn direct_call_before(&self, data: &[u8], ra: u64) -> Option<u64> {
        let off = self.file_offset(ra.wrapping_sub(self.bias).checked_sub(5)?)? as usize;
        let b = data.get(off..off + 5)?;
        (b[0] == 0xe8).then(|| ra.wrapping_add(i32::from_le_bytes(b[1..5].try_into().unwrap()) as i64 as u64))
    }

    /// The module's bytes with only what the stacks need, the rest zero.
    fn sparse(&self, data: &[u8], addrs: &BTreeSet<u64>, threads: &[ThreadEntry]) -> Result<Vec<u8>, String> {
        let mut out = vec![0u8; data.len()];
        let mut keep = |off: u64, len: u64| {
            let (a, b) = (off as usize, ((off + len) as usize).min(data.len()));
            if a < b {
                out[a..b].copy_from_slice(&data[a..b]);
            }
        };
        for &(o, l) in &self.whole {
            keep(o, l);
        }
        let mut entries = BTreeSet::new();
        let mut code = vec![];
        for &a in addrs {
            let svma = a.wrapping_sub(self.bias);
            code.push((svma.saturating_sub(CODE_AROUND), 2 * CODE_AROUND));
            let i = self.table.partition_point(|e| e.0 <= svma);
            if i > 0 {
                entries.insert(self.table[i - 1]);
            }
        }
        let eh = |svma: u64| (self.eh_frame.1 + (svma - self.eh_frame.0)) as usize;
        let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
        for &(start, fde) in &entries {
            let o = eh(fde);
            let len = u32_at(o) as u64;
            let cie = (o + 4) as u64 - u32_at(o + 4) as u64;
            let range = u32_at(o + 12) as u64;
            keep(o as u64, 4 + len);
            keep(cie, 4 + u32_at(cie as usize) as u64);
            code.push((start, range.min(MAX_FUNCTION)));
        }
        for (svma, len) in code {
            let mut s = svma;
            // Code may cross into the next segment only where it is mapped.
            while s < svma + len {
                let Some(o) = self.file_offset(s) else { break };
                keep(o, 1);
                s += 1;
            }
        }
        // The binary search table of the entries kept.
        let h = self.hdr.1 as usize;
        keep(self.hdr.1, 12);
        out[h + 8..h + 12].copy_from_slice(&(entries.len() as u32).to_le_bytes());
        for (k, (start, fde)) in entries.iter().enumerate() {
            let o = h + 12 + 8 * k;
            out[o..o + 4].copy_from_slice(&((*start as i64 - self.hdr.0 as i64) as i32).to_le_bytes());
            out[o + 4..o + 8].copy_from_slice(&((*fde as i64 - self.hdr.0 as i64) as i32).to_le_bytes());
        }
        self.keep_symbols(data, &mut out, threads);
        Ok(out)
    }

    /// Keep the symbols that may name a frame of this module: each that
    /// holds a frame's address, and the nearest one below it. Of aliases
    /// (several names for one function), only the one that named the frame
    /// live: which alias a symbolizer picks depends on the whole table.
    fn keep_symbols(&self, data: &[u8], out: &mut [u8], threads: &[ThreadEntry]) {
        let mut frames: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
        for t in threads {
            for (a, l) in t.frames.iter().zip(&t.labels) {
                frames.entry(a.wrapping_sub(self.bias)).or_default().insert(l);
            }
        }
        let cstr = |o: usize| &data[o..o + data[o..].iter().position(|&b| b == 0).unwrap_or(0)];
        for &(off, size, strings) in &self.symtabs {
            let sym = |i: usize| {
                let o = off as usize + 24 * i;
                let e = &data[o..o + 24];
                let name = strings as usize + u32::from_le_bytes(e[0..4].try_into().unwrap()) as usize;
                let value = u64::from_le_bytes(e[8..16].try_into().unwrap());
                let size = u64::from_le_bytes(e[16..24].try_into().unwrap());
                let shndx = u16::from_le_bytes(e[6..8].try_into().unwrap());
                (o, name, value, size, shndx)
            };
            let n = (size / 24) as usize;
            let mut wanted = BTreeSet::new();
            for (&f, labels) in &frames {
                let mut nearest: Option<(u64, usize)> = None;
                let mut holding = vec![];
                for i in 1..n {
                    let (_, _, value, size, shndx) = sym(i);
                    if shndx == 0 || value > f {
                        continue;
                    }
                    if f < value + size.max(1) {
                        holding.push(i);
                    }
                    if nearest.is_none_or(|(v, _)| value > v) {
                        nearest = Some((value, i));
                    }
                }
                let named: Vec<usize> = holding
                    .iter()
                    .copied()
                    .filter(|&i| labels.iter().any(|l| cstr(sym(i).1) == l.as_bytes()))
                    .collect();
                if named.is_empty() {
                    wanted.extend(holding);
                    wanted.extend(nearest.map(|(_, i)| i));
                } else {
                    wanted.extend(named);
                }
            }
            for i in wanted {
                let (o, name, ..) = sym(i);
                out[o..o + 24].copy_from_slice(&data[o..o + 24]);
                let end = name + cstr(name).len() + 1;
                out[name..end].copy_from_slice(&data[name..end]);
            }
        }
    }
}

fn write_zst(path: &Path, data: &[u8]) -> Result<(), String> {
    let z = zstd::encode_all(data, 19).map_err(|e| e.to_string())?;
    std::fs::write(path, z).map_err(|e| format!("{}: {e}", path.display()))
}
