//! Following a relay log (or binlog) as the server writes it: open at a
//! position, read on into the next file when the server rotates, read on
//! after a corrupt event, notice a file removed or replaced under the
//! reader, and treat the end of what is written as "not yet".
//!
//! One follower serves `pileup binlog --follow`, `pileup lag` and `pileup
//! prefetch`; each decides what a step means for it (wait, stop, jump to
//! the applier) and says it in its own words.

use std::path::{Path, PathBuf};

use crate::error::ReadError;
use crate::event::Format;
use crate::reader::{next_started, FileReader, RawEvent};

/// What one step of a [`Follower`] found.
#[derive(Debug)]
pub enum Step<'a> {
    /// The next event, with the format description to decode it under.
    Event(RawEvent<'a>, &'a Format),
    /// Nothing more is written yet (or, not rotating, the file ends here).
    End,
    /// The server went on into the next file and the follower with it; the
    /// next step reads from there.
    Rotated,
    /// A corrupt event. `resumed_at`: the offset of the next sound event,
    /// where the follower reads on; `None` when there is none to find
    /// (checksums off, or nothing sound follows in the file), and the
    /// caller must pick a position (a server-reported one, or stop).
    Corrupt { error: ReadError, resumed_at: Option<u64> },
    /// The server began the next file but it cannot be read (gone again
    /// when a restart purges relay logs, or not a binlog): the follower
    /// stays at the end of its file.
    CannotFollow { next: PathBuf, error: ReadError },
    /// The file cannot be read (an I/O error): nothing to resynchronise.
    Failed(ReadError),
}

/// Reads one relay log on from a position, file after file.
pub struct Follower {
    reader: FileReader,
    /// Go on into the next file at the end of this one.
    rotate: bool,
    verify: bool,
}

impl Follower {
    /// Open `path` and read its format description; the next event is the
    /// one at `pos` (an event boundary: a server-reported position, or one
    /// from an earlier read), or the first when `pos` is 4 or less.
    /// Checksums are verified.
    pub fn open_at(path: &Path, pos: u64) -> Result<Follower, ReadError> {
        Follower::open_with(path, pos, true)
    }

    /// [`Follower::open_at`], verifying checksums or not.
    pub fn open_with(path: &Path, pos: u64, verify: bool) -> Result<Follower, ReadError> {
        let mut reader = FileReader::open(path)?;
        reader.verify = verify;
        reader.read_format()?;
        reader.seek(pos);
        Ok(Follower { reader, rotate: true, verify })
    }

    /// Continue at `pos` in the file being read (an event boundary).
    pub fn seek(&mut self, pos: u64) {
        self.reader.seek(pos);
    }

    /// Stay in this file: its end is [`Step::End`], never a rotation.
    pub fn one_file(mut self) -> Follower {
        self.rotate = false;
        self
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        self.reader.path()
    }

    /// Offset of the next event in [`Follower::path`].
    pub fn position(&self) -> u64 {
        self.reader.position()
    }

    /// Whether the file being read was removed or replaced under the
    /// follower (see [`FileReader::replaced`]).
    pub fn replaced(&self) -> bool {
        self.reader.replaced()
    }

    /// Bytes written after the last complete event (an event still being
    /// written, or a truncated file).
    pub fn trailing_bytes(&self) -> u64 {
        std::fs::metadata(self.reader.path()).map(|m| m.len()).unwrap_or(0).saturating_sub(self.reader.position())
    }

