//! Writing a file by direct I/O (`O_DIRECT`) without making the writer
//! wait for the device: the data goes a megabyte at a time from buffers
//! aligned as direct I/O requires (addresses, lengths and offsets in whole
//! blocks), each full buffer handed to a writer thread of the calling
//! thread's own while the caller fills the next; the file's last buffer is
//! left to [`Tail::write`], which the file's sync runs (on the thread that
//! syncs it). A direct write waits for the device, and a dump's connection
//! spent a tenth of its time in them.
//!
//! The last partial block is written through the page cache (the flag
//! cleared); so is everything after a write the filesystem refuses as
//! direct. Written here: no maintained crate does direct-I/O writing with
//! that fallback for a plain `std::fs::File`.

use std::cell::RefCell;
use std::fs;
use std::io::Write;
use std::sync::mpsc;
use std::sync::Mutex;

const BLOCK: usize = 4096;
/// A buffer's size: one direct write.
pub(crate) const SIZE: usize = 1 << 20;

/// [`SIZE`] bytes aligned to a block (the vector holds one block more).
pub(crate) struct Aligned {
    buf: Vec<u8>,
    at: usize,
}

/// Buffers given back, for the next file (most of a dump's files are
/// written one after another by the same few threads).
static SPARE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
/// Spare buffers kept at most.
const KEPT: usize = 16;

impl Aligned {
    fn take() -> Aligned {
        let spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let buf = spare.unwrap_or_else(|| vec![0; SIZE + BLOCK]);
        let at = buf.as_ptr().align_offset(BLOCK);
        Aligned { buf, at }
    }

    fn area(&mut self) -> &mut [u8] {
        &mut self.buf[self.at..self.at + SIZE]
    }

    fn bytes(&self, len: usize) -> &[u8] {
        &self.buf[self.at..self.at + len]
    }

    /// The buffer, an empty one left in its place (for a value about to
    /// be dropped).
    fn take_from(a: &mut Aligned) -> Aligned {
        std::mem::replace(a, Aligned { buf: Vec::new(), at: 0 })
    }

    fn give_back(self) {
        let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < KEPT {
            spare.push(self.buf);
        }
    }
}

/// Set or clear `O_DIRECT` on an open file.
pub(crate) fn set_direct(file: &fs::File, on: bool) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(file, FcntlArg::F_GETFL)?);
    let flags = if on { flags | OFlag::O_DIRECT } else { flags - OFlag::O_DIRECT };
    fcntl(file, FcntlArg::F_SETFL(flags))?;
    Ok(())
}

