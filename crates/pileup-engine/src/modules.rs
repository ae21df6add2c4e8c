//! The code modules (executable and shared libraries) mapped into the target:
//! where each is loaded, its unwind tables for [`crate::unwind`], the start of
//! every function (from `.eh_frame_hdr`, so even a stripped binary's unnamed
//! functions get a stable identity) and how complete its symbols are.

use std::collections::BTreeMap;
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};

use framehop::x86_64::UnwinderX86_64;
use framehop::{ExplicitModuleSectionInfo, Module as FhModule, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};
use serde::Serialize;

use crate::error::DebugFileError;
use crate::proc::MapEntry;

/// One loaded module.
#[derive(Debug, Clone, Serialize)]
pub struct Module {
    /// Path as the target sees it (from /proc/PID/maps).
    pub path: String,
    /// Path we read it from (through /proc/PID/root or map_files).
    #[serde(skip)]
    pub open_path: PathBuf,
    /// Short name used in frames (`mariadbd`, `libc.so.6`).
    pub name: String,
    /// Executable address range in the target.
    pub avma: Range<u64>,
    /// Load bias: svma = avma - bias.
    pub bias: u64,
    pub build_id: Option<String>,
    pub symbols: SymbolInfo,
    /// Sorted function start svmas (from .eh_frame_hdr).
    #[serde(skip)]
    pub func_starts: Vec<u64>,
}

/// What symbol information a module has.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct SymbolInfo {
    /// Entries in .symtab (0: stripped).
    pub symtab: usize,
    /// Entries in .dynsym (exported symbols).
    pub dynsym: usize,
    /// A separate debug file was found (build-id or .gnu_debuglink).
    pub debug_file: Option<String>,
    /// How the debug file was found.
    pub debug_found_by: Option<DebugFoundBy>,
    /// The module carries MiniDebugInfo (`.gnu_debugdata`: an xz-compressed
    /// symbol table of its local functions, as Fedora and RHEL ship).
    pub minidebuginfo: bool,
    /// The module or its debug file has DWARF (.debug_info).
    pub dwarf: bool,
}

/// Where a separate debug file was found.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DebugFoundBy {
    /// `DIR/.build-id/xx/rest.debug` (Debian's -dbgsym, Fedora's -debuginfo).
    BuildId,
    /// The `.gnu_debuglink` name, its CRC checked.
    DebugLink,
    /// Fetched from a debuginfod server (or found in its client cache).
    Debuginfod,
}

impl SymbolInfo {
    /// Names come from the debug file at `path` too (`parsed`: what it
    /// holds, when it could be read).
    fn use_debug_file(&mut self, path: &Path, how: DebugFoundBy, parsed: Option<&object::File>) {
        if let Some(o) = parsed {
            self.dwarf |= o.section_by_name(".debug_info").is_some();
            self.symtab = self.symtab.max(o.symbols().count());
        }
        self.debug_file = Some(path.display().to_string());
        self.debug_found_by = Some(how);
    }

    pub fn describe(&self) -> String {
        let origin = match self.debug_found_by {
            Some(DebugFoundBy::BuildId) => "debug file by build-id: ",
            Some(DebugFoundBy::DebugLink) => "debug file by .gnu_debuglink: ",
            Some(DebugFoundBy::Debuginfod) => "debug file from debuginfod: ",
            None if self.minidebuginfo && self.symtab == 0 => "MiniDebugInfo: ",
            None => "",
        };
        let what = if self.dwarf {
            format!(
                "full symbols ({}) and DWARF (inlined frames and lines with --debug-info)",
                self.symtab.max(self.dynsym)
            )
        } else if self.symtab > 0 {
            format!("full symbol table ({} symbols), no debug info", self.symtab)
        } else if self.minidebuginfo {
            "its functions' names (.gnu_debugdata), no debug info".to_string()
        } else if self.dynsym > 0 {
            format!("stripped: exported symbols only ({})", self.dynsym)
        } else {
            "stripped, no symbols".into()
        };
        format!("{origin}{what}")
    }
}

/// Where separate debug files are looked for unless told otherwise (gdb's
/// `debug-file-directory`).
pub const DEBUG_DIRS: &[&str] = &["/usr/lib/debug"];

impl Module {
    pub fn svma(&self, avma: u64) -> u64 {
        avma.wrapping_sub(self.bias)
    }

