//! Events decoded in order, with the table maps row events refer to.

use std::collections::HashMap;
use std::sync::Arc;

use crate::decode::{self, MariaGtid, Query, Rows, TableMap};
use crate::error::DecodeError;
use crate::event::{et, Format, Header};

/// A decoded event.
#[derive(Debug, Clone)]
pub enum Event<'a> {
    FormatDescription(Format),
    /// Continue in file `next` at `position`.
    Rotate {
        position: u64,
        next: String,
    },
    Query(Query<'a>),
    /// Commit of a transaction.
    Xid(u64),
    MariaGtid(MariaGtid),
    /// (domain, server, sequence) per domain.
    MariaGtidList(Vec<(u32, u32, u64)>),
    MysqlGtid {
        uuid: String,
        gno: u64,
    },
    TableMap(Arc<TableMap>),
    /// Row changes; the table map they belong to, if it was seen.
    Rows(Rows<'a>, Option<Arc<TableMap>>),
    /// The statement behind the following row events (MariaDB ANNOTATE_ROWS, MySQL ROWS_QUERY).
    Annotate(&'a [u8]),
    BinlogCheckpoint(String),
    /// MySQL's compressed transaction: the events inside, inflated.
    Payload(Vec<u8>),
    Stop,
    Heartbeat,
    /// Anything else (INTVAR, RAND, USER_VAR, ...): type code only.
    Other(u8),
}

/// Turns raw events into [`Event`]s; remembers table maps by id.
#[derive(Default)]
pub struct Decoder {
    /// Table maps by id, with the body they were parsed from: a replication
    /// stream repeats the same map before every row event, and comparing
    /// bytes is far cheaper than parsing them again.
    tables: HashMap<u64, (Vec<u8>, Arc<TableMap>)>,
    scratch: Vec<u8>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// The table map with this id, as last seen.
    pub fn table(&self, id: u64) -> Option<&Arc<TableMap>> {
        self.tables.get(&id).map(|(_, t)| t)
    }

    /// Decode one event (its whole bytes) under format `f`.
    pub fn decode<'a>(&'a mut self, f: &Format, ev: &'a [u8]) -> Result<Event<'a>, DecodeError> {
        let h = Header::parse(ev)?;
        let body = decode::body(ev, f);
        Ok(match h.type_code {
            et::FORMAT_DESCRIPTION => Event::FormatDescription(Format::parse(ev)?),
            et::ROTATE => {
                let (position, next) = decode::rotate(body)?;
                Event::Rotate { position, next: String::from_utf8_lossy(next).into_owned() }
            }
            et::QUERY => Event::Query(decode::query(f, body)?),
            et::QUERY_COMPRESSED => Event::Query(decode::query_compressed(f, body)?),
            et::XID => Event::Xid(decode::Cur::new(body, "xid event").uint(8)?),
            et::MARIADB_GTID => Event::MariaGtid(decode::maria_gtid(body)?),
            et::MARIADB_GTID_LIST => Event::MariaGtidList(decode::maria_gtid_list(body)?),
            et::MYSQL_GTID => {
                let (uuid, gno) = decode::mysql_gtid(body)?;
                Event::MysqlGtid { uuid, gno }
            }
            et::TABLE_MAP => {
                let id = decode::Cur::new(body, "table map event").uint(if f.post_header_len(et::TABLE_MAP) == 6 {
                    4
                } else {
                    6
                })?;
                if let Some((raw, tm)) = self.tables.get(&id) {
                    if raw.as_slice() == body {
                        return Ok(Event::TableMap(tm.clone()));
                    }
                }
                let tm = Arc::new(decode::table_map(f, body)?);
                // A statement's maps replace earlier ones with the same id.
                if self.tables.len() > 100_000 {
                    self.tables.clear();
                }
                self.tables.insert(tm.table_id, (body.to_vec(), tm.clone()));
                Event::TableMap(tm)
            }
            t if decode::rows_kind(t).is_some() => {
                let rows = decode::rows(f, t, body, &mut self.scratch)?;
                let tm = self.tables.get(&rows.table_id).map(|(_, t)| t.clone());
                Event::Rows(rows, tm)
            }
            et::ANNOTATE_ROWS | et::ROWS_QUERY => {
                // MySQL's ROWS_QUERY starts with a (truncated) length byte.
                Event::Annotate(if h.type_code == et::ROWS_QUERY { body.get(1..).unwrap_or(&[]) } else { body })
            }
            et::BINLOG_CHECKPOINT => {
                let mut c = decode::Cur::new(body, "binlog checkpoint event");
                let n = c.uint(4)? as usize;
                Event::BinlogCheckpoint(String::from_utf8_lossy(c.take(n)?).into_owned())
            }
            et::TRANSACTION_PAYLOAD => Event::Payload(payload(body)?),
            et::STOP => Event::Stop,
            et::HEARTBEAT | et::HEARTBEAT_V2 => Event::Heartbeat,
            t => Event::Other(t),
        })
    }
}

/// MySQL 8's TRANSACTION_PAYLOAD: type/length/value header fields, then the
/// transaction's events compressed with zstd (or not compressed).
fn payload(body: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut c = decode::Cur::new(body, "transaction payload event");
    let (mut compression, mut size) = (0u64, None);
    loop {
        let field = c.lenenc()?;
        if field == 0 {
            break;
        }
        let len = c.lenenc()? as usize;
        let mut v = decode::Cur::new(c.take(len)?, "transaction payload field");
        match field {
            1 => {}
            2 => compression = v.lenenc()?,
            3 => size = Some(v.lenenc()? as usize),
            _ => {}
        }
    }
    let data = c.rest();
    match compression {
        0 => {
            let cap = size.unwrap_or(data.len() * 4).min(1 << 30);
            zstd::bulk::decompress(data, cap).map_err(|e| DecodeError::Bad(format!("zstd: {e}")))
        }
        255 => Ok(data.to_vec()),
        x => Err(DecodeError::Bad(format!("unknown payload compression {x}"))),
    }
}
