//! A Graphviz call graph weighted by samples, as in the classic accept-thread
//! picture: nodes are functions (inclusive and self share), edges are calls
//! weighted by how many stacks went through them.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;

use anyhow::Result;

use super::RenderOptions;
use crate::Profile;

pub fn dot(p: &Profile, o: &RenderOptions, w: &mut dyn Write) -> Result<()> {
    let mut incl: BTreeMap<String, usize> = BTreeMap::new();
    let mut selfc: BTreeMap<String, usize> = BTreeMap::new();
    let mut edges: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut total = 0usize;
    for c in &p.stacks {
        let n = c.count;
        total += n;
        let l = c.labels(); // innermost first
        if let Some(first) = l.first() {
            *selfc.entry(first.clone()).or_default() += n;
        }
        let mut seen_n = HashSet::new();
        let mut seen_e = HashSet::new();
        for (i, f) in l.iter().enumerate() {
            if seen_n.insert(f) {
                *incl.entry(f.clone()).or_default() += n;
            }
            if let Some(callee) = i.checked_sub(1).map(|j| &l[j]) {
                if seen_e.insert((f, callee)) {
                    *edges.entry((f.clone(), callee.clone())).or_default() += n;
                }
            }
        }
    }
    let min = if o.dot_min_pct > 0.0 { (total as f64 * o.dot_min_pct / 100.0).ceil() as usize } else { 0 };
    let keep: BTreeMap<&String, usize> = incl.iter().filter(|(_, &n)| n >= min.max(1)).map(|(k, &n)| (k, n)).collect();
    let ids: BTreeMap<&String, usize> = keep.keys().enumerate().map(|(i, k)| (*k, i)).collect();
    let pct = |n: usize| if total == 0 { 0.0 } else { 100.0 * n as f64 / total as f64 };
    writeln!(w, "digraph pileup {{")?;
    writeln!(
        w,
        "  graph [label=\"{}\\n{}\", labelloc=t, fontname=\"Helvetica\"];",
        esc(&super::default_title(p)),
        esc(&super::subtitle(p))
    )?;
    writeln!(w, "  node [shape=box, style=filled, fontname=\"Helvetica\"];")?;
    for (name, &n) in &keep {
        let s = selfc.get(*name).copied().unwrap_or(0);
        let share = pct(n);
        // Hotter nodes: bigger and redder (HSV hue 0 = red … 0.6 = blue).
        let hue = 0.6 - 0.6 * (share / 100.0).min(1.0);
        let size = 10.0 + 14.0 * (pct(s) / 100.0).sqrt();
        writeln!(
            w,
            "  n{} [label=\"{}\\nself {} ({:.1}%)\\nof {} ({:.1}%)\", fillcolor=\"{:.3} 0.45 1.0\", fontsize={:.1}];",
            ids[name],
            esc(&wrap(name, 48)),
            s,
            pct(s),
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