    /// Start svma of the function containing `svma`, per the unwind tables.
    pub fn func_start(&self, svma: u64) -> Option<u64> {
        let i = self.func_starts.partition_point(|&s| s <= svma);
        (i > 0).then(|| self.func_starts[i - 1])
    }
}

/// Section bytes shared with the mapped file: no copy of `.text` or
/// `.eh_frame` is made, and only the pages unwinding touches are read.
#[derive(Clone)]
pub struct Bytes {
    data: std::sync::Arc<Data>,
    range: Range<usize>,
}

impl Default for Bytes {
    fn default() -> Self {
        Bytes { data: std::sync::Arc::new(Data::Owned(Vec::new())), range: 0..0 }
    }
}

enum Data {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Mapped(m) => m,
            Data::Owned(v) => v,
        }
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data.bytes()[self.range.clone()]
    }
}

/// All modules of the target plus the unwinder built from them.
pub struct ModuleSet {
    pub modules: Vec<Module>,
    pub unwinder: UnwinderX86_64<Bytes>,
    /// Modules we could not read (path → reason), reported to the user.
    pub unreadable: Vec<(String, String)>,
    /// The executable mappings' bytes, when the set was opened from files.
    images: Vec<Image>,
}

/// One executable mapping of a module opened from a file.
struct Image {
    avma: Range<u64>,
    offset: u64,
    data: std::sync::Arc<Data>,
}

/// A module's bytes from a file other than the target's: where the target
/// maps its code and the file that holds the module's bytes at their
/// original offsets. See [`ModuleSet::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFile {
    /// The module as the target sees it (`/usr/sbin/mariadbd`, `[vdso]`).
    pub path: String,
    /// Its executable mapping: start and end address, file offset.
    pub start: u64,
    /// End address of the mapping (exclusive).
    pub end: u64,
    /// File offset the mapping starts at.
    pub offset: u64,
    /// The file holding its bytes.
    pub file: PathBuf,
}

