//! Memory growth's sampled stacks as weighted stacks: pprof's heap
//! profile sample types, and flame graphs whose widths are bytes.

use pileup_output::{Stack, Stacks};

use crate::attribute::Growth;

/// The stacks that grew a process (`title` names it), weighted by bytes
/// first touched (`alloc_space`) and still held at the end
/// (`inuse_space`); `None` when no growth was sampled with a stack.
pub(crate) fn of(g: &Growth, elapsed_s: f64, title: String) -> Option<Stacks> {
    if g.by_stack.is_empty() {
        return None;
    }
    let stacks = g
        .by_stack
        .iter()
        .map(|s| Stack {
            frames: s.frames.iter().rev().cloned().collect(),
            values: vec![s.grown as i64, s.held as i64],
            labels: s.top_statement.iter().map(|st| ("statement".to_string(), st.clone())).collect(),
            num_labels: vec![],
        })
        .collect();
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let touched = g.totals.anon_bytes + g.totals.file_bytes;
    Some(Stacks {
        title,
        subtitle: format!(
            "{:.1} MiB first touched in {:.1} s, sampled with stacks by bytes; widths are bytes",
            touched as f64 / (1u64 << 20) as f64,
            elapsed_s
        ),
        sample_types: vec![("alloc_space".into(), "bytes".into()), ("inuse_space".into(), "bytes".into())],
        count_name: "bytes".into(),
        stacks,
        start_unix_ms: now_ms.saturating_sub((elapsed_s * 1000.0) as u64),
        duration_ms: (elapsed_s * 1000.0) as u64,
        comment: "pileup: pages first touched, sampled by bytes with their stacks".into(),
    })
}
