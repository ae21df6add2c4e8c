//! The workspace's shape, checked: no circle of imports between the modules
//! of any crate, no tool crate depending on another tool crate, and rooms a
//! reader can hold (no function over 100 lines, no file over 800).
//!
//! A module is one source file. It depends on another when it names it
//! (`crate::a::b`, `super::x`, `use crate::{a, b::c}`, or a child module
//! by name); naming an item of the crate root (`crate::Error`) depends on
//! the root. Test modules (`#[cfg(test)] mod tests`) and comments do not
//! count.
//!
//! Lengths are of the same code (every `.rs` file under a crate's `src/`):
//! a file's lines before its test module, comment lines left out and blank
//! lines counted; a function's non-blank lines from its `fn` line to the
//! first `}` at the `fn`'s indentation.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Every `.rs` file under `dir`, with its module path (`a::b`; the crate
/// root is the empty path).
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod")) {
                parts.pop();
            }
            if parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main") {
                parts.clear();
            }
            if parts.first().is_some_and(|p| p == "bin") {
                continue; // each bin is a crate of its own
            }
            let text = std::fs::read_to_string(&p).unwrap();
            out.insert(parts.join("::"), code_of(&text));
        }
    }
    out
}

/// The file's code without comment lines and without its test module.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let test_mod = |n: &&str| n.strip_prefix("pub(crate) ").unwrap_or(n).starts_with("mod tests");
        if l.starts_with("#[cfg(test)]") && lines.get(i + 1).is_some_and(test_mod) {
            break;
        }
        let t = l.trim_start();
        if t.starts_with("//") {
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn parent(m: &str) -> String {
    m.rsplit_once("::").map(|(p, _)| p.to_string()).unwrap_or_default()
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}::{b}")
    }
}

/// The deepest module that `base` followed by `segs` names.
fn resolve(mods: &BTreeMap<String, String>, base: &str, segs: &[&str]) -> String {
    let mut at = base.to_string();
    for s in segs {
        let next = join(&at, s);
        if mods.contains_key(&next) {
            at = next;
        } else {
            break;
        }
    }
    at
}

/// Paths written after `crate::` or `super::`, grouped uses expanded.
fn paths(code: &str, head: &str) -> Vec<Vec<String>> {
    let mut out = vec![];
    let pat = format!("{head}::");
    let b = code.as_bytes();
    let mut from = 0;
    while let Some(k) = code[from..].find(&pat) {
        let at = from + k;
        from = at + pat.len();
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b':') {
            continue;
        }
        expand(&code[from..], &mut vec![], &mut out);
    }
    out
}

/// Read one path (`a::b`, `a::{b, c::d}`) at the start of `s`, adding each
/// full path to `out`; returns how many bytes it took.
fn expand(s: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut i = 0;
    let b = s.as_bytes();
    let depth = prefix.len();
    loop {
        if i < b.len() && b[i] == b'{' {
            i += 1;
            loop {
                while i < b.len() && (b[i] == b' ' || b[i] == b'\n' || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    i += 1;
                    break;
                }
                let mut p = prefix.clone();
                i += expand(&s[i..], &mut p, out);
            }
            prefix.truncate(depth);
            return i;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if i > start {
            prefix.push(s[start..i].to_string());
        }
        if s[i..].starts_with("::") {
            i += 2;
            continue;
        }
        out.push(prefix.clone());
        prefix.truncate(depth);
        // Skip an `as name`.
        let rest = &s[i..];
        if let Some(r) = rest.strip_prefix(" as ") {
            let n = r.bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
            i += 4 + n;
        }
        return i;
    }
}

/// Which module depends on which, within one crate.
fn graph(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, code) in mods {
        let mut to = BTreeSet::new();
        for p in paths(code, "crate") {
            let segs: Vec<&str> = p.iter().map(String::as_str).collect();
            to.insert(resolve(mods, "", &segs));
        }
        for p in paths(code, "super") {
            let mut base = parent(m);
            let mut segs: Vec<&str> = p.iter().map(String::as_str).collect();
            while segs.first() == Some(&"super") {
                base = parent(&base);
                segs.remove(0);
            }
            to.insert(resolve(mods, &base, &segs));
        }
        // A child module named by its own name (`child::f`, `use child::X`).
        for child in mods.keys().filter(|c| !c.is_empty() && parent(c) == *m) {
            let name = child.rsplit("::").next().unwrap();
            let named = code.match_indices(&format!("{name}::")).any(|(i, _)| {
                let before = code[..i].chars().next_back();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if named {
                to.insert(child.clone());
            }
        }
        to.remove(m);
        g.insert(m.clone(), to);
    }
    g
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.g.contains_key(w) {
                continue;
            }
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut c = vec![];
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                c.push(if w.is_empty() { "(root)".to_string() } else { w.to_string() });
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort();
                t.out.push(c);
            }
        }
    }
    let mut t = T { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], on: BTreeSet::new(), out: vec![] };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn crates() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(workspace().join("crates")).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