impl ModuleSet {
    /// Modules a debuginfod server may name: stripped, with a build-id and
    /// no debug file found locally (index, name, build-id).
    pub fn wanting_debug_files(&self) -> Vec<(usize, String, String)> {
        self.modules
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                m.symbols.debug_file.is_none() && m.symbols.symtab == 0 && !m.open_path.as_os_str().is_empty()
            })
            .filter_map(|(i, m)| m.build_id.clone().map(|id| (i, m.name.clone(), id)))
            .collect()
    }

    /// Use a debug file fetched for module `idx`: its symbols name the
    /// module's frames from now on.
    pub fn apply_debug_file(&mut self, idx: usize, path: &Path) -> Result<(), DebugFileError> {
        let io = |source| DebugFileError::Io { path: path.display().to_string(), source };
        let f = fs::File::open(path).map_err(io)?;
        // SAFETY: read-only mapping, see read_module_file.
        let d = unsafe { memmap2::Mmap::map(&f) }.map_err(io)?;
        let o = object::File::parse(&*d)
            .map_err(|e| DebugFileError::NotElf { path: path.display().to_string(), why: e.to_string() })?;
        // A server (or a cache) that hands out another build's file would
        // name the wrong functions.
        let got = o.build_id().ok().flatten().map(hex);
        if got.is_none() || got != self.modules[idx].build_id {
            return Err(DebugFileError::OtherBuild {
                path: path.display().to_string(),
                got: got.unwrap_or_else(|| "(none)".into()),
                module: self.modules[idx].name.clone(),
            });
        }
        self.modules[idx].symbols.use_debug_file(path, DebugFoundBy::Debuginfod, Some(&o));
        Ok(())
    }

    pub fn find(&self, avma: u64) -> Option<&Module> {
        let i = self.modules.partition_point(|m| m.avma.end <= avma);
        self.modules.get(i).filter(|m| m.avma.start <= avma)
    }

    /// Load every executable file mapping (and the vdso) of `pid`; separate
    /// debug files are looked for under `debug_dirs`.
    pub fn load(pid: i32, maps: &[MapEntry], debug_dirs: &[PathBuf]) -> ModuleSet {
        // Group executable mappings by file.
        let mut by_path: BTreeMap<String, Vec<&MapEntry>> = BTreeMap::new();
        for m in maps {
            if m.is_exec() && (m.path.starts_with('/') || m.path == "[vdso]") {
                by_path.entry(m.path.clone()).or_default().push(m);
            }
        }
        let mut set = ModuleSet::empty();
        for (path, exec_maps) in by_path {
            let t = std::time::Instant::now();
            let first = exec_maps[0];
            let avma = exec_maps.iter().map(|m| m.start).min().unwrap()..exec_maps.iter().map(|m| m.end).max().unwrap();
            let file = if path == "[vdso]" {
                let mut buf = vec![0u8; (first.end - first.start) as usize];
                let n = crate::capture::read_mem(pid, first.start, &mut buf);
                buf.truncate(n);
                (std::sync::Arc::new(Data::Owned(buf)), PathBuf::new())
            } else {
                match read_module_file(pid, &path, first) {
                    Ok(x) => x,
                    Err(e) => {
                        set.unreadable.push((path.clone(), e));
                        continue;
                    }
                }
            };
            let read_us = t.elapsed().as_micros();
            set.add(Some(pid), &path, file, first, avma, debug_dirs);
            tracing::debug!(module = %path, read_us, total_us = t.elapsed().as_micros() as u64, "module loaded");
        }
        set.modules.sort_by_key(|m| m.avma.start);
        set
    }

    /// Load modules from files that hold their bytes at the target's file
    /// offsets (a fixture recorded from a live server): no process is read.
    /// Their code is read from these files too. No debug files are looked
    /// for; the vdso's frames are labelled by function start, as live.
    pub fn open(files: &[ModuleFile]) -> ModuleSet {
        let mut set = ModuleSet::empty();
        for f in files {
            let map = MapEntry {
                start: f.start,
                end: f.end,
                perms: "r-xp".into(),
                offset: f.offset,
                inode: 0,
                path: f.path.clone(),
            };
            // SAFETY: read-only mapping, see read_module_file.
            let data = match fs::File::open(&f.file).and_then(|h| unsafe { memmap2::Mmap::map(&h) }) {
                Ok(d) => std::sync::Arc::new(Data::Mapped(d)),
                Err(e) => {
                    set.unreadable.push((f.path.clone(), format!("{}: {e}", f.file.display())));
                    continue;
                }
            };
            set.images.push(Image { avma: f.start..f.end, offset: f.offset, data: data.clone() });
            let open_path = if f.path == "[vdso]" { PathBuf::new() } else { f.file.clone() };
            set.add(None, &f.path, (data, open_path), &map, f.start..f.end, &[]);
        }
        set.modules.sort_by_key(|m| m.avma.start);
        set
    }

    fn empty() -> ModuleSet {
        ModuleSet { modules: vec![], unwinder: UnwinderX86_64::new(), unreadable: vec![], images: vec![] }
    }

    /// Add the module at `path` whose bytes are `file` (as mapped, and the
    /// path they are read from).
    fn add(
        &mut self,
        pid: Option<i32>,
        path: &str,
        file: (std::sync::Arc<Data>, PathBuf),
        first: &MapEntry,
        avma: Range<u64>,
        debug_dirs: &[PathBuf],
    ) {
        let (data, open_path) = file;
        match build(pid, path, open_path, data, first, avma, debug_dirs) {
            Ok((m, fh)) => {
                self.unwinder.add_module(fh);
                self.modules.push(m);
            }
            Err(e) => self.unreadable.push((path.to_string(), e)),
        }
    }

    /// Read code bytes at `avma`: from the module files when the set was
    /// opened from files, else from `pid`'s memory. Returns the count read.
    pub(crate) fn read_code(&self, pid: i32, avma: u64, buf: &mut [u8]) -> usize {
        if self.images.is_empty() {
            return crate::capture::read_mem(pid, avma, buf);
        }
        let Some(img) = self.images.iter().find(|i| i.avma.contains(&avma)) else { return 0 };
        let d = img.data.bytes();
        let off = (avma - img.avma.start + img.offset) as usize;
        let n = buf.len().min(d.len().saturating_sub(off)).min((img.avma.end - avma) as usize);
        buf[..n].copy_from_slice(&d[off..off + n]);
        n
    }
}

