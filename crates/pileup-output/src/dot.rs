//! A Graphviz call graph weighted by samples, as in the classic accept-thread
//! picture: nodes are functions (inclusive and self share), edges are calls
//! weighted by how many stacks went through them.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;

use crate::report::Options;
use crate::stacks::Stacks;

/// The call graph of `s`, weighted by its first value.
pub fn dot(s: &Stacks, o: &Options, w: &mut dyn Write) -> std::io::Result<()> {
    let mut incl: BTreeMap<String, u64> = BTreeMap::new();
    let mut selfc: BTreeMap<String, u64> = BTreeMap::new();
    let mut edges: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut total = 0u64;
    for c in &s.stacks {
        let n = c.values.first().copied().unwrap_or(0).max(0) as u64;
        if n == 0 {
            continue;
        }
        total += n;
        let l = &c.frames; // root first
        if let Some(leaf) = l.last() {
            *selfc.entry(leaf.clone()).or_default() += n;
        }
        let mut seen_n = HashSet::new();
        let mut seen_e = HashSet::new();
        for (i, f) in l.iter().enumerate() {
            if seen_n.insert(f) {
                *incl.entry(f.clone()).or_default() += n;
            }
            if let Some(callee) = l.get(i + 1) {
                if seen_e.insert((f, callee)) {
                    *edges.entry((f.clone(), callee.clone())).or_default() += n;
                }
            }
        }
    }
    let min = if o.dot_min_pct > 0.0 { (total as f64 * o.dot_min_pct / 100.0).ceil() as u64 } else { 0 };
    let keep: BTreeMap<&String, u64> = incl.iter().filter(|(_, &n)| n >= min.max(1)).map(|(k, &n)| (k, n)).collect();
    let ids: BTreeMap<&String, usize> = keep.keys().enumerate().map(|(i, k)| (*k, i)).collect();
    let pct = |n: u64| if total == 0 { 0.0 } else { 100.0 * n as f64 / total as f64 };
    writeln!(w, "digraph pileup {{")?;
    writeln!(
        w,
        "  graph [label=\"{}\\n{}\", labelloc=t, fontname=\"Helvetica\"];",
        esc(o.title.as_deref().unwrap_or(&s.title)),
        esc(&s.subtitle)
    )?;
    writeln!(w, "  node [shape=box, style=filled, fontname=\"Helvetica\"];")?;
    for (name, &n) in &keep {
        let own = selfc.get(*name).copied().unwrap_or(0);
        let share = pct(n);
        // Hotter nodes: bigger and redder (HSV hue 0 = red … 0.6 = blue).
        let hue = 0.6 - 0.6 * (share / 100.0).min(1.0);
        let size = 10.0 + 14.0 * (pct(own) / 100.0).sqrt();
        writeln!(
            w,
            "  n{} [label=\"{}\\nself {} ({:.1}%)\\nof {} ({:.1}%)\", fillcolor=\"{:.3} 0.45 1.0\", fontsize={:.1}];",
            ids[name],
            esc(&wrap(name, 48)),
            own,
            pct(own),
            n,
            share,
            hue,
            size
        )?;
    }
    for ((from, to), &n) in &edges {
        if let (Some(a), Some(b)) = (ids.get(from), ids.get(to)) {
            let pen = 1.0 + 5.0 * (pct(n) / 100.0);
            writeln!(w, "  n{a} -> n{b} [label=\"{n}\", penwidth={pen:.2}, weight={n}];")?;
        }
    }
    writeln!(w, "}}")?;
    Ok(())
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Break long C++ names at `::` so nodes stay readable.
fn wrap(s: &str, width: usize) -> String {
    if s.len() <= width {
        return s.to_string();
    }
    let mut out = String::new();
    let mut line = 0;
    for (i, part) in s.split("::").enumerate() {
        if i > 0 {
            if line + part.len() + 2 > width {
                out.push_str("::\n");
                line = 0;
            } else {
                out.push_str("::");
                line += 2;
            }
        }
        out.push_str(part);
        line += part.len();
    }
    out.replace('\n', "\\n")
}
