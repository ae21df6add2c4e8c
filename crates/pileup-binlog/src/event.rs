//! Event framing: the 19-byte common header, event types, the format
//! description (post-header lengths and checksum algorithm), checksums.
//!
//! Layout of every event (v4, all integers little-endian):
//! `timestamp u32 | type u8 | server_id u32 | event_size u32 | log_pos u32 | flags u16`
//! then the post-header (its length per type comes from the format
//! description event), the body, and with `binlog_checksum=CRC32` a CRC-32
//! of everything before it.

use crate::error::DecodeError;

pub const MAGIC: &[u8; 4] = b"\xfebin";
pub const HEADER_LEN: usize = 19;
pub const CHECKSUM_LEN: usize = 4;

/// Event type codes, MySQL's and MariaDB's.
pub mod et {
    pub const UNKNOWN: u8 = 0;
    pub const START_V3: u8 = 1;
    pub const QUERY: u8 = 2;
    pub const STOP: u8 = 3;
    pub const ROTATE: u8 = 4;
    pub const INTVAR: u8 = 5;
    pub const RAND: u8 = 13;
    pub const USER_VAR: u8 = 14;
    pub const FORMAT_DESCRIPTION: u8 = 15;
    pub const XID: u8 = 16;
    pub const BEGIN_LOAD_QUERY: u8 = 17;
    pub const EXECUTE_LOAD_QUERY: u8 = 18;
    pub const TABLE_MAP: u8 = 19;
    pub const WRITE_ROWS_V0: u8 = 20;
    pub const UPDATE_ROWS_V0: u8 = 21;
    pub const DELETE_ROWS_V0: u8 = 22;
    pub const WRITE_ROWS_V1: u8 = 23;
    pub const UPDATE_ROWS_V1: u8 = 24;
    pub const DELETE_ROWS_V1: u8 = 25;
    pub const INCIDENT: u8 = 26;
    pub const HEARTBEAT: u8 = 27;
    pub const IGNORABLE: u8 = 28;
    pub const ROWS_QUERY: u8 = 29;
    pub const WRITE_ROWS_V2: u8 = 30;
    pub const UPDATE_ROWS_V2: u8 = 31;
    pub const DELETE_ROWS_V2: u8 = 32;
    pub const MYSQL_GTID: u8 = 33;
    pub const MYSQL_ANONYMOUS_GTID: u8 = 34;
    pub const MYSQL_PREVIOUS_GTIDS: u8 = 35;
    pub const TRANSACTION_CONTEXT: u8 = 36;
    pub const VIEW_CHANGE: u8 = 37;
    pub const XA_PREPARE: u8 = 38;
    pub const PARTIAL_UPDATE_ROWS: u8 = 39;
    pub const TRANSACTION_PAYLOAD: u8 = 40;
    pub const HEARTBEAT_V2: u8 = 41;
    pub const MYSQL_GTID_TAGGED: u8 = 42;
    pub const ANNOTATE_ROWS: u8 = 160;
    pub const BINLOG_CHECKPOINT: u8 = 161;
    pub const MARIADB_GTID: u8 = 162;
    pub const MARIADB_GTID_LIST: u8 = 163;
    pub const START_ENCRYPTION: u8 = 164;
    pub const QUERY_COMPRESSED: u8 = 165;
    pub const WRITE_ROWS_COMPRESSED_V1: u8 = 166;
    pub const UPDATE_ROWS_COMPRESSED_V1: u8 = 167;
    pub const DELETE_ROWS_COMPRESSED_V1: u8 = 168;
    pub const WRITE_ROWS_COMPRESSED: u8 = 169;
    pub const UPDATE_ROWS_COMPRESSED: u8 = 170;
    pub const DELETE_ROWS_COMPRESSED: u8 = 171;
}

