//! Reading a binlog or relay log file: framing events out of a buffered
//! file, tracking the format description, verifying checksums, and tailing a
//! file that is still being written (a partial event at the end is "not yet",
//! never an error).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{DecodeError, ReadError};
use crate::event::{et, verify_event_crc, Checksum, Format, Header, HEADER_LEN, MAGIC};

/// Events larger than this are taken as corruption (the server's own limit,
/// `max_allowed_packet`, is at most 1 GiB).
pub const MAX_EVENT: u32 = 1 << 30;
const CHUNK: usize = 4 << 20;

/// One event as it lies in the file.
#[derive(Debug, Clone, Copy)]
pub struct RawEvent<'a> {
    /// Offset of the event in the file.
    pub offset: u64,
    pub header: Header,
    /// The whole event, header and checksum included.
    pub bytes: &'a [u8],
}

impl RawEvent<'_> {
    /// Offset just after this event: where the next one starts.
    pub fn end(&self) -> u64 {
        self.offset + self.bytes.len() as u64
    }
}

/// Where [`FileReader::advance`] found an event (no borrow of the reader).
#[derive(Debug, Clone, Copy)]
pub struct EventAt {
    pub offset: u64,
    pub header: Header,
    len: usize,
}

/// Reads the events of one file, in order.
pub struct FileReader {
    path: PathBuf,
    file: File,
    /// Bytes of the file from `buf_off`.
    buf: Vec<u8>,
    buf_off: u64,
    /// Offset of the next event.
    pos: u64,
    format: Format,
    /// Verify checksums (on by default).
    pub verify: bool,
}