#[test]
fn no_crate_has_a_circle_of_imports() {
    let mut found = vec![];
    for c in crates() {
        let mods = modules(&c.join("src"));
        for circle in circles(&graph(&mods)) {
            found.push(format!("{}: {}", c.file_name().unwrap().to_string_lossy(), circle.join(" ↔ ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_sees_circles_through_grouped_uses_parents_and_the_root() {
    let mods: BTreeMap<String, String> = [
        ("", "mod a;\nmod b;\npub struct Root;\npub use a::f;\n"),
        ("a", "use crate::{b::{self, g}, Root};\npub fn f() {}\n"),
        ("b", "pub fn g() {}\n#[cfg(test)]\npub(crate) mod tests {\n    use crate::a::f;\n}\n"),
        ("b::c", "use super::super::a;\n// crate::b::c::x in a comment\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), code_of(v)))
    .collect();
    let g = graph(&mods);
    assert_eq!(g["a"], BTreeSet::from(["".to_string(), "b".to_string()]));
    assert_eq!(g[""], BTreeSet::from(["a".to_string()]));
    assert_eq!(g["b"], BTreeSet::new(), "test modules do not count");
    assert_eq!(g["b::c"], BTreeSet::from(["a".to_string()]));
    assert_eq!(circles(&g), vec![vec!["(root)".to_string(), "a".to_string()]]);
}

/// Crates that are tools: none of them may depend on another. The others
/// are what tools share (engine, output, profile, growth, annotate,
/// debuginfod, stats, conn, files, sql, binlog's decoder, replica,
/// sandbox, the BPF build helper) or drive them (the CLI, the benches'
/// drivers).
const TOOLS: [&str; 8] = [
    "pileup-watch",
    "pileup-locks",
    "pileup-lag",
    "pileup-digest",
    "pileup-dump",
    "pileup-prefetch",
    "pileup-memory",
    "pileup-bench",
];

#[test]
fn no_tool_crate_depends_on_another_tool_crate() {
    let mut found = vec![];
    for c in crates() {
        let name = c.file_name().unwrap().to_string_lossy().into_owned();
        if !TOOLS.contains(&name.as_str()) {
            continue;
        }
        let manifest = std::fs::read_to_string(c.join("Cargo.toml")).unwrap();
        let deps = manifest.split("[dependencies]").nth(1).unwrap_or("").split("\n[").next().unwrap_or("");
        for t in TOOLS.iter().filter(|t| **t != name) {
            if deps.lines().any(|l| l.trim_start().starts_with(&format!("{t} "))) {
                found.push(format!("{name} depends on {t}"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The names in a manifest's `[dependencies]` table.
fn dependencies(krate: &str) -> Vec<String> {
    let manifest = std::fs::read_to_string(workspace().join("crates").join(krate).join("Cargo.toml")).unwrap();
    let deps = manifest.split("\n[dependencies]\n").nth(1).unwrap_or("").split("\n[").next().unwrap_or("");
    deps.lines()
        .filter_map(|l| l.split(['=', ' ', '.']).next())
        .filter(|n| !n.is_empty() && !n.starts_with('#'))
        .map(String::from)
        .collect()
}

/// The engine knows processes, not servers: no SQL client, no HTTP client,
/// no SQL parser. Its front door is documented (`missing_docs`).
#[test]
fn the_engine_core_has_no_sql_or_http_dependency() {
    let deps = dependencies("pileup-engine");
    assert!(deps.iter().any(|d| d == "framehop"), "the manifest is read: {deps:?}");
    let sql_or_http = [
        "mysql",
        "mysql_async",
        "postgres",
        "rusqlite",
        "sqlparser",
        "pileup-conn",
        "pileup-sql",
        "pileup-annotate",
        "ureq",
        "reqwest",
        "hyper",
        "tiny_http",
        "debuginfod",
        "pileup-debuginfod",
    ];
    let found: Vec<&String> = deps.iter().filter(|d| sql_or_http.contains(&d.as_str())).collect();
    assert!(found.is_empty(), "pileup-engine depends on {found:?}");
    let lib = std::fs::read_to_string(workspace().join("crates/pileup-engine/src/lib.rs")).unwrap();
    assert!(lib.contains("#![warn(missing_docs)]"), "the engine's pub items are all documented");
}

/// The output layer writes formats and knows no tool: it depends on no
/// pileup crate (tools depend on it).
#[test]
fn the_output_layer_depends_on_no_pileup_crate() {
    let deps = dependencies("pileup-output");
    assert!(deps.iter().any(|d| d == "inferno"), "the manifest is read: {deps:?}");
    let pileup: Vec<&String> = deps.iter().filter(|d| d.starts_with("pileup")).collect();
    assert!(pileup.is_empty(), "pileup-output depends on {pileup:?}");
}

/// The longest a function may be, in non-blank code lines.
const MAX_FN_LINES: usize = 100;
/// The longest a source file may be, in code lines before its test module.
const MAX_FILE_LINES: usize = 800;

/// Every `.rs` file under each crate's `src/`, sorted.
fn source_files() -> Vec<PathBuf> {
    let mut out = vec![];
    for c in crates() {
        let mut stack = vec![c.join("src")];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

/// The path of `p` from the workspace root, for messages.
fn shown(p: &Path) -> String {
    p.strip_prefix(workspace()).unwrap_or(p).display().to_string()
}

/// If `line` starts a function, its indentation and the function's name:
/// `^(\s*)(pub(\(\w+\))? )?(async )?(unsafe )?(const )?fn \w+`.
fn fn_start(line: &str) -> Option<(&str, &str)> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let rest = line.trim_start();
    let indent = &line[..line.len() - rest.len()];
    let mut r = rest;
    if let Some(after) = r.strip_prefix("pub") {
        let after = match after.strip_prefix('(') {
            Some(inner) => {
                let close = inner.find(')')?;
                if close == 0 || !inner[..close].chars().all(word) {
                    return None;
                }
                &inner[close + 1..]
            }
            None => after,
        };
        r = after.strip_prefix(' ')?;
    }
    for q in ["async ", "unsafe ", "const "] {
        r = r.strip_prefix(q).unwrap_or(r);
    }
    let r = r.strip_prefix("fn ")?;
    let name_len = r.find(|c: char| !word(c)).unwrap_or(r.len());
    (name_len > 0).then(|| (indent, &r[..name_len]))
}

/// Each function of `code` (already through `code_of`) with its length:
/// from the line that starts it to the first later line that is its
/// indentation followed by `}`, both included, blank lines not counted.
fn functions(code: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = vec![];
    for (i, l) in lines.iter().enumerate() {
        let Some((indent, name)) = fn_start(l) else { continue };
        let close = format!("{indent}}}");
        let Some(end) = lines[i + 1..].iter().position(|n| *n == close) else { continue };
        let body = &lines[i..=i + 1 + end];
        out.push((name.to_string(), body.iter().filter(|n| !n.trim().is_empty()).count()));
    }
    out
}

#[test]
fn no_function_is_over_100_lines() {
    let mut found = vec![];
    for p in source_files() {
        let code = code_of(&std::fs::read_to_string(&p).unwrap());
        for (name, n) in functions(&code) {
            if n > MAX_FN_LINES {
                found.push((n, format!("{n} {} {name}", shown(&p))));
            }
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let found: Vec<String> = found.into_iter().map(|(_, s)| s).collect();
    assert!(found.is_empty(), "functions over {MAX_FN_LINES} lines:\n{}", found.join("\n"));
}

#[test]
fn no_file_is_over_800_lines() {
    let mut found = vec![];
    for p in source_files() {
        let n = code_of(&std::fs::read_to_string(&p).unwrap()).lines().count();
        if n > MAX_FILE_LINES {
            found.push(format!("{n} {}", shown(&p)));
        }
    }
    assert!(found.is_empty(), "files over {MAX_FILE_LINES} lines:\n{}", found.join("\n"));
}

#[test]
fn the_length_checker_counts_code_lines_of_each_function() {
    let mut text = String::from("//! A module.\n\n/// Short.\npub(crate) const fn short() -> u32 {\n\n    1\n}\n\n");
    // Three lines of signature, 97 statements and the closing brace: 101
    // lines once the comment and the blank line are left out.
    text.push_str("pub async fn long(\n    x: u32,\n) -> u32 {\n    // a comment\n\n");
    for i in 0..97 {
        text.push_str(&format!("    let _v{i} = x;\n"));
    }
    text.push_str("}\n\nimpl S {\n    pub unsafe fn inner() {\n        1;\n    }\n}\n");
    text.push_str("#[cfg(test)]\nmod tests {\n    fn in_tests() {\n    }\n}\n");
    let code = code_of(&text);
    let found = functions(&code);
    assert_eq!(found, vec![("short".to_string(), 3), ("long".to_string(), 101), ("inner".to_string(), 3)]);
    assert!(found.iter().any(|(_, n)| *n > MAX_FN_LINES), "the long one is caught");
    assert_eq!(code.lines().count(), 6 + 4 + 97 + 2 + 5, "comment lines out, blanks in, tests cut");
    assert_eq!(fn_start("    pub(crate) fn f() {"), Some(("    ", "f")));
    assert_eq!(fn_start("pub(in crate) fn f() {"), None);
    assert_eq!(fn_start("let fn_x = 1;"), None);
}
