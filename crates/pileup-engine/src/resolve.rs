//! Unwinding and naming for stacks captured elsewhere: a tracer that copies
//! a thread's registers and the top of its stack (an eBPF probe, a perf
//! sample) hands them here one at a time. The target's modules are loaded
//! once; each stack goes through the same unwind and symbolize stages the
//! sampler uses, and each new address is named once.
//!
//! It also names data addresses (where a lock lives): a global object by
//! its exported symbol, honouring the symbol's size, or by its module and
//! section when the binary does not export it; anything else is heap.

use std::collections::HashMap;
use std::ops::Range;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use serde::Serialize;

use crate::error::EngineError;
use crate::modules::{self, call_into};
use crate::proc;
use crate::regs::Regs;
use crate::symbolize::{Frame, SymbolCache};
use crate::unwind::{self, Unwound};

/// Where a data address lies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "where", rename_all = "kebab-case")]
pub enum DataName {
    /// Inside an exported global object: `LOCK_open`, `LOCK_status+0x8`.
    Symbol {
        /// The module's short name (`mariadbd`).
        module: String,
        /// The exported object's name.
        symbol: String,
        /// Offset of the address into the object (bytes).
        offset: u64,
    },
    /// Inside a module's section, with no exported object there (the
    /// binary is stripped of it): `mariadbd .bss+0x1a2b40`.
    Section {
        /// The module's short name (`mariadbd`).
        module: String,
        /// The section's name (`.bss`, `.data`).
        section: String,
        /// Offset of the address into the section (bytes).
        offset: u64,
    },
    /// Not in any module: heap or a thread's stack.
    Heap,
}

impl DataName {
    /// The name as printed: `symbol`, `symbol+0xOFF`, `module section+0xOFF`, or `heap`.
    pub fn label(&self) -> String {
        match self {
            DataName::Symbol { symbol, offset: 0, .. } => symbol.clone(),
            DataName::Symbol { symbol, offset, .. } => format!("{symbol}+{offset:#x}"),
            DataName::Section { module, section, offset } => format!("{module} {section}+{offset:#x}"),
            DataName::Heap => "heap".into(),
        }
    }
}

/// A module's exported data objects and data sections (svma ranges).
#[derive(Default)]
struct DataTable {
    /// Sorted by start; (start, size, name).
    objects: Vec<(u64, u64, String)>,
    sections: Vec<(Range<u64>, String)>,
}

impl DataTable {
    /// The module's data objects and sections, with the data objects of
    /// its separate debug file (a stripped server's unexported globals:
    /// `lock_sys`, `buf_pool`) where it has one.
    fn read(path: &std::path::Path, debug_file: Option<&std::path::Path>) -> DataTable {
        let mut t = DataTable::read_one(path);
        if let Some(d) = debug_file {
            t.objects.extend(DataTable::read_one(d).objects);
            t.objects.sort();
            t.objects.dedup_by_key(|o| o.0);
        }
        t
    }

    fn read_one(path: &std::path::Path) -> DataTable {
        let Ok(file) = std::fs::File::open(path) else { return DataTable::default() };
        // SAFETY: the module file is mapped read-only for the lookup; a
        // file changed underneath would give wrong names, not unsafety
        // beyond what every ELF reader here accepts.
        let Ok(map) = (unsafe { memmap2::Mmap::map(&file) }) else { return DataTable::default() };
        let Ok(obj) = object::File::parse(&*map) else { return DataTable::default() };
        let mut objects: Vec<(u64, u64, String)> = obj
            .dynamic_symbols()
            .chain(obj.symbols())
            .filter(|s| matches!(s.kind(), SymbolKind::Data | SymbolKind::Tls) && s.size() > 0 && s.address() > 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        objects.sort();
        objects.dedup_by_key(|o| o.0);
        let sections = obj
            .sections()
            .filter(|s| s.address() > 0 && s.size() > 0)
            .filter_map(|s| {
                let name = s.name().ok()?;
                matches!(name, ".data" | ".bss" | ".data.rel.ro" | ".rodata" | ".tbss" | ".tdata")
                    .then(|| (s.address()..s.address() + s.size(), name.to_string()))
            })
            .collect();
        DataTable { objects, sections }
    }

    fn name(&self, module: &str, svma: u64) -> Option<DataName> {
        let i = self.objects.partition_point(|o| o.0 <= svma);
        if let Some((start, size, name)) = i.checked_sub(1).map(|i| &self.objects[i]) {
            if svma < start + size {
                return Some(DataName::Symbol {
                    module: module.to_string(),
                    // Globals outside a namespace are not mangled; the
                    // rare namespaced one keeps its mangled name.
                    symbol: name.clone(),
                    offset: svma - start,
                });
            }
        }
        self.sections.iter().find(|(r, _)| r.contains(&svma)).map(|(r, s)| DataName::Section {
            module: module.to_string(),
            section: s.clone(),
            offset: svma - r.start,
        })
    }
}

/// One process's modules, unwinder and names, for stacks copied by others.
pub struct Resolver {
    /// The process the modules were loaded from (0 for modules opened from files).
    pub pid: i32,
    /// The process's executable name.
    pub exe: String,
    mods: modules::ModuleSet,
    cache: framehop::x86_64::CacheX86_64,
    symbols: SymbolCache,
    data: HashMap<usize, DataTable>,
    /// Whether a return address can return from a call into a function.
    calls: HashMap<(u64, u64), bool>,
    /// Modules that could not be read, a line each for the user.
    pub notes: Vec<String>,
}

impl Resolver {
    /// Load `pid`'s modules (its executable mappings). With `dwarf`, names
    /// carry inlined frames and source lines where debug info exists.
    pub fn new(
        pid: i32,
        any_process: bool,
        dwarf: bool,
        debug_dirs: &[std::path::PathBuf],
    ) -> Result<Resolver, EngineError> {
        let exe = proc::check_target(pid, any_process)?;
        let maps = proc::read_maps(pid)?;
        let mods = modules::ModuleSet::load(pid, &maps, debug_dirs);
        Ok(Resolver::with(pid, exe, mods, SymbolCache::new(dwarf, debug_dirs)))
    }

