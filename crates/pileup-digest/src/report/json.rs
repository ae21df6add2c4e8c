//! The digest as one JSON object: `events` (statements parsed) and
//! `classes`, each with `fingerprint`, `count` and per attribute
//! `sum`/`min`/`max`/`mean`/`p95`/`p99`. docs/digest.md has the schema.

use serde_json::{json, Map, Value};

use super::{id, unavailable, utc};
use crate::attr::{Unit, ATTRS, FLAGS};
use crate::class::{Class, Few};
use crate::rank;
use crate::Digest;

fn few(f: &Few) -> Value {
    let mut v: Vec<Value> =
        f.sorted().into_iter().map(|(value, count)| json!({"value": value, "count": count})).collect();
    if f.others > 0 {
        v.push(json!({"value": null, "count": f.others}));
    }
    Value::Array(v)
}

fn round(v: f64, unit: Unit) -> Value {
    match unit {
        Unit::Seconds => json!((v * 1e6).round() / 1e6),
        _ if v.fract() == 0.0 && v.abs() < 9e15 => json!(v as i64),
        _ => json!((v * 1000.0).round() / 1000.0),
    }
}

/// One class as JSON; `total`: every class's statement time.
pub fn class(c: &Class, rank_no: usize, d: &Digest, total: f64) -> Value {
    let mut attrs = Map::new();
    for (i, s) in c.stats() {
        let a = &ATTRS[i];
        let int = a.unit != Unit::Seconds;
        attrs.insert(
            a.name.into(),
            json!({
                "n": s.n,
                "sum": round(s.sum, a.unit),
                "min": round(s.min, a.unit),
                "max": round(s.max, a.unit),
                "mean": round(s.mean(), Unit::Seconds),
                "p95": round(s.quantile(0.95, int), a.unit),
                "p99": round(s.quantile(0.99, int), a.unit),
            }),
        );
    }
    let mut flags = Map::new();
    for ((name, _), (seen, yes)) in FLAGS.iter().zip(&c.flags) {
        if *seen > 0 {
            flags.insert((*name).into(), json!({"logged": seen, "yes": yes}));
        }
    }
    let (input, line) = c.sample.at;
    json!({
        "rank": rank_no,
        "id": id(&c.fingerprint),
        "fingerprint": String::from_utf8_lossy(&c.fingerprint),
        "count": c.count,
        "time_share": if total > 0.0 { json!((c.sum(crate::attr::A::QueryTime) / total * 1e4).round() / 1e4) } else { Value::Null },
        "first_seen": c.first.map(utc),
        "last_seen": c.last.map(utc),
        "attributes": attrs,
        "flags": flags,
        "signals": {
            "rows_examined_per_row": rank::examined_per_row(c).map(|v| (v * 100.0).round() / 100.0),
            "pages_per_row": rank::pages_per_row(c).map(|v| (v * 100.0).round() / 100.0),
            "optimizer_share": rank::optimizer_share(c).map(|v| (v * 1e4).round() / 1e4),
            "spills": rank::spills(c),
        },
        "hosts": few(&c.hosts),
        "users": few(&c.users),
        "databases": few(&c.dbs),
        "sample": {
            "query": String::from_utf8_lossy(&c.sample.query),
            "database": String::from_utf8_lossy(c.sample.db()),
            "query_time": round(c.sample.query_time, Unit::Seconds),
            "at": c.sample.ts.map(utc),
            "file": d.inputs.get(input),
            "line": line,
            "explain": c.sample.explain_lines().map(String::from_utf8_lossy).collect::<Vec<_>>(),
        },
    })
}

struct Classes<'a> {
    order: Vec<&'a Class>,
    d: &'a Digest,
    total: f64,
    hosts: Option<&'a crate::fleet::merge::Hosts>,
    /// The ranking of the profile alone (`View::profile_only`).
    only: Option<rank::Rank>,
}

impl serde::Serialize for Classes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.order.len()))?;
        for (i, c) in self.order.iter().enumerate() {
            let mut v = class(c, i + 1, self.d, self.total);
            // The profile alone keeps the signal its ranking reads, and
            // no other: the others' attributes may not have been read.
            if let (Some(r), Value::Object(m)) = (self.only, &mut v) {
                if let Some(Value::Object(s)) = m.get_mut("signals") {
                    let keep = match r {
                        rank::Rank::Examined => "rows_examined_per_row",
                        rank::Rank::Pages => "pages_per_row",
                        rank::Rank::Optimizer => "optimizer_share",
                        rank::Rank::Spill => "spills",
                        _ => "",
                    };
                    s.retain(|k, _| k == keep);
                }
            }
            if let (Some(h), Value::Object(m)) = (self.hosts, &mut v) {
                m.insert("servers".into(), super::hosts::servers(h, &c.fingerprint));
            }
            seq.serialize_element(&v)?;
        }
        seq.end()
    }
}

/// The whole digest as one JSON object, classes in the view's order (all
/// of them; the view's limit applies to the text report only), and the
/// advice when there is some. Written as it is made, one class's value at
/// a time: a log of a hundred thousand classes needs no second copy of
/// them as JSON values in memory.
impl serde::Serialize for crate::output::DigestReport<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (d, v) = (self.digest, &self.view);
        let order: Vec<&Class> = if v.rank == crate::rank::Rank::Time {
            d.classes.iter().collect()
        } else {
            rank::order(&d.classes, v.rank)
        };
        let total = d.total_time();
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("tool", "pileup digest")?;
        m.serialize_entry("inputs", &d.inputs)?;
        m.serialize_entry("bytes", &d.bytes)?;
        m.serialize_entry("events", &d.events)?;
        m.serialize_entry("ranked_by", v.rank.name())?;
        m.serialize_entry("profile_only", &v.profile_only)?;
        m.serialize_entry("max_classes", &d.max_classes)?;
        m.serialize_entry("problems", &json!({"count": d.problem_count, "first": d.problems}))?;
        let unavailable: Vec<Value> =
            unavailable(d, v).iter().map(|u| json!({"attribute": u.attr, "why": u.why})).collect();
        m.serialize_entry("unavailable", &unavailable)?;
        m.serialize_entry("notes", &d.notes)?;
        m.serialize_entry(
            "classes",
            &Classes { order, d, total, hosts: self.hosts, only: v.profile_only.then_some(v.rank) },
        )?;
        m.serialize_entry("other", &d.other.as_ref().map(|c| class(c, 0, d, total)))?;
        if let Some(h) = self.hosts {
            m.serialize_entry("fleet", &super::hosts::json(h))?;
        }
        if let Some(c) = self.changes {
            m.serialize_entry("changes", &super::hosts::changes_json(c))?;
        }
        if let Some(a) = self.advice {
            m.serialize_entry("advice", a)?;
        }
        if let Some(ix) = self.indexes {
            m.serialize_entry("index_advice", ix)?;
        }
        m.end()
    }
}