impl FileReader {
    /// Open a file and check the binlog magic; the next event is the first.
    pub fn open(path: &Path) -> Result<FileReader, ReadError> {
        let io = |source| ReadError::Io { path: path.to_path_buf(), source };
        let mut file = File::open(path).map_err(io)?;
        let mut magic = [0u8; 4];
        let n = read_full(&mut file, &mut magic).map_err(io)?;
        if n < 4 || &magic != MAGIC {
            return Err(ReadError::NotBinlog { path: path.to_path_buf() });
        }
        Ok(FileReader {
            path: path.to_path_buf(),
            file,
            buf: Vec::new(),
            buf_off: 4,
            pos: 4,
            format: Format::assumed(),
            verify: true,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `path()` still names the file this reader has open. A
    /// replica restarted with GTID purges its relay logs and fetches them
    /// anew, numbering from 1 again: the same name can come back holding
    /// other events, and a reader must notice it is on a removed file.
    pub fn replaced(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.file.metadata(), std::fs::metadata(&self.path)) {
            (Ok(open), Ok(now)) => (open.dev(), open.ino()) != (now.dev(), now.ino()),
            _ => true,
        }
    }

    /// Offset of the next event.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The format description in force.
    pub fn format(&self) -> &Format {
        &self.format
    }

    /// Continue at `offset` (an event boundary: a position the server
    /// reported, or one from a previous read). The format description stays:
    /// read the file's first event with [`FileReader::read_format`] first
    /// when jumping into a file.
    pub fn seek(&mut self, offset: u64) {
        self.pos = offset.max(4);
    }

    /// Read the format description(s) in the file's preamble, then return to
    /// where the reader was. A relay log holds the replica's own description
    /// and then the primary's (after a Rotate); both come before the first
    /// transaction.
    pub fn read_format(&mut self) -> Result<(), ReadError> {
        let back = self.pos;
        self.pos = 4;
        let r = loop {
            match self.next_event() {
                Ok(Some(ev)) => {
                    let t = ev.header.type_code;
                    let preamble = matches!(
                        t,
                        et::FORMAT_DESCRIPTION
                            | et::ROTATE
                            | et::MARIADB_GTID_LIST
                            | et::BINLOG_CHECKPOINT
                            | et::MYSQL_PREVIOUS_GTIDS
                            | et::START_ENCRYPTION
                            | et::STOP
                    );
                    // Read the whole preamble when called at the start (a relay
                    // log holds the replica's own format description and then
                    // the primary's, which the events after it use); stop at
                    // the current position otherwise.
                    if !preamble || (back > 4 && self.pos >= back) {
                        break Ok(());
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.pos = back;
        r
    }

    fn corrupt(&self, offset: u64, what: impl Into<String>) -> ReadError {
        ReadError::Corrupt { path: self.path.clone(), offset, what: what.into() }
    }

    /// Make `[pos, pos + n)` available in the buffer; false if the file does
    /// not have that many bytes yet.
    fn fill(&mut self, pos: u64, n: usize) -> Result<bool, ReadError> {
        let have_from = pos.checked_sub(self.buf_off).map(|d| d as usize);
        if let Some(d) = have_from {
            if d + n <= self.buf.len() {
                return Ok(true);
            }
        }
        // Never allocate for bytes the file does not have (yet): a corrupt
        // size field could claim a gigabyte.
        let len = self.file.metadata().map_err(|source| ReadError::Io { path: self.path.clone(), source })?.len();
        if pos + n as u64 > len {
            return Ok(false);
        }
        // Restart the buffer at `pos`, keeping what we already have of it.
        match have_from {
            Some(d) if d <= self.buf.len() => {
                self.buf.drain(..d);
            }
            _ => self.buf.clear(),
        }
        self.buf_off = pos;
        let want = n.max(CHUNK);
        let start = self.buf.len();
        self.buf.resize(want, 0);
        let io = |source| ReadError::Io { path: self.path.clone(), source };
        self.file.seek(SeekFrom::Start(pos + start as u64)).map_err(io)?;
        let got = read_full(&mut self.file, &mut self.buf[start..])
            .map_err(|source| ReadError::Io { path: self.path.clone(), source })?;
        self.buf.truncate(start + got);
        Ok(self.buf.len() >= n)
    }

    /// Like [`FileReader::next_event`], with the format description the event is
    /// to be decoded under (no copy of it per event).
    pub fn next_with_format(&mut self) -> Result<Option<(RawEvent<'_>, &Format)>, ReadError> {
        match self.advance()? {
            None => Ok(None),
            Some(at) => Ok(Some((self.event(at), &self.format))),
        }
    }

    /// The next complete event, or `None` if the file ends before one (at
    /// its end, or in the middle of an event still being written).
    pub fn next_event(&mut self) -> Result<Option<RawEvent<'_>>, ReadError> {
        Ok(self.advance()?.map(|at| self.event(at)))
    }

    /// Frame the next complete event and move past it; the event's bytes
    /// are then [`FileReader::event`]. Split from `next_event` so a caller
    /// can act on "no event" or an error without holding a borrow.
    pub fn advance(&mut self) -> Result<Option<EventAt>, ReadError> {
        let pos = self.pos;
        if !self.fill(pos, HEADER_LEN)? {
            return Ok(None);
        }
        let d = (pos - self.buf_off) as usize;
        let h = Header::parse(&self.buf[d..]).map_err(|e| self.corrupt(pos, e.to_string()))?;
        if (h.event_size as usize) < HEADER_LEN || h.event_size > MAX_EVENT {
            return Err(self.corrupt(pos, format!("impossible event size {}", h.event_size)));
        }
        let size = h.event_size as usize;
        if !self.fill(pos, size)? {
            return Ok(None);
        }
        let d = (pos - self.buf_off) as usize;
        let bytes = &self.buf[d..d + size];
        if h.type_code == et::FORMAT_DESCRIPTION {
            let f = Format::parse(bytes).map_err(|e| self.corrupt(pos, e.to_string()))?;
            if f.checksum == Checksum::Crc32 && self.verify {
                verify_event_crc(bytes).map_err(|e| self.corrupt(pos, e.to_string()))?;
            }
            self.format = f;
        } else if self.format.checksum == Checksum::Crc32 && self.verify {
            verify_event_crc(bytes)
                .map_err(|e| self.corrupt(pos, format!("{} event: {e}", crate::event::type_name(h.type_code))))?;
        }
        self.pos = pos + size as u64;
        Ok(Some(EventAt { offset: pos, header: h, len: size }))
    }

    /// The bytes of the event [`FileReader::advance`] framed last.
    pub fn event(&self, at: EventAt) -> RawEvent<'_> {
        let d = (at.offset - self.buf_off) as usize;
        RawEvent { offset: at.offset, header: at.header, bytes: &self.buf[d..d + at.len] }
    }

    /// After a corrupt event at `from`: find the next offset where a
    /// well-formed event starts whose checksum verifies (so a stray match is
    /// all but impossible), and continue there. Only with checksums on;
    /// without them the caller must continue from a position the server
    /// reports. Returns the offset found.
    pub fn resync(&mut self, from: u64) -> Result<Option<u64>, ReadError> {
        if self.format.checksum != Checksum::Crc32 {
            return Ok(None);
        }
        let mut at = from + 1;
        loop {
            if !self.fill(at, HEADER_LEN)? {
                return Ok(None);
            }
            let d = (at - self.buf_off) as usize;
            let h = Header::parse(&self.buf[d..]).expect("19 bytes buffered");
            let size = h.event_size as usize;
            // A candidate longer than the rest of the file is not an event
            // (or one still being written: the caller finds it on its next
            // pass from the server's position).
            if (HEADER_LEN + 4..=MAX_EVENT as usize).contains(&size)
                && known_type(h.type_code)
                && self.fill(at, size)?
            {
                let d = (at - self.buf_off) as usize;
                if verify_event_crc(&self.buf[d..d + size]).is_ok() {
                    self.pos = at;
                    return Ok(Some(at));
                }
            }
            at += 1;
        }
    }
}

fn known_type(t: u8) -> bool {
    crate::event::type_name(t) != "Unknown"
}

/// Read until `buf` is full or the file ends.
fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Map a decode error of an event to a read error naming its place.
/// `relay-bin.000007` → `relay-bin.000008` (same width): the file the
/// server writes after this one.
pub fn next_file(p: &Path) -> Option<PathBuf> {
    let name = p.file_name()?.to_str()?;
    let (base, num) = name.rsplit_once('.')?;
    let n: u64 = num.parse().ok()?;
    Some(p.with_file_name(format!("{base}.{:0width$}", n + 1, width = num.len())))
}

/// The next file, once the server has begun it: it exists and holds at
/// least the binlog magic. A file the server has just created has no
/// header yet; opening it then would fail as "not a binlog", so a reader
/// following rotation waits for this instead of `next_file` alone.
pub fn next_started(p: &Path) -> Option<PathBuf> {
    next_file(p).filter(|n| std::fs::metadata(n).is_ok_and(|m| m.len() >= MAGIC.len() as u64))
}

/// The sequence number in a binlog or relay log file name (`relay-bin.000007` → 7).
pub fn file_number(p: &Path) -> Option<u64> {
    p.file_name()?.to_str()?.rsplit_once('.')?.1.parse().ok()
}

pub fn at(ev: &RawEvent, path: &Path, e: DecodeError) -> ReadError {
    ReadError::Corrupt {
        path: path.to_path_buf(),
        offset: ev.offset,
        what: format!("{} event: {e}", crate::event::type_name(ev.header.type_code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_reused_for_another_file_is_noticed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("relay.000002");
        std::fs::write(&p, [MAGIC.as_slice(), b"old events"].concat()).unwrap();
        let r = FileReader::open(&p).unwrap();
        assert!(!r.replaced(), "the same file");
        // Purged and fetched anew: the name comes back with other contents.
        std::fs::remove_file(&p).unwrap();
        assert!(r.replaced(), "removed");
        std::fs::write(&p, [MAGIC.as_slice(), b"new events"].concat()).unwrap();
        assert!(r.replaced(), "same name, another file");
        // Appending to the file being read (the server writing on) is not a replacement.
        let r2 = FileReader::open(&p).unwrap();
        std::io::Write::write_all(&mut std::fs::OpenOptions::new().append(true).open(&p).unwrap(), b"more").unwrap();
        assert!(!r2.replaced());
    }

    #[test]
    fn a_file_being_created_is_waited_for() {
        let d = tempfile::tempdir().unwrap();
        let cur = d.path().join("relay.000002");
        let p = d.path().join("relay.000003");
        assert!(next_started(&cur).is_none(), "missing: not yet");
        std::fs::write(&p, b"").unwrap();
        assert!(next_started(&cur).is_none(), "empty: not yet");
        std::fs::write(&p, &MAGIC[..2]).unwrap();
        assert!(next_started(&cur).is_none(), "half a magic: not yet");
        std::fs::write(&p, MAGIC).unwrap();
        assert_eq!(next_started(&cur).as_deref(), Some(p.as_path()), "magic written: ready");
        let r = FileReader::open(&p).unwrap();
        assert_eq!(r.position(), 4);
        std::fs::write(&p, b"GIF89a").unwrap();
        assert!(next_started(&cur).is_some(), "begun, though not a binlog");
        assert!(matches!(FileReader::open(&p), Err(ReadError::NotBinlog { .. })), "another kind of file is an error");
        assert!(matches!(FileReader::open(&d.path().join("gone.000001")), Err(ReadError::Io { .. })));
    }
}
