//! Inputs: slow-log files (plain, gzip or zstd, told apart by their first
//! bytes), standard input, read in blocks cut at entry boundaries so blocks
//! can be parsed in parallel.

pub mod ps;
pub mod slowlog;
pub mod table;

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Error;

/// A slow log to read.
#[derive(Clone, Debug)]
pub enum Input {
    File(PathBuf),
    /// Standard input (`-`).
    Stdin,
    /// A file followed as it grows and across rotation, until the flag is
    /// set (plain text only).
    Follow(PathBuf, Arc<AtomicBool>),
    /// The `mysql.slow_log` table of the server this reaches.
    Table(Box<pileup_conn::ConnSpec>),
    /// performance_schema's statement digests of the server this reaches,
    /// over a window (ended early when the flag is set).
    Digests(Box<pileup_conn::ConnSpec>, std::time::Duration, Arc<AtomicBool>),
    /// performance_schema's statement digests minute by minute (windows
    /// aligned on the clock's minutes), until the flag is set.
    DigestMinutes(Box<pileup_conn::ConnSpec>, Arc<AtomicBool>),
}

impl Input {
    pub fn name(&self) -> String {
        match self {
            Input::File(p) | Input::Follow(p, _) => p.display().to_string(),
            Input::Stdin => "(stdin)".into(),
            Input::Table(c) => format!("mysql.slow_log on {}", c.describe()),
            Input::Digests(c, d, _) => {
                format!("performance_schema statement digests on {}, {:.0} s", c.describe(), d.as_secs_f64())
            }
            Input::DigestMinutes(c, _) => {
                format!("performance_schema statement digests on {}, by the minute", c.describe())
            }
        }
    }

    /// Its size on disk, when it has one (for progress).
    pub fn size(&self) -> Option<u64> {
        match self {
            Input::File(p) => std::fs::metadata(p).ok().filter(|m| m.is_file()).map(|m| m.len()),
            Input::Stdin | Input::Follow(..) | Input::Table(_) | Input::Digests(..) | Input::DigestMinutes(..) => None,
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

/// A file read like `tail -F`: at its end, waits for more; when the path
/// names a new file (rotation), the old one is read to its end and the new
/// one from its start; when the file shrinks (truncated in place), it is
/// read again from its start. Ends when `stop` is set and the data written
/// so far is read. With [`Follow::yield_when_idle`], a read at the end
/// returns [`io::ErrorKind::WouldBlock`] at most that often, so the reader
/// can act on the clock while the log is quiet or written a little at a
/// time; when the last bytes came less than a poll ago, its inner error is
/// [`Busy`] and [`Blocks`] holds the last entry back, as the server may
/// still be writing it.
pub struct Follow {
    path: PathBuf,
    file: File,
    ino: u64,
    pos: u64,
    stop: Arc<AtomicBool>,
    poll: std::time::Duration,
    idle: Option<std::time::Duration>,
    /// When the reader last said it waits (or was opened): a log written
    /// a little at a time still gets its blocks cut every `idle`.
    yielded: std::time::Instant,
    /// When the last new bytes were read.
    news: std::time::Instant,
}

/// A followed file's end, reached less than a poll after its last new
/// bytes: the inner error of [`Follow`]'s `WouldBlock` then.
#[derive(Debug)]
pub struct Busy;

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("at the end of the followed file, written to a moment ago")
    }
}

impl std::error::Error for Busy {}

impl Follow {
    pub fn open(path: &std::path::Path, stop: Arc<AtomicBool>) -> Result<Follow, Error> {
        use std::os::unix::fs::MetadataExt;
        let file = File::open(path).map_err(|e| Error::Open(path.display().to_string(), e))?;
        let m = file.metadata().map_err(|e| Error::Read(path.display().to_string(), e))?;
        if m.is_dir() {
            return Err(Error::IsDir(path.display().to_string()));
        }
        Ok(Follow {
            path: path.to_path_buf(),
            file,
            ino: m.ino(),
            pos: 0,
            stop,
            poll: std::time::Duration::from_millis(200),
            idle: None,
            yielded: std::time::Instant::now(),
            news: std::time::Instant::now(),
        })
    }

