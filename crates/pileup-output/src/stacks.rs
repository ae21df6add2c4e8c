//! Weighted stacks, the shape folded, flame SVG, dot and pprof share.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use crate::proto::{Function, Label, Line, Location, PProfile, PSample, Strings, ValueType};

/// A tool's stacks: each a list of frames, root first, with one value per
/// sample type.
#[derive(Debug, Clone, Default)]
pub struct Stacks {
    /// Flame graph and call graph title, and the line under it.
    pub title: String,
    pub subtitle: String,
    /// What the values are: pprof's (type, unit) pairs, such as
    /// ("threads", "count") or ("wait", "microseconds"). The first one
    /// weights folded stacks, flame graphs and call graphs.
    pub sample_types: Vec<(String, String)>,
    /// What a flame graph's widths count ("thread samples", "µs waited").
    pub count_name: String,
    pub stacks: Vec<Stack>,
    /// When the data starts, Unix milliseconds, and how long it spans.
    pub start_unix_ms: u64,
    pub duration_ms: u64,
    /// A line saying what made the profile (pprof's comment).
    pub comment: String,
}

/// One stack and its values.
#[derive(Debug, Clone, Default)]
pub struct Stack {
    /// Frames, root (outermost) first.
    pub frames: Vec<String>,
    /// One value per sample type.
    pub values: Vec<i64>,
    /// pprof labels: text ones and numeric ones.
    pub labels: Vec<(String, String)>,
    pub num_labels: Vec<(String, i64)>,
}

impl Stacks {
    /// Folded lines (`root;…;leaf VALUE`), equal stacks merged, in order of
    /// the stack text; stacks whose first value is 0 are left out.
    pub fn folded_lines(&self) -> Vec<String> {
        let mut m: BTreeMap<String, i64> = BTreeMap::new();
        for s in &self.stacks {
            let v = s.values.first().copied().unwrap_or(0);
            if v <= 0 {
                continue;
            }
            let key: Vec<String> = s.frames.iter().map(|f| f.replace(';', ":")).collect();
            *m.entry(key.join(";")).or_default() += v;
        }
        m.into_iter().map(|(s, n)| format!("{s} {n}")).collect()
    }

    pub fn folded(&self, w: &mut dyn Write) -> std::io::Result<()> {
        for l in self.folded_lines() {
            writeln!(w, "{l}")?;
        }
        Ok(())
    }

    /// A flame graph (inferno).
    pub fn svg(&self, title: Option<&str>, w: &mut dyn Write) -> std::io::Result<()> {
        use inferno::flamegraph::{self, Options};
        let lines = self.folded_lines();
        let mut opts = Options::default();
        opts.title = title.unwrap_or(&self.title).to_string();
        if !self.subtitle.is_empty() {
            opts.subtitle = Some(self.subtitle.clone());
        }
        if !self.count_name.is_empty() {
            opts.count_name = self.count_name.clone();
        }
        flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)
    }

    /// The pprof profile of these stacks: frames carry names, not
    /// addresses, so each distinct name is one function and one location.
    pub fn pprof(&self) -> PProfile {
        let mut st = Strings::new();
        let sample_type: Vec<ValueType> =
            self.sample_types.iter().map(|(t, u)| ValueType { r#type: st.id(t), unit: st.id(u) }).collect();
        let mut out = PProfile {
            period_type: sample_type.first().cloned(),
            sample_type,
            period: 1,
            time_nanos: self.start_unix_ms as i64 * 1_000_000,
            duration_nanos: self.duration_ms as i64 * 1_000_000,
            ..Default::default()
        };
        let mut locs: HashMap<&str, u64> = HashMap::new();
        for s in &self.stacks {
            // pprof lists a sample's locations leaf first.
            let mut ids = Vec::with_capacity(s.frames.len());
            for f in s.frames.iter().rev() {
                let id = *locs.entry(f.as_str()).or_insert_with(|| {
                    let id = out.location.len() as u64 + 1;
                    let name = st.id(f);
                    out.function.push(Function { id, name, system_name: name, filename: 0 });
                    out.location.push(Location {
                        id,
                        mapping_id: 0,
                        address: 0,
                        line: vec![Line { function_id: id, line: 0 }],
                    });
                    id
                });
                ids.push(id);
            }
            let mut label: Vec<Label> =
                s.labels.iter().map(|(k, v)| Label { key: st.id(k), str: st.id(v), num: 0 }).collect();
            label.extend(s.num_labels.iter().map(|(k, n)| Label { key: st.id(k), str: 0, num: *n }));
            out.sample.push(PSample { location_id: ids, value: s.values.clone(), label });
        }
        if !self.comment.is_empty() {
            out.comment.push(st.id(&self.comment));
        }
        out.string_table = st.table;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn two() -> Stacks {
        let stack = |frames: &[&str], v: i64| Stack {
            frames: frames.iter().map(|s| s.to_string()).collect(),
            values: vec![v, 1],
            labels: vec![("lock".into(), "LOCK_open".into())],
            num_labels: vec![],
        };
        Stacks {
            title: "t".into(),
            sample_types: vec![("wait".into(), "microseconds".into()), ("waits".into(), "count".into())],
            stacks: vec![
                stack(&["main", "f;g", "lock"], 5),
                stack(&["main", "h"], 0),
                stack(&["main", "f;g", "lock"], 2),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn folded_merges_equal_stacks_and_keeps_semicolons_out_of_frames() {
        assert_eq!(two().folded_lines(), vec!["main;f:g;lock 7".to_string()]);
    }

    #[test]
    fn pprof_has_every_sample_type_and_leaf_first_locations() {
        let p = two().pprof();
        let back = PProfile::decode(p.encode_to_vec().as_slice()).unwrap();
        let name = |i: i64| back.string_table[i as usize].as_str();
        assert_eq!(back.sample_type.len(), 2);
        assert_eq!(name(back.sample_type[1].r#type), "waits");
        assert_eq!(back.sample.len(), 3);
        let leaf = back.sample[0].location_id[0];
        let f = &back.function[back.location[leaf as usize - 1].line[0].function_id as usize - 1];
        assert_eq!(name(f.name), "lock");
        assert_eq!(back.sample[0].value, vec![5, 1]);
        assert_eq!(name(back.sample[0].label[0].str), "LOCK_open");
        // Four distinct frames, four locations.
        assert_eq!(back.location.len(), 4);
    }
}
