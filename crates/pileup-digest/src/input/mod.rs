//! Inputs: slow-log files (plain, gzip or zstd, told apart by their first
//! bytes), standard input, read in blocks cut at entry boundaries so blocks
//! can be parsed in parallel.

pub mod slowlog;

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::Error;

/// A slow log to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    File(PathBuf),
    /// Standard input (`-`).
    Stdin,
}

impl Input {
    pub fn name(&self) -> String {
        match self {
            Input::File(p) => p.display().to_string(),
            Input::Stdin => "(stdin)".into(),
        }
    }

    /// Its size on disk, when it has one (for progress).
    pub fn size(&self) -> Option<u64> {
        match self {
            Input::File(p) => std::fs::metadata(p).ok().filter(|m| m.is_file()).map(|m| m.len()),
            Input::Stdin => None,
        }
    }
}

/// Counts the bytes read from the underlying file (compressed bytes for a
/// compressed file), for progress.
struct Counted<R> {
    inner: R,
    n: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n.fetch_add(k as u64, Ordering::Relaxed);
        Ok(k)
    }
}

/// Open an input: decompressed when its first bytes say gzip or zstd.
pub fn open(input: &Input, counter: Arc<AtomicU64>) -> Result<Box<dyn Read + Send>, Error> {
    let raw: Box<dyn Read + Send> = match input {
        Input::File(p) => {
            let f = File::open(p).map_err(|e| Error::Open(p.display().to_string(), e))?;
            if f.metadata().is_ok_and(|m| m.is_dir()) {
                return Err(Error::IsDir(p.display().to_string()));
            }
            Box::new(f)
        }
        Input::Stdin => Box::new(io::stdin()),
    };
    let mut r = BufReader::with_capacity(256 << 10, Counted { inner: raw, n: counter });
    let head = io::BufRead::fill_buf(&mut r).map_err(|e| Error::Read(input.name(), e))?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(r))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::stream::read::Decoder::with_buffer(r).map_err(|e| Error::Read(input.name(), e))?)
    } else {
        // Plain text is read straight into the blocks, not copied through
        // the buffer that sniffed its first bytes.
        let head = head.to_vec();
        Box::new(io::Cursor::new(head).chain(r.into_inner()))
    })
}

/// Blocks of about `size` bytes, each ending where an entry begins.
pub struct Blocks {
    r: Box<dyn Read + Send>,
    carry: Vec<u8>,
    size: usize,
    eof: bool,
}

/// A block with no entry start in it grows up to this before it is cut at
/// a line end (it holds no entry pileup could read whole anyway).
const MAX_BLOCK: usize = 256 << 20;

impl Blocks {
    pub fn new(r: Box<dyn Read + Send>, size: usize) -> Blocks {
        Blocks { r, carry: vec![], size: size.max(4096), eof: false }
    }

    /// The next block, or None at the end of the input.
    pub fn next_block(&mut self) -> io::Result<Option<Vec<u8>>> {
        if self.eof && self.carry.is_empty() {
            return Ok(None);
        }
        let mut buf = std::mem::take(&mut self.carry);
        let mut want = self.size;
        loop {
            if !self.eof && buf.len() < want {
                let need = want - buf.len();
                buf.reserve(need);
                let k = (&mut self.r).take(need as u64).read_to_end(&mut buf)?;
                if k < need {
                    self.eof = true;
                }
            }
            if self.eof {
                return Ok((!buf.is_empty()).then_some(buf));
            }
            match slowlog::last_entry_start(&buf) {
                Some(cut) => {
                    self.carry = buf[cut..].to_vec();
                    buf.truncate(cut);
                    return Ok(Some(buf));
                }
                None if buf.len() >= MAX_BLOCK => {
                    let cut = memchr::memrchr(b'\n', &buf).map_or(buf.len(), |p| p + 1);
                    self.carry = buf[cut..].to_vec();
                    buf.truncate(cut);
                    return Ok(Some(buf));
                }
                None => want = buf.len() * 2,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_end_at_entries_and_lose_nothing() {
        let mut log = Vec::new();
        for i in 0..2000 {
            log.extend_from_slice(
                format!(
                    "# Time: 2016-07-20T18:13:25Z\n# User@Host: u[u] @ h []\n# Query_time: 0.1\nSET timestamp={i};\nselect {i};\n"
                )
                .as_bytes(),
            );
        }
        let mut b = Blocks::new(Box::new(io::Cursor::new(log.clone())), 4096);
        let mut joined = vec![];
        let mut n = 0;
        while let Some(block) = b.next_block().unwrap() {
            assert!(block.starts_with(b"# Time: "), "{:?}", String::from_utf8_lossy(&block[..40]));
            joined.extend_from_slice(&block);
            n += 1;
        }
        assert!(n > 10);
        assert_eq!(joined, log);
    }

    #[test]
    fn compressed_inputs_are_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let text = b"# User@Host: u[u] @ h []\n# Query_time: 0.1\nselect 1;\n".repeat(100);
        let gz = dir.path().join("slow.log.gz");
        let mut e = flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::fast());
        io::Write::write_all(&mut e, &text).unwrap();
        e.finish().unwrap();
        let zs = dir.path().join("slow.log.zst");
        std::fs::write(&zs, zstd::encode_all(&text[..], 1).unwrap()).unwrap();
        for p in [gz, zs] {
            let mut out = vec![];
            open(&Input::File(p), Arc::default()).unwrap().read_to_end(&mut out).unwrap();
            assert_eq!(out, text);
        }
    }
}