    /// Return [`io::ErrorKind::WouldBlock`] from a read at the file's end
    /// once `after` has passed since the last time it did.
    pub fn yield_when_idle(mut self, after: std::time::Duration) -> Follow {
        self.idle = Some(after);
        self
    }
}

impl Read for Follow {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::io::Seek;
        use std::os::unix::fs::MetadataExt;
        loop {
            let n = self.file.read(buf)?;
            if n > 0 {
                self.pos += n as u64;
                self.news = std::time::Instant::now();
                return Ok(n);
            }
            match std::fs::metadata(&self.path) {
                Ok(m) if m.ino() != self.ino => {
                    // Rotated: what the server wrote to the old file before
                    // it switched is read first.
                    let n = self.file.read(buf)?;
                    if n > 0 {
                        self.pos += n as u64;
                        self.news = std::time::Instant::now();
                        return Ok(n);
                    }
                    if let Ok(f) = File::open(&self.path) {
                        self.file = f;
                        self.ino = m.ino();
                        self.pos = 0;
                        continue;
                    }
                }
                Ok(m) if m.len() < self.pos => {
                    self.file.seek(io::SeekFrom::Start(0))?;
                    self.pos = 0;
                    continue;
                }
                _ => {}
            }
            if self.stop.load(Ordering::Relaxed) {
                return Ok(0);
            }
            if self.idle.is_some_and(|d| self.yielded.elapsed() >= d) {
                self.yielded = std::time::Instant::now();
                if self.news.elapsed() < self.poll {
                    return Err(io::Error::new(io::ErrorKind::WouldBlock, Busy));
                }
                return Err(io::Error::new(io::ErrorKind::WouldBlock, "at the end of the followed file"));
            }
            std::thread::sleep(self.poll);
        }
    }
}

/// Open an input: decompressed when its first bytes say gzip or zstd. A
/// followed file read at its end for `idle` says so
/// ([`Follow::yield_when_idle`]).
pub fn open(
    input: &Input,
    counter: Arc<AtomicU64>,
    idle: Option<std::time::Duration>,
) -> Result<Box<dyn Read + Send>, Error> {
    let raw: Box<dyn Read + Send> = match input {
        Input::Follow(p, stop) => match idle {
            Some(d) => Box::new(Follow::open(p, stop.clone())?.yield_when_idle(d)),
            None => Box::new(Follow::open(p, stop.clone())?),
        },
        Input::File(p) => {
            let f = File::open(p).map_err(|e| Error::Open(p.display().to_string(), e))?;
            if f.metadata().is_ok_and(|m| m.is_dir()) {
                return Err(Error::IsDir(p.display().to_string()));
            }
            Box::new(f)
        }
        Input::Stdin => Box::new(io::stdin()),
        Input::Table(_) | Input::Digests(..) | Input::DigestMinutes(..) => {
            unreachable!("read over SQL by input::table and input::ps")
        }
    };
    let mut r = BufReader::with_capacity(256 << 10, Counted { inner: raw, n: counter });
    let head = match io::BufRead::fill_buf(&mut r) {
        // A followed file still empty: text, as a followed file must be.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Box::new(r)),
        h => h.map_err(|e| Error::Read(input.name(), e))?,
    };
    let decoded: Box<dyn Read + Send> = if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(r))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::stream::read::Decoder::with_buffer(r).map_err(|e| Error::Read(input.name(), e))?)
    } else {
        // Plain text is read straight into the blocks, not copied through
        // the buffer that sniffed its first bytes.
        let head = head.to_vec();
        if is_binary(&head) {
            return Err(Error::NotSlowLog(input.name()));
        }
        return Ok(Box::new(io::Cursor::new(head).chain(r.into_inner())));
    };
    // A compressed input's first decompressed bytes are looked at too.
    let mut d = BufReader::with_capacity(64 << 10, decoded);
    let head = io::BufRead::fill_buf(&mut d).map_err(|e| Error::Read(input.name(), e))?;
    if is_binary(head) {
        return Err(Error::NotSlowLog(input.name()));
    }
    Ok(Box::new(d))
}

