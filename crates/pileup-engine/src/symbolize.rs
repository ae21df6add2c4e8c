//! Symbolization: addresses → function names (C++ demangled), source lines and
//! inlined frames when debug info has them. `blazesym` reads `.symtab`,
//! `.dynsym` and DWARF, following build-id and `.gnu_debuglink` debug files
//! under /usr/lib/debug. Frames it cannot name keep a stable identity: the
//! module and the start of their function from the unwind tables
//! (`mariadbd+0x8c2f10`), so stacks through a stripped binary still aggregate.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use serde::Serialize;

use crate::modules::ModuleSet;

/// One frame of a stack, after symbolization. An address inside inlined code
/// yields several frames (innermost first), all but the last `inlined`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Frame {
    /// Demangled name with its parameter list, when known.
    pub function: Option<String>,
    /// The label used in stacks: the name without parameters
    /// (as pt-pmp prints it), or `module+0xFUNCSTART`, or `??`.
    pub label: String,
    /// Short name of the module the address lies in (`mariadbd`, `libc.so.6`).
    pub module: Option<String>,
    /// Address in the module's own address space.
    pub svma: Option<u64>,
    /// Source file, from DWARF.
    pub file: Option<String>,
    /// Source line, from DWARF.
    pub line: Option<u32>,
    /// A call inlined into the next frame out.
    pub inlined: bool,
}

/// Every address symbolized so far (lookup address → frames, innermost
/// first), filled as samples arrive: a long run symbolizes each distinct
/// address once, when first seen, so a sample's lock waits can be read and
/// its stacks counted before the next sample.
pub struct SymbolCache {
    symbolizer: Symbolizer,
    dwarf: bool,
    pub by_addr: HashMap<u64, Vec<Frame>>,
}

impl SymbolCache {
    /// With `dwarf`, DWARF adds inlined frames and source lines, at the cost
    /// of parsing debug info once (libc's alone takes ~60 ms; a server's own
    /// can take far longer). Without it, names come from ELF symbol tables
    /// only: the module's `.symtab`/`.dynsym`, or its debug file's `.symtab`
    /// when one is installed (complete names, a few ms).
    pub fn new(dwarf: bool, debug_dirs: &[std::path::PathBuf]) -> SymbolCache {
        let symbolizer = Symbolizer::builder()
            .enable_code_info(dwarf)
            .enable_inlined_fns(dwarf)
            .enable_demangling(true)
            .set_debug_dirs(Some(debug_dirs))
            .build();
        SymbolCache { symbolizer, dwarf, by_addr: HashMap::new() }
    }

    pub fn frames(&self, lookup_addr: u64) -> &[Frame] {
        self.by_addr.get(&lookup_addr).map(|v| v.as_slice()).unwrap_or(&[])
    }

    /// Forget the names of the addresses `which` selects (their module's
    /// debug info arrived: they are symbolized again).
    pub fn forget(&mut self, which: impl Fn(u64) -> bool) {
        self.by_addr.retain(|a, _| !which(*a));
    }

    /// The frames of a stack's addresses, innermost first.
    pub fn stack(&self, addrs: &[u64]) -> Vec<Frame> {
        addrs.iter().flat_map(|a| self.frames(*a).iter().cloned()).collect()
    }

    /// Frame labels of a stack's addresses.
    pub fn labels(&self, addrs: &[u64]) -> Vec<String> {
        addrs.iter().flat_map(|a| self.frames(*a).iter().map(|f| f.label.clone())).collect()
    }

    /// Whether a symbol table named this address.
    pub fn named(&self, lookup_addr: u64) -> bool {
        self.frames(lookup_addr).iter().any(|f| f.function.is_some())
    }