    /// Modules read from files instead of a process (a fixture recorded
    /// from a live server, see [`crate::ModuleFile`]): stacks copied from
    /// that process are unwound and named offline as they were live. `exe`
    /// names the process; [`Resolver::pid`] is 0.
    pub fn open(exe: &str, files: &[modules::ModuleFile]) -> Resolver {
        Resolver::with(0, exe.to_string(), modules::ModuleSet::open(files), SymbolCache::new(false, &[]))
    }

    fn with(pid: i32, exe: String, mods: modules::ModuleSet, symbols: SymbolCache) -> Resolver {
        let notes = mods
            .unreadable
            .iter()
            .map(|(p, why)| format!("module {p} could not be read ({why}); its frames are unnamed"))
            .collect();
        // Data symbols are read now, while the process (and its view of
        // the files, through /proc/PID/root) is sure to be there.
        let data = mods
            .modules
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.open_path.as_os_str().is_empty())
            .map(|(i, m)| (i, DataTable::read(&m.open_path, m.symbols.debug_file.as_deref().map(std::path::Path::new))))
            .collect();
        Resolver { pid, exe, mods, cache: Default::default(), symbols, data, calls: HashMap::new(), notes }
    }

    /// Use the debug files the modules lack from debuginfod's cache, and
    /// from its servers unless `o` is the cache alone (each fetch within
    /// its timeout). Call before the first [`Resolver::frames`]. Returns
    /// what the user should know, a line each.
    pub fn use_debuginfod(&mut self, o: &crate::debuginfod::DebuginfodOptions) -> Vec<String> {
        let notes = crate::debuginfod::use_each(&mut self.mods, o);
        // Globals named by the debug files that arrived.
        for (i, m) in self.mods.modules.iter().enumerate() {
            if let (Some(d), false) = (&m.symbols.debug_file, m.open_path.as_os_str().is_empty()) {
                self.data.insert(i, DataTable::read(&m.open_path, Some(std::path::Path::new(d))));
            }
        }
        notes
    }

    /// Unwind one thread from its registers and a copy of its stack taken
    /// at `stack_addr` (its stack pointer). Returns lookup addresses,
    /// innermost first, and why unwinding stopped early, if it did.
    pub fn unwind(&mut self, regs: &Regs, stack_addr: u64, stack: &[u8]) -> (Vec<u64>, Option<String>) {
        let pid = self.pid;
        let mods = &self.mods;
        // Code does not change: each check reads the target's memory once
        // (a tracer handing thousands of stacks a second must not read the
        // server's memory for each).
        let memo = std::cell::RefCell::new(std::mem::take(&mut self.calls));
        let call_ok = |ra: u64, callee: u64| {
            *memo.borrow_mut().entry((ra, callee)).or_insert_with(|| call_into(pid, mods, ra, callee))
        };
        let Unwound { frames, error } =
            unwind::unwind(&mods.unwinder, &mut self.cache, regs, stack_addr, stack, call_ok);
        self.calls = memo.into_inner();
        (frames.iter().map(|f| f.lookup()).collect(), error)
    }

    /// The frames of a stack's lookup addresses, naming those not seen before.
    pub fn frames(&mut self, addrs: &[u64]) -> Vec<Frame> {
        self.symbols.add(&self.mods, addrs.iter().copied());
        self.symbols.stack(addrs)
    }

    /// Whether a symbol table named this lookup address (after [`Self::frames`]).
    pub fn named(&self, addr: u64) -> bool {
        self.symbols.named(addr)
    }

    /// Name a data address: an exported object, a module's section, or heap.
    pub fn data_name(&self, addr: u64) -> DataName {
        // A module's .bss past its file's end is an anonymous mapping: the
        // address belongs to the module whose load bias puts one of its
        // data sections there (module images do not overlap).
        for (i, m) in self.mods.modules.iter().enumerate() {
            if let Some(n) = self.data.get(&i).and_then(|t| t.name(&m.name, m.svma(addr))) {
                return n;
            }
        }
        DataName::Heap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_names_honour_symbol_sizes_and_sections() {
        let t = DataTable {
            objects: vec![(0x1000, 0x30, "LOCK_open".into()), (0x1100, 8, "counter".into())],
            sections: vec![(0x1000..0x2000, ".bss".into())],
        };
        assert_eq!(t.name("mariadbd", 0x1000).unwrap().label(), "LOCK_open");
        assert_eq!(t.name("mariadbd", 0x1008).unwrap().label(), "LOCK_open+0x8");
        // Past LOCK_open's size and before the next object: the section.
        assert_eq!(t.name("mariadbd", 0x1040).unwrap().label(), "mariadbd .bss+0x40");
        assert_eq!(t.name("mariadbd", 0x1104).unwrap().label(), "counter+0x4");
        assert_eq!(t.name("mariadbd", 0x3000), None);
    }
}