/// Whether the first bytes of an input are no text: a slow log never
/// starts with a NUL byte in its first 4 KiB (its header and first entry;
/// statements with binary literals are logged escaped). Only the start
/// counts: a log whose tail a crash left zero-filled is still a log.
fn is_binary(head: &[u8]) -> bool {
    memchr::memchr(0, &head[..head.len().min(4 << 10)]).is_some()
}

/// Blocks of about `size` bytes, each ending where an entry begins.
pub struct Blocks {
    r: Box<dyn Read + Send>,
    carry: Vec<u8>,
    size: usize,
    eof: bool,
    /// The reader said it waits at a followed file's end.
    idle: bool,
    /// ... and that the file was written to a moment ago ([`Busy`]).
    busy: bool,
    /// Buffers of blocks already parsed, to read the next ones into.
    pool: Pool,
}

/// Buffers handed back once their blocks are parsed (by whichever thread
/// parsed them), so that reading never waits on fresh memory: a new
/// buffer is zeroed before it is read into, a used one is not.
pub type Pool = Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// One block: the first `len` bytes of `buf`. All of `buf` stays
/// initialized, so it can be read into again without being zeroed.
pub struct Block {
    buf: Vec<u8>,
    len: usize,
    /// Everything the followed file holds so far is in this block or
    /// before it (the reader waits at its end).
    pub caught_up: bool,
    /// The input ends with this block (a finite input read to its end).
    pub last: bool,
}

impl std::ops::Deref for Block {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Block {
    /// Give the buffer back for the next block.
    pub fn recycle(self, pool: &Pool) {
        pool.lock().unwrap_or_else(|e| e.into_inner()).push(self.buf);
    }
}

/// A block with no entry start in it grows up to this before it is cut at
/// a line end (it holds no entry pileup could read whole anyway).
const MAX_BLOCK: usize = 256 << 20;

impl Blocks {
    pub fn new(r: Box<dyn Read + Send>, size: usize, pool: Pool) -> Blocks {
        Blocks { r, carry: vec![], size: size.max(4096), eof: false, idle: false, busy: false, pool }
    }

