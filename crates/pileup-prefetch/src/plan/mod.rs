//! An event → the lookups its execution will need.
//!
//! * [`row`]: a row change → the index entries the applier will touch;
//! * [`statement`]: a statement → the rows it reads and the entries it
//!   changes;
//! * here, [`Planner::plan`]: one relay-log event, decoded and planned by
//!   the two above, with nothing but the table definitions from outside
//!   (a pure function of the event's bytes, testable without a server).

pub mod row;
pub mod statement;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use pileup_binlog::{decode::rows_kind, et, Decoder, Event, Format, RawEvent};
use pileup_replica::schema::Table;

pub use row::{plan_row, Key, KeyValue, Recent, Skip};
use statement::{Literal, Reads, RowsPlan, StmtSkip, Templates};

use crate::metrics::Counters;

/// One read to issue.
#[derive(Debug)]
pub enum Lookup {
    /// An index entry of a table.
    Key(Arc<Table>, Key),
    /// A statement's rows (read with a SELECT), then the entries they name.
    Rows(RowsPlan),
}

/// Does an event of this type start a transaction (a GTID event)?
pub fn starts_transaction(type_code: u8) -> bool {
    matches!(type_code, et::MARIADB_GTID | et::MYSQL_GTID | et::MYSQL_ANONYMOUS_GTID | et::MYSQL_GTID_TAGGED)
}

/// What an event was, for the window ahead of the applier.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// DDL that may change a table's definition: read no further until the
    /// applier has run it (no lookup then holds a metadata lock it waits
    /// for, and the tables are read again afterwards).
    pub ddl: bool,
}

/// Table definitions by (schema, table); None when it cannot be read.
pub type Tables<'a> = dyn FnMut(&str, &str) -> Option<Arc<Table>> + 'a;

/// Decodes events and plans their lookups; keeps the table maps, the
/// statement templates and its buffers from one event to the next.
#[derive(Default)]
pub struct Planner {
    dec: Decoder,
    templates: Templates,
    lits: Vec<Literal>,
    keys: Vec<Key>,
    skipped: Vec<Skip>,
}

impl Planner {
    /// Plan one event. `in_flight`: it belongs to a transaction parallel
    /// workers may already be running (its reads would come too late), so
    /// it is only looked at for DDL and table maps. Each lookup goes to
    /// `out`; skips and plans are counted in `counters`.
    pub fn plan(
        &mut self,
        ev: &RawEvent,
        fmt: &Format,
        in_flight: bool,
        tables: &mut Tables,
        counters: &Counters,
        out: &mut dyn FnMut(Lookup),
    ) -> Planned {
        let t = ev.header.type_code;
        let mut planned = Planned::default();
        let query = t == et::QUERY || t == et::QUERY_COMPRESSED;
        let rows = rows_kind(t).is_some();
        if in_flight && (query || rows) {
            counters.skipped_in_flight.fetch_add(1, Relaxed);
        }
        // Table maps are always decoded: the row events after them refer
        // to them. Rows of in-flight transactions are not decoded at all.
        if !(query || t == et::TABLE_MAP || (rows && !in_flight)) {
            return planned;
        }
        match self.dec.decode(fmt, ev.bytes) {
            Ok(Event::Query(q)) if is_ddl(&q.sql) => {
                planned.ddl = true;
                counters.ddl_pauses.fetch_add(1, Relaxed);
            }
            Ok(Event::Query(q)) if !in_flight => {
                let db = String::from_utf8_lossy(q.db).into_owned();
                plan_statement(&mut self.templates, &mut self.lits, &db, &q.sql, tables, counters, out);
            }
            Ok(Event::Rows(rows, Some(tm))) if !in_flight => {
                let Some(table) = tables(&tm.schema, &tm.table) else {
                    counters.skipped_no_table.fetch_add(1, Relaxed);
                    return planned;
                };
                let mut it = rows.iter(&tm);
                // Images borrow the event buffer: fresh vectors per event.
                let (mut before, mut after) =
                    (Vec::with_capacity(tm.columns.len()), Vec::with_capacity(tm.columns.len()));
                while let Ok(true) = it.next_into(&mut before, &mut after) {
                    counters.rows_planned.fetch_add(1, Relaxed);
                    self.keys.clear();
                    self.skipped.clear();
                    plan_row(&table, rows.kind, &before, &after, &mut self.keys, &mut self.skipped);
                    for s in &self.skipped {
                        let c = match s {
                            Skip::ColumnNotInImage => &counters.skipped_not_in_image,
                            Skip::FloatKey => &counters.skipped_float_key,
                            Skip::SchemaMismatch => &counters.skipped_schema,
                        };
                        c.fetch_add(1, Relaxed);
                    }
                    for k in self.keys.drain(..) {
                        out(Lookup::Key(table.clone(), k));
                    }
                }
            }
            _ => {}
        }
        planned
    }
}