    /// Read one step on.
    pub fn step(&mut self) -> Step<'_> {
        // `advance` holds no borrow, so the arms below may move the reader.
        match self.reader.advance() {
            Ok(Some(at)) => Step::Event(self.reader.event(at), self.reader.format()),
            Ok(None) if !self.rotate => Step::End,
            Ok(None) => match next_started(self.reader.path()) {
                // Finish this file first: the server may have written its
                // last event between the read above and the look.
                Some(next) => match self.reader.advance() {
                    Ok(Some(at)) => Step::Event(self.reader.event(at), self.reader.format()),
                    // Read from its start, format descriptions included: a
                    // damaged one is a corrupt event like any other.
                    Ok(None) => match FileReader::open(&next) {
                        Ok(mut r) => {
                            r.verify = self.verify;
                            self.reader = r;
                            Step::Rotated
                        }
                        Err(error) => Step::CannotFollow { next, error },
                    },
                    Err(error) => self.corrupt(error),
                },
                None => Step::End,
            },
            Err(error) => self.corrupt(error),
        }
    }

    fn corrupt(&mut self, error: ReadError) -> Step<'_> {
        match error {
            ReadError::Corrupt { offset, .. } => {
                let resumed_at = self.reader.resync(offset).ok().flatten();
                Step::Corrupt { error, resumed_at }
            }
            error => Step::Failed(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::MAGIC;

    /// A v4 event: header (timestamp, type, server id, size, next position,
    /// flags) then body.
    fn event(type_code: u8, body: &[u8], at: u64) -> Vec<u8> {
        let size = 19 + body.len() as u32;
        let mut e = vec![];
        e.extend(1_700_000_000u32.to_le_bytes());
        e.push(type_code);
        e.extend(1u32.to_le_bytes());
        e.extend(size.to_le_bytes());
        e.extend((at as u32 + size).to_le_bytes());
        e.extend(0u16.to_le_bytes());
        e.extend(body);
        e
    }

    /// A file of `n` XID events (no format description: the assumed
    /// format, no checksums).
    fn file(path: &Path, n: usize) -> Vec<u64> {
        let mut bytes = MAGIC.to_vec();
        let mut offsets = vec![];
        for i in 0..n {
            offsets.push(bytes.len() as u64);
            let e = event(crate::event::et::XID, &(i as u64).to_le_bytes(), bytes.len() as u64);
            bytes.extend(e);
        }
        std::fs::write(path, bytes).unwrap();
        offsets
    }

    fn events(f: &mut Follower) -> (usize, bool) {
        let mut n = 0;
        loop {
            match f.step() {
                Step::Event(..) => n += 1,
                Step::Rotated => return (n, true),
                Step::End => return (n, false),
                s => panic!("unexpected {s:?}"),
            }
        }
    }

    #[test]
    fn reads_on_into_the_next_file_once_it_is_begun() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("relay.000001"), d.path().join("relay.000002"));
        let offsets = file(&a, 3);
        let mut f = Follower::open_at(&a, offsets[1]).unwrap();
        assert_eq!(events(&mut f), (2, false), "from the second event; the next file is not there yet");
        std::fs::write(&b, &MAGIC[..2]).unwrap();
        assert!(matches!(f.step(), Step::End), "a file without its magic yet is not begun");
        file(&b, 2);
        assert!(matches!(f.step(), Step::Rotated));
        assert_eq!(f.path(), b.as_path());
        assert_eq!(events(&mut f), (2, false));
        let mut one = Follower::open_at(&a, 4).unwrap().one_file();
        assert_eq!(events(&mut one), (3, false), "one file: its end is the end");
    }

    #[test]
    fn a_next_file_that_is_not_a_binlog_is_reported_and_waited_at() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("relay.000001"), d.path().join("relay.000002"));
        file(&a, 1);
        std::fs::write(&b, b"GIF89a").unwrap();
        let mut f = Follower::open_at(&a, 4).unwrap();
        assert!(matches!(f.step(), Step::Event(..)));
        assert!(matches!(f.step(), Step::CannotFollow { error: ReadError::NotBinlog { .. }, .. }));
        assert_eq!(f.path(), a.as_path(), "stays on its file");
    }

    #[test]
    fn a_corrupt_event_without_checksums_leaves_the_position_to_the_caller() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("relay.000001");
        let offsets = file(&a, 3);
        let mut bytes = std::fs::read(&a).unwrap();
        // An impossible size in the second event's header.
        let at = offsets[1] as usize + 9;
        bytes[at..at + 4].copy_from_slice(&3u32.to_le_bytes());
        std::fs::write(&a, bytes).unwrap();
        let mut f = Follower::open_at(&a, 4).unwrap();
        assert!(matches!(f.step(), Step::Event(..)));
        match f.step() {
            Step::Corrupt { error: ReadError::Corrupt { offset, .. }, resumed_at: None } => {
                assert_eq!(offset, offsets[1])
            }
            s => panic!("unexpected {s:?}"),
        }
    }

    #[test]
    fn the_end_of_a_partly_written_event_is_not_yet() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("relay.000001");
        file(&a, 2);
        let full = std::fs::read(&a).unwrap();
        std::fs::write(&a, &full[..full.len() - 5]).unwrap();
        let mut f = Follower::open_at(&a, 4).unwrap();
        assert_eq!(events(&mut f), (1, false));
        assert_eq!(f.trailing_bytes(), full.len() as u64 - 5 - f.position());
        std::fs::write(&a, &full).unwrap();
        assert_eq!(events(&mut f), (1, false), "the rest arrived");
        assert_eq!(f.trailing_bytes(), 0);
    }
}