fn read_module_file(pid: i32, path: &str, m: &MapEntry) -> Result<(std::sync::Arc<Data>, PathBuf), String> {
    // Prefer the file as the target sees it (containers), then map_files
    // (works for deleted/upgraded binaries), then the plain path.
    let clean = path.trim_end_matches(" (deleted)");
    let cands = [
        PathBuf::from(format!("/proc/{pid}/root{clean}")),
        PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)),
        PathBuf::from(clean),
    ];
    let mut last = String::new();
    for c in cands {
        // SAFETY: the mapping is read-only; a binary rewritten in place while
        // we read it could show torn bytes, which the parsers treat as corrupt
        // data, not as memory unsafety.
        match fs::File::open(&c).and_then(|f| unsafe { memmap2::Mmap::map(&f) }) {
            Ok(d) => return Ok((std::sync::Arc::new(Data::Mapped(d)), c)),
            Err(e) => last = format!("{}: {e}", c.display()),
        }
    }
    Err(last)
}

type Built = (Module, FhModule<Bytes>);

fn build(
    pid: Option<i32>,
    path: &str,
    open_path: PathBuf,
    shared: std::sync::Arc<Data>,
    first: &MapEntry,
    avma: Range<u64>,
    debug_dirs: &[PathBuf],
) -> Result<Built, String> {
    let data = shared.bytes();
    let obj = object::File::parse(data).map_err(|e| format!("not a readable ELF file: {e}"))?;
    // Load bias from the segment that contains the first executable mapping's file offset.
    let bias = if first.path == "[vdso]" {
        // The vdso image is mapped from its own start; its segments start at
        // its stated base address.
        let base = obj.segments().map(|s| s.address()).min().unwrap_or(0);
        first.start.wrapping_sub(base)
    } else {
        let seg = obj
            .segments()
            .find(|s| {
                let (off, size) = s.file_range();
                off <= first.offset && first.offset < off + size.max(1)
            })
            .ok_or_else(|| "no segment matches its mapping".to_string())?;
        let (off, _) = seg.file_range();
        first.start.wrapping_sub(seg.address() + (first.offset - off))
    };
    let sect = |name: &str| obj.section_by_name(name);
    let svma_range = |name: &str| sect(name).map(|s| s.address()..s.address() + s.size());
    // Sections are slices of the shared mapping (compressed sections, rare
    // for unwind tables, are not supported and simply skipped).
    let sdata = |name: &str| {
        let s = sect(name)?;
        let (off, size) = s
            .compressed_file_range()
            .ok()
            .filter(|r| r.format == object::CompressionFormat::None)
            .map(|r| (r.offset, r.compressed_size))?;
        let (off, size) = (off as usize, size as usize);
        (off.checked_add(size)? <= data.len() && s.kind() != object::SectionKind::UninitializedData)
            .then(|| Bytes { data: shared.clone(), range: off..off + size })
    };

    let eh_frame_hdr = sdata(".eh_frame_hdr");
    let func_starts = match (&eh_frame_hdr, svma_range(".eh_frame_hdr"), svma_range(".eh_frame")) {
        (Some(d), Some(hr), Some(er)) => function_starts(&d[..], hr.start, er.start),
        _ => vec![],
    };
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: svma_range(".text"),
        text: sdata(".text"),
        got_svma: svma_range(".got"),
        eh_frame_svma: svma_range(".eh_frame"),
        eh_frame: sdata(".eh_frame"),
        eh_frame_hdr_svma: svma_range(".eh_frame_hdr"),
        eh_frame_hdr,
        debug_frame: sdata(".debug_frame"),
        ..Default::default()
    };
    let name =
        Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.to_string());
    let fh = FhModule::new(name.clone(), avma.clone(), bias, info);
    let build_id = obj.build_id().ok().flatten().map(hex);
    let symtab = obj.symbols().count();
    let dynsym = obj.dynamic_symbols().count();
    let mut symbols = SymbolInfo {
        symtab,
        dynsym,
        dwarf: obj.section_by_name(".debug_info").is_some(),
        minidebuginfo: obj.section_by_name(".gnu_debugdata").is_some(),
        ..Default::default()
    };
    let found = pid.and_then(|pid| find_debug_file(pid, build_id.as_deref(), &obj, path, debug_dirs));
    if let Some((df, how)) = found {
        // SAFETY: read-only mapping, see read_module_file.
        let d = fs::File::open(&df).and_then(|f| unsafe { memmap2::Mmap::map(&f) }).ok();
        let o = d.as_deref().and_then(|d| object::File::parse(d).ok());
        symbols.use_debug_file(&df, how, o.as_ref());
    }
    let m = Module { path: path.to_string(), open_path, name, avma, bias, build_id, symbols, func_starts };
    Ok((m, fh))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Debug file per gdb's conventions, for each debug directory in turn:
/// `DIR/.build-id/ab/cdef.debug`; then the `.gnu_debuglink` name next to
/// the module, in its `.debug/` directory and under `DIR/<module's dir>/`,
/// taken only if its CRC matches the link's (a debug file of another build
/// names wrong functions). Each path is tried as the target sees it
/// (`/proc/PID/root`, for a server in a container) and then on the host.
fn find_debug_file(
    pid: i32,
    build_id: Option<&str>,
    obj: &object::File,
    path: &str,
    debug_dirs: &[PathBuf],
) -> Option<(PathBuf, DebugFoundBy)> {
    let seen = |p: &Path| -> Vec<PathBuf> {
        let rel = p.strip_prefix("/").unwrap_or(p);
        vec![Path::new(&format!("/proc/{pid}/root")).join(rel), p.to_path_buf()]
    };
    if let Some(id) = build_id.filter(|id| id.len() > 2) {
        for dir in debug_dirs {
            let p = dir.join(".build-id").join(&id[..2]).join(format!("{}.debug", &id[2..]));
            if let Some(f) = seen(&p).into_iter().find(|c| c.is_file()) {
                return Some((f, DebugFoundBy::BuildId));
            }
        }
    }
    if let Ok(Some((name, crc))) = obj.gnu_debuglink() {
        let name = String::from_utf8_lossy(name).into_owned();
        let dir = Path::new(path).parent().unwrap_or(Path::new("/"));
        let mut cands = vec![dir.join(&name), dir.join(".debug").join(&name)];
        for d in debug_dirs {
            cands.push(d.join(dir.strip_prefix("/").unwrap_or(dir)).join(&name));
        }
        for c in cands.iter().filter(|c| c.as_path() != Path::new(path)).flat_map(|c| seen(c)) {
            if c.is_file() && file_crc(&c) == Some(crc) {
                return Some((c, DebugFoundBy::DebugLink));
            }
        }
    }
    None
}

/// CRC-32 of a whole file, as `.gnu_debuglink` records it.
fn file_crc(p: &Path) -> Option<u32> {
    let f = fs::File::open(p).ok()?;
    // SAFETY: read-only mapping, see read_module_file.
    let m = unsafe { memmap2::Mmap::map(&f) }.ok()?;
    Some(crc32fast::hash(&m))
}

/// Function start addresses from the binary search table of `.eh_frame_hdr`.
pub fn function_starts(hdr: &[u8], hdr_svma: u64, eh_frame_svma: u64) -> Vec<u64> {
    use gimli::{BaseAddresses, EhFrameHdr, LittleEndian, Pointer};
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_svma).set_eh_frame(eh_frame_svma);
    let Ok(parsed) = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8) else { return vec![] };
    let Some(table) = parsed.table() else { return vec![] };
    let mut out = vec![];
    let mut it = table.iter(&bases);
    while let Ok(Some((loc, _fde))) = it.next() {
        if let Pointer::Direct(a) = loc {
            out.push(a);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether `ra` can return from a call into the function holding `callee`
/// (the check behind [`unwind::unwind`]'s search for a caller): it lies in
/// a module's code right after a call instruction and, when that call is
/// direct, its target is `callee`'s function per the unwind tables (or a
/// PLT stub when `callee` is in another module). Calls through a register
/// or memory cannot be told.
pub(crate) fn call_into(pid: i32, mods: &ModuleSet, ra: u64, callee: u64) -> bool {
    let Some(m) = mods.find(ra) else { return false };
    let mut b = [0u8; 8];
    if mods.read_code(pid, ra.wrapping_sub(8), &mut b) != 8 {
        return false;
    }
    match crate::unwind::call_before(&b) {
        None => false,
        Some(None) => true,
        Some(Some(rel)) => {
            let target = ra.wrapping_add(rel as i64 as u64);
            match mods.find(callee) {
                Some(c) if std::ptr::eq(c, m) => m.func_start(m.svma(target)) == m.func_start(m.svma(callee)),
                // Into another module only through a PLT stub: a jump
                // through the GOT (after endbr64 and a bnd prefix, if any).
                _ => {
                    let mut t = [0u8; 8];
                    mods.read_code(pid, target, &mut t) == 8 && {
                        let t = if t[..4] == [0xf3, 0x0f, 0x1e, 0xfa] { &t[4..] } else { &t[..] };
                        let t = if t[0] == 0xf2 { &t[1..] } else { t };
                        t[..2] == [0xff, 0x25]
                    }
                }
            }
        }
    }
}