/// A statement (not DDL) → its lookups.
fn plan_statement(
    templates: &mut Templates,
    lits: &mut Vec<Literal>,
    db: &str,
    sql: &[u8],
    tables: &mut Tables,
    counters: &Counters,
    out: &mut dyn FnMut(Lookup),
) {
    let skip = |s: StmtSkip| match s {
        StmtSkip::NotAWrite => {}
        StmtSkip::NotIndexed => {
            counters.statements_skipped_not_indexed.fetch_add(1, Relaxed);
        }
        StmtSkip::Unparsed | StmtSkip::Unsupported => {
            counters.statements_skipped_unsupported.fetch_add(1, Relaxed);
        }
    };
    let tpl = match templates.get(db, sql, lits) {
        Ok(tpl) => tpl,
        Err(e) => {
            if e != StmtSkip::NotAWrite {
                tracing::debug!(reason = ?e, sql = %String::from_utf8_lossy(&sql[..sql.len().min(200)]), "statement skipped");
            }
            counters.templates_parsed.store(templates.parsed, Relaxed);
            return skip(e);
        }
    };
    counters.templates_parsed.store(templates.parsed, Relaxed);
    let (schema, name) = tpl.table_name(db);
    let Some(table) = tables(&schema, &name) else {
        counters.skipped_no_table.fetch_add(1, Relaxed);
        return;
    };
    match tpl.reads(&table, lits) {
        Err(e) => skip(e),
        Ok(Reads::Keys(ks)) => {
            counters.statements_planned.fetch_add(1, Relaxed);
            for k in ks {
                out(Lookup::Key(table.clone(), k));
            }
        }
        Ok(Reads::Rows(plan)) => {
            counters.statements_planned.fetch_add(1, Relaxed);
            out(Lookup::Rows(plan));
        }
    }
}

/// Is this statement DDL that may change a table's definition?
fn is_ddl(sql: &[u8]) -> bool {
    let s = String::from_utf8_lossy(&sql[..sql.len().min(32)]).trim_start().to_ascii_uppercase();
    ["ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE"].iter().any(|k| s.starts_with(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pileup_binlog::event::HEADER_LEN;
    use pileup_binlog::Header;

    /// A QUERY event as a server without a format description writes it
    /// (13-byte post-header, no status variables, no checksum).
    fn query_event(db: &str, sql: &str) -> Vec<u8> {
        let mut body = vec![];
        body.extend(7u32.to_le_bytes()); // thread id
        body.extend(0u32.to_le_bytes()); // exec time
        body.push(db.len() as u8);
        body.extend(0u16.to_le_bytes()); // error code
        body.extend(0u16.to_le_bytes()); // status variables' length
        body.extend(db.as_bytes());
        body.push(0);
        body.extend(sql.as_bytes());
        let size = (HEADER_LEN + body.len()) as u32;
        let mut e = vec![];
        e.extend(1_700_000_000u32.to_le_bytes());
        e.push(et::QUERY);
        e.extend(1u32.to_le_bytes());
        e.extend(size.to_le_bytes());
        e.extend(0u32.to_le_bytes());
        e.extend(0u16.to_le_bytes());
        e.extend(body);
        e
    }

    fn plan(p: &mut Planner, sql: &str, in_flight: bool, c: &Counters) -> (Planned, Vec<Lookup>) {
        let bytes = query_event("sbtest", sql);
        let ev = RawEvent { offset: 4, header: Header::parse(&bytes).unwrap(), bytes: &bytes };
        let table = Arc::new(row::tests::sbtest());
        let mut tables = |s: &str, t: &str| (s == "sbtest" && t == "sbtest1").then(|| table.clone());
        let mut out = vec![];
        let planned = p.plan(&ev, &Format::assumed(), in_flight, &mut tables, c, &mut |l| out.push(l));
        (planned, out)
    }

    #[test]
    fn statements_become_lookups() {
        let (mut p, c) = (Planner::default(), Counters::default());
        let (planned, out) = plan(&mut p, "INSERT INTO sbtest1 (id, k, c, pad) VALUES (5, 7, 'x', 'y')", false, &c);
        assert_eq!(planned, Planned::default());
        let keys: Vec<usize> = out
            .iter()
            .map(|l| match l {
                Lookup::Key(_, k) => k.index,
                Lookup::Rows(_) => panic!("an INSERT's values are its keys"),
            })
            .collect();
        assert_eq!(keys, vec![0, 1], "the primary key and the k index");
        let (_, out) = plan(&mut p, "UPDATE sbtest1 SET k = k + 1 WHERE id = 9", false, &c);
        assert!(matches!(out.as_slice(), [Lookup::Rows(_)]), "an UPDATE reads its rows first");
        assert_eq!(c.statements_planned.load(Relaxed), 2);
        let (_, out) = plan(&mut p, "UPDATE elsewhere SET a = 1 WHERE id = 1", false, &c);
        assert!(out.is_empty());
        assert_eq!(c.skipped_no_table.load(Relaxed), 1, "a table the replica cannot describe");
    }

    #[test]
    fn ddl_stops_the_reader_even_in_flight_and_in_flight_writes_are_skipped() {
        let (mut p, c) = (Planner::default(), Counters::default());
        let (planned, out) = plan(&mut p, "  alter table sbtest1 add column z int", true, &c);
        assert!(planned.ddl && out.is_empty());
        assert_eq!(c.ddl_pauses.load(Relaxed), 1);
        let (planned, out) = plan(&mut p, "UPDATE sbtest1 SET k = 1 WHERE id = 9", true, &c);
        assert!(!planned.ddl && out.is_empty(), "a parallel worker may already run it");
        assert_eq!(c.skipped_in_flight.load(Relaxed), 2);
    }
}