/// A short name for an event type, as `SHOW BINLOG EVENTS` spells it.
pub fn type_name(t: u8) -> &'static str {
    use et::*;
    match t {
        START_V3 => "Start_v3",
        QUERY => "Query",
        STOP => "Stop",
        ROTATE => "Rotate",
        INTVAR => "Intvar",
        RAND => "RAND",
        USER_VAR => "User_var",
        FORMAT_DESCRIPTION => "Format_desc",
        XID => "Xid",
        BEGIN_LOAD_QUERY => "Begin_load_query",
        EXECUTE_LOAD_QUERY => "Execute_load_query",
        TABLE_MAP => "Table_map",
        WRITE_ROWS_V0 | WRITE_ROWS_V1 => "Write_rows_v1",
        UPDATE_ROWS_V0 | UPDATE_ROWS_V1 => "Update_rows_v1",
        DELETE_ROWS_V0 | DELETE_ROWS_V1 => "Delete_rows_v1",
        INCIDENT => "Incident",
        HEARTBEAT | HEARTBEAT_V2 => "Heartbeat",
        IGNORABLE => "Ignorable",
        ROWS_QUERY => "Rows_query",
        WRITE_ROWS_V2 => "Write_rows",
        UPDATE_ROWS_V2 => "Update_rows",
        DELETE_ROWS_V2 => "Delete_rows",
        MYSQL_GTID | MYSQL_GTID_TAGGED => "Gtid",
        MYSQL_ANONYMOUS_GTID => "Anonymous_Gtid",
        MYSQL_PREVIOUS_GTIDS => "Previous_gtids",
        TRANSACTION_CONTEXT => "Transaction_context",
        VIEW_CHANGE => "View_change",
        XA_PREPARE => "XA_prepare",
        PARTIAL_UPDATE_ROWS => "Update_rows_partial",
        TRANSACTION_PAYLOAD => "Transaction_payload",
        ANNOTATE_ROWS => "Annotate_rows",
        BINLOG_CHECKPOINT => "Binlog_checkpoint",
        MARIADB_GTID => "Gtid",
        MARIADB_GTID_LIST => "Gtid_list",
        START_ENCRYPTION => "Start_encryption",
        QUERY_COMPRESSED => "Query_compressed",
        WRITE_ROWS_COMPRESSED_V1 => "Write_rows_compressed_v1",
        UPDATE_ROWS_COMPRESSED_V1 => "Update_rows_compressed_v1",
        DELETE_ROWS_COMPRESSED_V1 => "Delete_rows_compressed_v1",
        WRITE_ROWS_COMPRESSED => "Write_rows_compressed",
        UPDATE_ROWS_COMPRESSED => "Update_rows_compressed",
        DELETE_ROWS_COMPRESSED => "Delete_rows_compressed",
        _ => "Unknown",
    }
}

/// The common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub timestamp: u32,
    pub type_code: u8,
    pub server_id: u32,
    pub event_size: u32,
    /// End of this event in the binlog of the server that wrote it (in a
    /// relay log: the primary's binlog position; 0 for the replica's own events).
    pub log_pos: u32,
    pub flags: u16,
}

impl Header {
    pub fn parse(b: &[u8]) -> Result<Header, DecodeError> {
        if b.len() < HEADER_LEN {
            return Err(DecodeError::Short("header"));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ok(Header {
            timestamp: u32_at(0),
            type_code: b[4],
            server_id: u32_at(5),
            event_size: u32_at(9),
            log_pos: u32_at(13),
            flags: u16::from_le_bytes([b[17], b[18]]),
        })
    }
}

/// Flag of an event the replica wrote itself, not received from its primary
/// (`LOG_EVENT_RELAY_LOG_F`).
pub const FLAG_RELAY_LOG: u16 = 0x40;
/// `LOG_EVENT_ARTIFICIAL_F`: made up by the server (e.g. the fake Rotate at the start of a relay log).
pub const FLAG_ARTIFICIAL: u16 = 0x20;

/// Checksum algorithm of the events that follow a format description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checksum {
    None,
    Crc32,
}

/// What a FORMAT_DESCRIPTION event says about the events that follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    pub binlog_version: u16,
    pub server_version: String,
    pub header_len: u8,
    /// Post-header length per event type (index: type code - 1).
    pub post_header: Vec<u8>,
    pub checksum: Checksum,
}

impl Format {
    /// A format for a file not yet seen to carry its own description: the
    /// defaults of MySQL 5.6+/MariaDB 10+ binlogs (used only until the
    /// first FORMAT_DESCRIPTION, which every binlog starts with).
    pub fn assumed() -> Format {
        Format {
            binlog_version: 4,
            server_version: String::new(),
            header_len: HEADER_LEN as u8,
            post_header: vec![],
            checksum: Checksum::None,
        }
    }

    /// Parse a FORMAT_DESCRIPTION event (`ev` is the whole event).
    pub fn parse(ev: &[u8]) -> Result<Format, DecodeError> {
        let body = ev.get(HEADER_LEN..).ok_or(DecodeError::Short("format description"))?;
        if body.len() < 2 + 50 + 4 + 1 {
            return Err(DecodeError::Short("format description"));
        }
        let binlog_version = u16::from_le_bytes([body[0], body[1]]);
        let sv = &body[2..52];
        let server_version = String::from_utf8_lossy(&sv[..sv.iter().position(|&c| c == 0).unwrap_or(50)]).into_owned();
        let header_len = body[56];
        // Servers that know checksums (MySQL ≥ 5.6.1, MariaDB ≥ 5.3) end the
        // event with the algorithm byte and a 4-byte checksum field, whether
        // or not checksums are on.
        let aware = checksum_aware(&server_version);
        let tail = if aware { 1 + CHECKSUM_LEN } else { 0 };
        let end = body.len().checked_sub(tail).filter(|&e| e >= 57).ok_or(DecodeError::Short("format description"))?;
        let post_header = body[57..end].to_vec();
        let checksum = if aware {
            match body[end] {
                0 => Checksum::None,
                1 => Checksum::Crc32,
                x => return Err(DecodeError::Bad(format!("unknown checksum algorithm {x}"))),
            }
        } else {
            Checksum::None
        };
        Ok(Format { binlog_version, server_version, header_len, post_header, checksum })
    }

