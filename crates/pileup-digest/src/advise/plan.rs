//! What a plan is, as far as a hint or a setting can change it: each
//! table in join order with its access type, index, key parts used and
//! rowid filter, from `EXPLAIN FORMAT=JSON` (or `ANALYZE FORMAT=JSON`).
//! Row estimates and costs are left out: they vary between two plans of
//! the same shape.

use serde_json::Value;

/// One table of a plan.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    pub table: String,
    pub access_type: Option<String>,
    pub key: Option<String>,
    pub key_parts: Vec<String>,
    pub rowid_filter: Option<String>,
}

/// A plan: its tables in join order.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Plan(pub Vec<Step>);

impl Plan {
    /// From `EXPLAIN FORMAT=JSON`'s document.
    pub fn of(j: &Value) -> Plan {
        fn walk(v: &Value, out: &mut Vec<Step>) {
            match v {
                Value::Object(m) => {
                    if let Some(t) = m.get("table_name").and_then(Value::as_str) {
                        let s = |k: &str| m.get(k).and_then(Value::as_str).map(String::from);
                        let parts = m
                            .get("used_key_parts")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().filter_map(|k| k.as_str().map(String::from)).collect())
                            .unwrap_or_default();
                        let filter =
                            m.get("rowid_filter").and_then(|f| f.pointer("/range/key")).and_then(Value::as_str);
                        out.push(Step {
                            table: t.to_string(),
                            access_type: s("access_type"),
                            key: s("key"),
                            key_parts: parts,
                            rowid_filter: filter.map(String::from),
                        });
                    }
                    for (k, x) in m {
                        if k != "rowid_filter" {
                            walk(x, out);
                        }
                    }
                }
                Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        let mut steps = vec![];
        walk(j, &mut steps);
        Plan(steps)
    }

    /// In one line: `t range on b(b), rowid filter k; u eq_ref on PRIMARY(id)`.
    pub fn line(&self) -> String {
        if self.0.is_empty() {
            return "no table".into();
        }
        self.0
            .iter()
            .map(|s| {
                let mut l = format!("{} {}", s.table, s.access_type.as_deref().unwrap_or("?"));
                if let Some(k) = &s.key {
                    l += &format!(" on {k}({})", s.key_parts.join(","));
                }
                if let Some(f) = &s.rowid_filter {
                    l += &format!(", rowid filter {f}");
                }
                l
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A table a plan reads: (name, the index chosen, the indexes it could use).
pub type TableRead = (String, Option<String>, Vec<String>);

/// Optimization and execution milliseconds, and each table with its chosen
/// index and the indexes it could use, from `ANALYZE FORMAT=JSON`.
pub fn split(j: &Value) -> (Option<f64>, Option<f64>, Vec<TableRead>) {
    fn tables(v: &Value, out: &mut Vec<TableRead>) {
        match v {
            Value::Object(m) => {
                if let Some(t) = m.get("table_name").and_then(|t| t.as_str()) {
                    let keys = m
                        .get("possible_keys")
                        .and_then(|p| p.as_array())
                        .map(|a| a.iter().filter_map(|k| k.as_str().map(String::from)).collect())
                        .unwrap_or_default();
                    out.push((t.to_string(), m.get("key").and_then(|k| k.as_str()).map(String::from), keys));
                }
                for x in m.values() {
                    tables(x, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| tables(x, out)),
            _ => {}
        }
    }
    let opt = j.pointer("/query_optimization/r_total_time_ms").and_then(|v| v.as_f64());
    let exec = j.pointer("/query_block/r_total_time_ms").and_then(|v| v.as_f64());
    let mut t = vec![];
    tables(j, &mut t);
    (opt, exec, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_compare_on_shape_never_on_estimates() {
        let a: Value = serde_json::from_str(
            r#"{"query_block": {"select_id": 1, "cost": 0.5, "nested_loop": [
                {"table": {"table_name": "t", "access_type": "range", "possible_keys": ["b", "c"], "key": "b",
                  "key_length": "5", "used_key_parts": ["b"], "rows": 300, "filtered": 100,
                  "rowid_filter": {"range": {"key": "c", "used_key_parts": ["c"]}, "rows": 10}}},
                {"table": {"table_name": "u", "access_type": "eq_ref", "key": "PRIMARY", "used_key_parts": ["id"], "rows": 1}}
            ]}}"#,
        )
        .unwrap();
        let p = Plan::of(&a);
        assert_eq!(p.line(), "t range on b(b), rowid filter c; u eq_ref on PRIMARY(id)");
        // Other estimates, the same plan.
        let b: Value = serde_json::from_str(&a.to_string().replace("300", "2900").replace("0.5", "7.1")).unwrap();
        assert_eq!(Plan::of(&b), p);
        // Another index, another filter or another order: another plan.
        let c: Value = serde_json::from_str(&a.to_string().replace(r#""key":"b""#, r#""key":"c""#)).unwrap();
        assert_ne!(Plan::of(&c), p);
        let d: Value = serde_json::from_str(
            &a.to_string().replace(r#","rowid_filter":{"range":{"key":"c","used_key_parts":["c"]},"rows":10}"#, ""),
        )
        .unwrap();
        assert_ne!(Plan::of(&d), p);
        assert_eq!(Plan::of(&d).0.len(), 2);
    }

    #[test]
    fn analyze_json_splits_into_optimization_execution_and_the_chosen_index() {
        let j: Value = serde_json::from_str(
            r#"{"query_optimization": {"r_total_time_ms": 8.8}, "query_block": {"select_id": 1, "r_total_time_ms": 3.6,
                "table": {"table_name": "t", "access_type": "range", "possible_keys": ["a", "b"], "key": "b"}}}"#,
        )
        .unwrap();
        let (o, e, t) = split(&j);
        assert_eq!((o, e), (Some(8.8), Some(3.6)));
        assert_eq!(t, vec![("t".to_string(), Some("b".to_string()), vec!["a".to_string(), "b".to_string()])]);
    }
}
