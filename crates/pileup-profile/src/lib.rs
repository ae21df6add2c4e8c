//! `pileup-profile`: the engine's [`Profile`] (what `pileup stacks`, a
//! watch capture or a profile endpoint sampled) as a report in every
//! format: its text is pt-pmp's with annotations, its stacks go to folded,
//! flame graph and call graph, its pprof keeps addresses and mappings.

pub mod background;
mod text;

/// How far the sampling has come, as an event of the run: samples taken of
/// those asked for, and the distinct stacks so far (what the run's memory
/// grows with). It moves the progress bar alone.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "event", rename = "sampled")]
pub struct Sampled {
    /// Samples taken so far.
    pub taken: usize,
    /// Samples the run was asked for.
    pub of: usize,
    /// Distinct stacks counted so far.
    pub distinct_stacks: usize,
}

impl From<pileup_engine::Progress> for Sampled {
    fn from(p: pileup_engine::Progress) -> Sampled {
        Sampled { taken: p.taken, of: p.of, distinct_stacks: p.distinct_stacks }
    }
}

impl pileup_output::News for Sampled {
    fn progress(&self) -> pileup_output::Progress {
        let stacks = pileup_output::plural(self.distinct_stacks, "distinct stack", "distinct stacks");
        pileup_output::Progress::at(self.taken as u64, Some(self.of as u64)).and_doing(Some(stacks))
    }
}

use std::collections::HashMap;
use std::io::Write;

use pileup_engine::Profile;
use pileup_output::proto::{Function, Label, Line, Location, Mapping, PProfile, PSample, Strings, ValueType};
use pileup_output::{Options, Report, Stack, Stacks};

/// A profile as a report (`pileup_output::render` writes it in any
/// format); its JSON is the profile's own.
#[derive(serde::Serialize)]
#[serde(transparent)]
pub struct ProfileReport<'a>(pub &'a Profile);

impl Report for ProfileReport<'_> {
    fn tool(&self) -> &'static str {
        "stacks"
    }

    fn text(&self, o: &Options, w: &mut dyn Write) -> std::io::Result<()> {
        text::pmp(self.0, o, w)
    }

    fn stacks(&self, o: &Options) -> Option<Stacks> {
        Some(profile_stacks(self.0, o.thread_root))
    }

    fn pprof(&self, _o: &Options) -> Option<PProfile> {
        Some(pprof_message(self.0))
    }
}

/// The profile's counted stacks, root first, each rooted at its thread's
/// role or name when `thread_root` is set.
pub fn profile_stacks(p: &Profile, thread_root: bool) -> Stacks {
    let stacks = p
        .stacks
        .iter()
        .map(|c| {
            let mut frames: Vec<String> = c.labels().into_iter().rev().collect();
            if thread_root {
                frames.insert(0, c.root());
            }
            Stack { frames, values: vec![c.count as i64], ..Default::default() }
        })
        .collect();
    Stacks {
        title: default_title(p),
        subtitle: subtitle(p),
        sample_types: vec![("threads".into(), "count".into())],
        count_name: "thread samples".into(),
        stacks,
        start_unix_ms: p.stops.first_unix_ms,
        duration_ms: p.stops.last_unix_ms.saturating_sub(p.stops.first_unix_ms),
        comment: format!("pileup stacks pid {} {}", p.pid, p.exe),
    }
}

fn default_title(p: &Profile) -> String {
    format!("pileup stacks: {} pid {}", p.exe, p.pid)
}

fn subtitle(p: &Profile) -> String {
    format!(
        "{}, {}, {} mode; {:.0}% of frames named",
        pileup_output::plural(p.stops.samples, "sample", "samples"),
        pileup_output::plural(p.thread_stacks, "thread stack", "thread stacks"),
        p.mode.name(),
        p.named_pct
    )
}

/// Build the profile message: one pprof sample per distinct stack and kind
/// of thread, value = thread samples, labels = thread name, role, OS state,
/// SQL command and user, and the tid where a single thread had the stack.
pub fn pprof_message(p: &Profile) -> PProfile {
    let mut st = Strings::new();
    let mut out = PProfile {
        sample_type: vec![ValueType { r#type: st.id("threads"), unit: st.id("count") }],
        period_type: Some(ValueType { r#type: st.id("wall"), unit: st.id("count") }),
        period: 1,
        ..Default::default()
    };
    let mut mapping_ids: HashMap<String, u64> = HashMap::new();
    for m in &p.modules {
        let id = out.mapping.len() as u64 + 1;
        mapping_ids.insert(m.name.clone(), id);
        out.mapping.push(Mapping {
            id,
            filename: st.id(&m.path),
            build_id: st.id(m.build_id.as_deref().unwrap_or("")),
            has_functions: m.named > 0,
            ..Default::default()
        });
    }
    let mut func_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut loc_ids: HashMap<u64, u64> = HashMap::new();
    for t in &p.stacks {
        let mut sample = PSample { value: vec![t.count as i64], ..Default::default() };
        // Locations are per address; inlined frames become several lines of one location.
        let mut fi = 0;
        for &addr in &t.addrs {
            let n = t.frames[fi..].iter().position(|f| !f.inlined).map(|k| k + 1).unwrap_or(t.frames.len() - fi);
            let frames = &t.frames[fi..fi + n];
            fi += n;
            let lid = *loc_ids.entry(addr).or_insert_with(|| {
                let id = out.location.len() as u64 + 1;
                let mut lines = vec![];
                for f in frames {
                    let key = (f.label.clone(), f.file.clone().unwrap_or_default());
                    let fid = match func_ids.get(&key) {
                        Some(&x) => x,
                        None => {
                            let x = out.function.len() as u64 + 1;
                            out.function.push(Function {
                                id: x,
                                name: st.id(&f.label),
                                system_name: st.id(f.function.as_deref().unwrap_or(&f.label)),
                                filename: st.id(f.file.as_deref().unwrap_or("")),
                            });
                            func_ids.insert(key, x);
                            x
                        }
                    };
                    lines.push(Line { function_id: fid, line: f.line.unwrap_or(0) as i64 });
                }
                let mapping_id = frames
                    .first()
                    .and_then(|f| f.module.as_ref())
                    .and_then(|m| mapping_ids.get(m))
                    .copied()
                    .unwrap_or(0);
                out.location.push(Location { id, mapping_id, address: addr, line: lines });
                id
            });
            sample.location_id.push(lid);
        }
        let mut label = |k: &str, v: &str| Label { key: st.id(k), str: st.id(v), num: 0 };
        let mut labels = vec![label("thread", &t.thread), label("state", t.state_label)];
        if let Some(r) = t.role {
            labels.push(label("role", r.as_str()));
        }
        if let Some(c) = &t.sql_command {
            labels.push(label("sql_command", c));
        }
        if let Some(u) = &t.sql_user {
            labels.push(label("sql_user", u));
        }
        // A tid label only where one thread had this stack: counts are per
        // stack and kind of thread, not per thread.
        if let (1, false, Some(&tid)) = (t.tids.len(), t.tids_capped, t.tids.first()) {
            labels.push(Label { key: st.id("tid"), str: 0, num: tid as i64 });
        }
        sample.label = labels;
        out.sample.push(sample);
    }
    if p.stops.samples > 0 {
        out.time_nanos = p.stops.first_unix_ms as i64 * 1_000_000;
        out.duration_nanos = (p.stops.last_unix_ms.saturating_sub(p.stops.first_unix_ms)) as i64 * 1_000_000;
    }
    out.comment.push(st.id(&format!("pileup stacks pid {} {}", p.pid, p.exe)));
    out.string_table = st.table;
    out
}