    /// Symbolize the lookup addresses (already `-1` adjusted for return
    /// addresses) not seen before.
    pub fn add(&mut self, mods: &ModuleSet, addrs: impl IntoIterator<Item = u64>) {
        let mut per_module: BTreeMap<usize, BTreeSet<u64>> = BTreeMap::new();
        for a in addrs {
            if self.by_addr.contains_key(&a) {
                continue;
            }
            match mods.modules.iter().position(|m| m.avma.contains(&a)) {
                Some(i) => {
                    per_module.entry(i).or_default().insert(a);
                }
                None => {
                    self.by_addr.insert(a, vec![unknown_frame(None, a)]);
                }
            }
        }
        for (i, avmas) in per_module {
            let m = &mods.modules[i];
            let avmas: Vec<u64> = avmas.into_iter().collect();
            let svmas: Vec<u64> = avmas.iter().map(|&a| m.svma(a)).collect();
            let t = std::time::Instant::now();
            let symbolizer = &self.symbolizer;
            let results = if m.open_path.as_os_str().is_empty() {
                None // the vdso has no file to read; its functions are labelled by start
            } else {
                let elf_only = |path: &std::path::Path| {
                    let mut elf = Elf::new(path);
                    elf.debug_syms = false;
                    symbolizer.symbolize(&Source::Elf(elf), Input::VirtOffset(&svmas)).ok()
                };
                if self.dwarf {
                    // With debug info first (the debug file pileup found, else
                    // the module, whose links blazesym follows); if that is
                    // unusable, the ELF symbols alone.
                    let with_dwarf = |path: &std::path::Path| {
                        symbolizer.symbolize(&Source::Elf(Elf::new(path)), Input::VirtOffset(&svmas)).ok()
                    };
                    match &m.symbols.debug_file {
                        Some(df) => with_dwarf(std::path::Path::new(df))
                            .or_else(|| elf_only(std::path::Path::new(df)))
                            .or_else(|| elf_only(&m.open_path)),
                        None => with_dwarf(&m.open_path).or_else(|| elf_only(&m.open_path)),
                    }
                } else {
                    match &m.symbols.debug_file {
                        Some(df) => elf_only(std::path::Path::new(df)).or_else(|| elf_only(&m.open_path)),
                        None => elf_only(&m.open_path),
                    }
                }
            };
            tracing::debug!(module = %m.name, addrs = svmas.len(), us = t.elapsed().as_micros() as u64, "symbolized");
            for (k, &avma) in avmas.iter().enumerate() {
                let svma = svmas[k];
                let fallback = || {
                    let start = m.func_start(svma).unwrap_or(svma);
                    Frame {
                        function: None,
                        label: format!("{}+0x{start:x}", m.name),
                        module: Some(m.name.clone()),
                        svma: Some(svma),
                        file: None,
                        line: None,
                        inlined: false,
                    }
                };
                let frames = match results.as_ref().and_then(|r| r.get(k)) {
                    Some(Symbolized::Sym(sym)) => {
                        // blazesym lists inlined calls outer → inner; stacks are innermost first.
                        let named = |name: &str, ci: Option<&blazesym::symbolize::CodeInfo<'_>>, inlined: bool| Frame {
                            function: Some(name.to_string()),
                            label: short_name(name),
                            module: Some(m.name.clone()),
                            svma: Some(svma),
                            file: ci.map(|c| c.file.to_string_lossy().into_owned()),
                            line: ci.and_then(|c| c.line),
                            inlined,
                        };
                        let mut v: Vec<Frame> =
                            sym.inlined.iter().rev().map(|f| named(&f.name, f.code_info.as_ref(), true)).collect();
                        // An inlined frame named like its container (a versioned
                        // alias inlined into itself) would print the name twice.
                        if v.last().is_some_and(|f| f.label == short_name(&sym.name)) {
                            v.pop();
                        }
                        v.push(named(&sym.name, sym.code_info.as_deref(), false));
                        v
                    }
                    _ => vec![fallback()],
                };
                self.by_addr.insert(avma, frames);
            }
        }
    }
}

fn unknown_frame(module: Option<String>, addr: u64) -> Frame {
    Frame { function: None, label: "??".into(), module, svma: Some(addr), file: None, line: None, inlined: false }
}

/// Strip the parameter list (and trailing cv-qualifiers) from a demangled C++
/// name, the way pt-pmp shows gdb frames: `THD::awake(killed_state)` →
/// `THD::awake`; templates and `operator()` survive.
pub fn short_name(full: &str) -> String {
    let s = full.trim();
    let mut end = s.len();
    for q in [" const", " volatile", " &&", " &", " noexcept"] {
        while s[..end].ends_with(q) {
            end -= q.len();
        }
    }
    let t = &s[..end];
    if !t.ends_with(')') {
        return t.to_string();
    }
    // Find the '(' matching the final ')'.
    let bytes = t.as_bytes();
    let mut depth = 0i32;
    let mut i = bytes.len();
    while i > 0 {
        i -= 1;
        match bytes[i] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
    }
    if depth != 0 || i == 0 {
        return t.to_string();
    }
    let head = &t[..i];
    // `operator()(int)`: the parens we found belong to the argument list, fine.
    // `(anonymous namespace)::f(int)` cannot end up with an empty head.
    let head = head.trim_end();
    if head.is_empty() {
        t.to_string()
    } else {
        head.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::short_name;

    #[test]
    fn short_names() {
        assert_eq!(short_name("do_command(THD*, bool)"), "do_command");
        assert_eq!(short_name("THD::awake_no_mutex(killed_state)"), "THD::awake_no_mutex");
        assert_eq!(short_name("Item_func::fix_fields(THD*, Item**) const"), "Item_func::fix_fields");
        assert_eq!(
            short_name("std::vector<int, std::allocator<int> >::push_back(int const&)"),
            "std::vector<int, std::allocator<int> >::push_back"
        );
        assert_eq!(short_name("Foo::operator()(int)"), "Foo::operator()");
        assert_eq!(short_name("(anonymous namespace)::helper(void (*)(int))"), "(anonymous namespace)::helper");
        assert_eq!(short_name("pthread_cond_wait"), "pthread_cond_wait");
        assert_eq!(short_name("handle_connections_sockets()"), "handle_connections_sockets");
    }
}