    /// Read into `buf` from `filled` until `want` bytes or the end.
    fn fill(&mut self, buf: &mut [u8], mut filled: usize, want: usize) -> io::Result<usize> {
        while filled < want {
            match self.r.read(&mut buf[filled..want]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(k) => filled += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.idle = true;
                    self.busy = e.get_ref().is_some_and(|i| i.is::<Busy>());
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(filled)
    }

    /// The next block, or None at the end of the input. A followed file
    /// that has been quiet gives what it holds, the last entry too (a
    /// server writes an entry at once: after a quiet poll it is whole),
    /// possibly nothing, as a block that is [`Block::caught_up`]; one
    /// written to a moment ago ([`Busy`]) gives what is before its last
    /// entry, and keeps that entry for the next block.
    pub fn next_block(&mut self) -> io::Result<Option<Block>> {
        if self.eof && self.carry.is_empty() {
            return Ok(None);
        }
        let mut buf = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
        if buf.len() > 4 * self.size {
            // Grown for one large entry: not kept at that size.
            buf.truncate(self.size);
            buf.shrink_to_fit();
        }
        let carry = std::mem::take(&mut self.carry);
        let mut want = self.size.max(carry.len());
        if buf.len() < want {
            buf.resize(want, 0);
        }
        buf[..carry.len()].copy_from_slice(&carry);
        let mut filled = carry.len();
        loop {
            if !self.eof {
                filled = self.fill(&mut buf, filled, want)?;
            }
            if self.eof {
                return Ok((filled > 0).then_some(Block { buf, len: filled, caught_up: false, last: true }));
            }
            if std::mem::take(&mut self.idle) {
                let len = match std::mem::take(&mut self.busy) {
                    true => slowlog::last_entry_start(&buf[..filled]).unwrap_or(0),
                    false => filled,
                };
                self.carry = buf[len..filled].to_vec();
                return Ok(Some(Block { buf, len, caught_up: true, last: false }));
            }
            let data = &buf[..filled];
            let cut = match slowlog::last_entry_start(data) {
                Some(cut) => cut,
                None if filled >= MAX_BLOCK => memchr::memrchr(b'\n', data).map_or(filled, |p| p + 1),
                None => {
                    want = filled * 2;
                    buf.resize(want, 0);
                    continue;
                }
            };
            self.carry = buf[cut..filled].to_vec();
            return Ok(Some(Block { buf, len: cut, caught_up: false, last: false }));
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
        let pool = Pool::default();
        let mut b = Blocks::new(Box::new(io::Cursor::new(log.clone())), 4096, pool.clone());
        let mut joined = vec![];
        let mut n = 0;
        while let Some(block) = b.next_block().unwrap() {
            assert!(block.starts_with(b"# Time: "), "{:?}", String::from_utf8_lossy(&block[..40]));
            joined.extend_from_slice(&block);
            n += 1;
            // Every other buffer used again: a reused one holds the last
            // block's bytes past this block's end, which must not show.
            if n % 2 == 0 {
                block.recycle(&pool);
            }
        }
        assert!(n > 10);
        assert_eq!(joined, log);
    }

    #[test]
    fn a_followed_file_is_read_across_rotation_and_truncation_until_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("slow.log");
        std::fs::write(&p, b"one\n").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mut f = Follow::open(&p, stop.clone()).unwrap();
        f.poll = std::time::Duration::from_millis(10);
        let (p2, stop2) = (p.clone(), stop.clone());
        let writer = std::thread::spawn(move || {
            let append = |s: &[u8]| {
                let mut h = std::fs::OpenOptions::new().append(true).open(&p2).unwrap();
                io::Write::write_all(&mut h, s).unwrap();
            };
            std::thread::sleep(std::time::Duration::from_millis(50));
            append(b"two\n");
            // Rotation: renamed, more written to the old file, a new one made.
            std::fs::rename(&p2, p2.with_extension("log.1")).unwrap();
            let mut old = std::fs::OpenOptions::new().append(true).open(p2.with_extension("log.1")).unwrap();
            io::Write::write_all(&mut old, b"three\n").unwrap();
            std::fs::write(&p2, b"four\nfive\n").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(80));
            // Truncated in place, then written again.
            std::fs::write(&p2, b"six\n").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(80));
            stop2.store(true, Ordering::Relaxed);
        });
        let mut out = String::new();
        f.read_to_string(&mut out).unwrap();
        writer.join().unwrap();
        assert_eq!(out, "one\ntwo\nthree\nfour\nfive\nsix\n");
    }

    #[test]
    fn a_followed_file_being_written_is_handed_over_in_whole_entries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("slow.log");
        std::fs::write(&p, b"").unwrap();
        let mut f = Follow::open(&p, Arc::default()).unwrap().yield_when_idle(std::time::Duration::from_millis(25));
        f.poll = std::time::Duration::from_millis(300);
        // Entries written a piece every 10 ms: the reader hands over every
        // 25 ms, each time a moment after a piece (a stall of the writer
        // past the poll would hand a half-written entry over, and fail this
        // test).
        let p2 = p.clone();
        let writer = std::thread::spawn(move || {
            let mut h = std::fs::OpenOptions::new().append(true).open(&p2).unwrap();
            for piece in [&b"# Time: 2016-07-20T18:13:25\n"[..], b"# User@Host: u[u] @ h []\n", b"select ", b"1;\n"]
                .iter()
                .cycle()
                .take(100)
            {
                io::Write::write_all(&mut h, piece).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        });
        let mut b = Blocks::new(Box::new(f), 1 << 20, Pool::default());
        let (mut got, mut handed) = (vec![], 0);
        while !(writer.is_finished() && got.len() as u64 == std::fs::metadata(&p).unwrap().len()) {
            let block = b.next_block().unwrap().unwrap();
            assert!(block.caught_up);
            if !block.is_empty() {
                handed += 1;
                assert!(
                    block.starts_with(b"# Time: ") && block.ends_with(b"1;\n"),
                    "{:?}",
                    String::from_utf8_lossy(&block)
                );
            }
            got.extend_from_slice(&block);
        }
        writer.join().unwrap();
        assert!(handed > 3, "{handed} blocks");
        assert_eq!(got, std::fs::read(&p).unwrap());
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
            open(&Input::File(p), Arc::default(), None).unwrap().read_to_end(&mut out).unwrap();
            assert_eq!(out, text);
        }
    }
}