    /// Post-header length for an event type, falling back to the fixed
    /// length of types an older description does not list.
    pub fn post_header_len(&self, t: u8) -> usize {
        if let Some(&l) = (t as usize).checked_sub(1).and_then(|i| self.post_header.get(i)) {
            return l as usize;
        }
        match t {
            et::QUERY | et::QUERY_COMPRESSED => 13,
            et::ROTATE => 8,
            et::TABLE_MAP => 8,
            et::WRITE_ROWS_V1 | et::UPDATE_ROWS_V1 | et::DELETE_ROWS_V1 => 8,
            et::WRITE_ROWS_COMPRESSED_V1 | et::UPDATE_ROWS_COMPRESSED_V1 | et::DELETE_ROWS_COMPRESSED_V1 => 8,
            et::WRITE_ROWS_V2 | et::UPDATE_ROWS_V2 | et::DELETE_ROWS_V2 | et::PARTIAL_UPDATE_ROWS => 10,
            et::WRITE_ROWS_COMPRESSED | et::UPDATE_ROWS_COMPRESSED | et::DELETE_ROWS_COMPRESSED => 10,
            et::MARIADB_GTID => 19,
            et::MARIADB_GTID_LIST => 4,
            et::BINLOG_CHECKPOINT => 4,
            _ => 0,
        }
    }

    /// Is this a MariaDB server's binlog?
    pub fn is_mariadb(&self) -> bool {
        self.server_version.contains("MariaDB")
    }
}

/// Whether a server version writes the checksum algorithm into its format
/// description (MySQL 5.6.1+, MariaDB 5.3+, every later major version).
fn checksum_aware(v: &str) -> bool {
    let nums: Vec<u32> = v
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(3)
        .filter_map(|s| s.parse().ok())
        .collect();
    let (a, b, c) =
        (nums.first().copied().unwrap_or(0), nums.get(1).copied().unwrap_or(0), nums.get(2).copied().unwrap_or(0));
    if v.contains("MariaDB") {
        (a, b) >= (5, 3)
    } else {
        (a, b, c) >= (5, 6, 1)
    }
}

/// `LOG_EVENT_BINLOG_IN_USE_F`: set in the format description of a binlog
/// the server still has open, after the checksum was computed.
pub const FLAG_IN_USE: u16 = 0x1;

/// Verify an event's CRC-32 as the server does: a format description's
/// in-use flag is not covered by its checksum.
pub fn verify_event_crc(ev: &[u8]) -> Result<(), DecodeError> {
    if ev.len() >= HEADER_LEN && ev[4] == et::FORMAT_DESCRIPTION && ev[17] & FLAG_IN_USE as u8 != 0 {
        let mut copy = ev.to_vec();
        copy[17] &= !(FLAG_IN_USE as u8);
        return verify_crc(&copy);
    }
    verify_crc(ev)
}

/// Verify an event's CRC-32 (the last 4 bytes).
pub fn verify_crc(ev: &[u8]) -> Result<(), DecodeError> {
    let n = ev.len().checked_sub(CHECKSUM_LEN).ok_or(DecodeError::Short("checksum"))?;
    let stored = u32::from_le_bytes(ev[n..].try_into().unwrap());
    let computed = crc32fast::hash(&ev[..n]);
    if stored == computed {
        Ok(())
    } else {
        Err(DecodeError::Checksum { stored, computed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_that_carry_the_checksum_byte() {
        assert!(checksum_aware("10.11.19-MariaDB-0+deb12u1-log"));
        assert!(checksum_aware("5.5.68-MariaDB"));
        assert!(!checksum_aware("5.1.73"));
        assert!(checksum_aware("8.0.36"));
        assert!(!checksum_aware("5.6.0-m4"));
    }

    #[test]
    fn header_and_crc() {
        let mut ev = vec![0u8; HEADER_LEN];
        ev[4] = et::XID;
        ev[9] = (HEADER_LEN + 8 + 4) as u8;
        ev.extend_from_slice(&42u64.to_le_bytes());
        let crc = crc32fast::hash(&ev);
        ev.extend_from_slice(&crc.to_le_bytes());
        let h = Header::parse(&ev).unwrap();
        assert_eq!((h.type_code, h.event_size as usize), (et::XID, ev.len()));
        verify_crc(&ev).unwrap();
        ev[20] ^= 1;
        assert!(matches!(verify_crc(&ev), Err(DecodeError::Checksum { .. })));
    }
}