/// Write all of `data` at the file's offset; `direct` says whether the
/// file is still open for direct I/O, and is cleared when a write is
/// refused as direct (a filesystem that accepted the flag but not this
/// write, or an offset left unaligned by a short write): the rest goes
/// through the page cache. A refused write leaves the offset where it was.
fn write_all(file: &fs::File, data: &[u8], direct: &mut bool) -> std::io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match (&*file).write(&data[done..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if *direct && e.raw_os_error() == Some(libc::EINVAL) => {
                set_direct(file, false)?;
                *direct = false;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A full buffer for the writer thread: the file (a descriptor of its own
/// on the same open file, sharing its offset and flags), the buffer, and
/// whether the file is open for direct I/O.
type Job = (fs::File, Aligned, bool);
/// The buffer back, with the write's result and the flag after it.
type Back = (Aligned, std::io::Result<()>, bool);

/// A thread's writer thread, started with its first full buffer; it ends
/// when the thread that started it does (its channel closes).
struct Writer {
    jobs: mpsc::SyncSender<Job>,
    back: mpsc::Receiver<Back>,
}

thread_local! {
    static WRITER: RefCell<Option<Writer>> = const { RefCell::new(None) };
}

fn writer_gone() -> std::io::Error {
    std::io::Error::other("the file's writer thread stopped")
}

/// Hand `job` to this thread's writer thread, starting it if need be.
fn send(job: Job) -> std::io::Result<()> {
    WRITER.with(|w| {
        let mut w = w.borrow_mut();
        if w.is_none() {
            let (jobs, rx) = mpsc::sync_channel::<Job>(1);
            let (tx, back) = mpsc::channel::<Back>();
            std::thread::Builder::new().name("pileup-writer".into()).spawn(move || {
                for (file, buf, mut direct) in rx {
                    let r = write_all(&file, buf.bytes(SIZE), &mut direct);
                    if tx.send((buf, r, direct)).is_err() {
                        break;
                    }
                }
            })?;
            *w = Some(Writer { jobs, back });
        }
        let sent = w.as_ref().expect("just set").jobs.send(job);
        if sent.is_err() {
            // Gone (it cannot be, short of a panic): the next file starts
            // another.
            *w = None;
        }
        sent.map_err(|_| writer_gone())
    })
}

/// The buffer this thread's writer thread was given last, once written.
fn receive() -> std::io::Result<Back> {
    WRITER.with(|w| {
        let mut w = w.borrow_mut();
        let back = w.as_ref().ok_or_else(writer_gone)?.back.recv();
        if back.is_err() {
            *w = None;
        }
        back.map_err(|_| writer_gone())
    })
}

/// A file open for direct I/O, written through a buffer. One at a time
/// on a thread: the thread's writer thread answers in order, for
/// whichever file gave it a buffer.
pub(crate) struct Direct<'a> {
    file: &'a fs::File,
    cur: Aligned,
    len: usize,
    /// A full buffer is with the writer thread.
    in_flight: bool,
    direct: bool,
    /// A write failed: the file is not whole, and nothing more is taken.
    failed: bool,
}

impl<'a> Direct<'a> {
    /// `direct`: whether `file` is open for direct I/O.
    pub(crate) fn new(file: &'a fs::File, direct: bool) -> Direct<'a> {
        Direct { file, cur: Aligned::take(), len: 0, in_flight: false, direct, failed: false }
    }

    /// Wait for the buffer with the writer thread: written, it is back.
    fn wait(&mut self) -> std::io::Result<Option<Aligned>> {
        if !std::mem::take(&mut self.in_flight) {
            return Ok(None);
        }
        let (buf, r, direct) = receive()?;
        self.direct = direct;
        match r {
            Ok(()) => Ok(Some(buf)),
            Err(e) => {
                buf.give_back();
                Err(e)
            }
        }
    }

    /// Hand the full buffer to the writer thread and go on in another.
    fn hand_over(&mut self) -> std::io::Result<()> {
        let file = self.file.try_clone()?;
        let next = self.wait()?.unwrap_or_else(Aligned::take);
        let full = std::mem::replace(&mut self.cur, next);
        self.len = 0;
        send((file, full, self.direct))?;
        self.in_flight = true;
        Ok(())
    }

    fn refused() -> std::io::Error {
        std::io::Error::other("an earlier write to this file failed")
    }

    /// Every full buffer written: what is left, for [`Tail::write`].
    pub(crate) fn finish(mut self) -> std::io::Result<Tail> {
        if self.failed {
            return Err(Self::refused());
        }
        if let Some(b) = self.wait()? {
            b.give_back();
        }
        Ok(Tail { buf: Aligned::take_from(&mut self.cur), len: self.len, direct: self.direct })
    }
}

impl Drop for Direct<'_> {
    fn drop(&mut self) {
        // A buffer still with the writer comes back before the file goes.
        if let Ok(Some(b)) = self.wait() {
            b.give_back();
        }
        if !self.cur.buf.is_empty() {
            Aligned::take_from(&mut self.cur).give_back();
        }
    }
}

impl Write for Direct<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.failed {
            return Err(Self::refused());
        }
        if self.len == SIZE {
            if let Err(e) = self.hand_over() {
                self.failed = true;
                return Err(e);
            }
        }
        let (n, len) = (b.len().min(SIZE - self.len), self.len);
        self.cur.area()[len..len + n].copy_from_slice(&b[..n]);
        self.len += n;
        Ok(n)
    }

    /// Nothing: the buffer reaches the file when full, and at the file's
    /// sync.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A direct file's last bytes, not yet written.
pub(crate) struct Tail {
    buf: Aligned,
    len: usize,
    direct: bool,
}

impl Tail {
    /// Write them: whole blocks directly, the last partial one through the
    /// cache.
    pub(crate) fn write(self, file: &fs::File) -> std::io::Result<()> {
        let mut direct = self.direct;
        let whole = self.len / BLOCK * BLOCK;
        let mut r = write_all(file, self.buf.bytes(whole), &mut direct);
        if r.is_ok() && self.len > whole {
            if direct {
                r = set_direct(file, false);
            }
            if r.is_ok() {
                r = write_all(file, &self.buf.bytes(self.len)[whole..], &mut false);
            }
        }
        self.buf.give_back();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_refused_as_direct_goes_through_the_cache() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let f = fs::OpenOptions::new().write(true).create(true).truncate(true).open(&p).unwrap();
        let mut direct = set_direct(&f, true).is_ok();
        // Two whole blocks, then a partial one: a direct write of a partial
        // block is refused on most filesystems (EINVAL), and it and what
        // follows are then written through the cache. Whatever the
        // filesystem does, every byte is in the file, in order.
        write_all(&f, &[b'a'; 8192], &mut direct).unwrap();
        write_all(&f, b"not a whole block", &mut direct).unwrap();
        let mut w = Direct::new(&f, direct);
        w.write_all(&[b'x'; SIZE + 5000]).unwrap();
        w.finish().unwrap().write(&f).unwrap();
        let want: Vec<u8> = [&[b'a'; 8192][..], b"not a whole block", &[b'x'; SIZE + 5000]].concat();
        assert!(fs::read(&p).unwrap() == want);
    }

    #[test]
    fn after_a_failed_write_every_write_and_the_finish_fail() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        fs::write(&p, b"").unwrap();
        // Open for reading only: every write of the writer thread fails.
        let f = fs::File::open(&p).unwrap();
        let mut w = Direct::new(&f, false);
        let block = vec![b'z'; SIZE];
        let mut errors = vec![];
        for _ in 0..4 {
            if let Err(e) = w.write_all(&block) {
                errors.push(e);
            }
        }
        // The first buffer goes to the writer thread; its failure comes
        // back with the next, as the system's own error.
        assert_eq!(errors[0].raw_os_error(), Some(libc::EBADF), "{errors:?}");
        assert!(errors.len() >= 2, "{errors:?}");
        assert!(w.finish().is_err());
        assert_eq!(fs::metadata(&p).unwrap().len(), 0);
    }

    #[test]
    fn a_file_dropped_unfinished_waits_for_its_buffer_and_the_next_one_is_whole() {
        let d = tempfile::tempdir().unwrap();
        let open = |name: &str| {
            let f = fs::OpenOptions::new().write(true).create(true).truncate(true).open(d.path().join(name)).unwrap();
            let direct = set_direct(&f, true).is_ok();
            (f, direct)
        };
        let (f, direct) = open("dropped");
        let mut w = Direct::new(&f, direct);
        w.write_all(&vec![b'd'; 2 * SIZE + 10]).unwrap();
        drop(w);
        // The same thread's writer thread serves the next file.
        let (g, direct) = open("next");
        let data: Vec<u8> = (0..3 * SIZE + 123).map(|i| (i % 251) as u8).collect();
        let mut w = Direct::new(&g, direct);
        w.write_all(&data).unwrap();
        w.finish().unwrap().write(&g).unwrap();
        assert!(fs::read(d.path().join("next")).unwrap() == data);
    }
}
