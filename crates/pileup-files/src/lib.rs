//! Files pileup writes hold query text or data: each is created 0600 under
//! a temporary name beside its target, synced, and renamed into place, so
//! no other user can read it and a full disk or a crash never leaves a
//! truncated file under the name asked for. Directories for such files are
//! created 0700.
//!
//! Written here rather than taken from a crate: `tempfile`'s persist does
//! the rename but not the mode and sync policy, and every writer in pileup
//! must get the same errors (a full disk, no permission) in the same words.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

mod direct;
use direct::{set_direct, Direct, Tail};

/// Why a file could not be written, naming it and, for a full disk or a
/// refused permission, the fix.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot write {}: directory {} does not exist", path.display(), dir.display())]
    NoDirectory { path: PathBuf, dir: PathBuf },
    #[error("cannot write {}: {source}{}", path.display(), hint(source))]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot write {}: it has no file name", .0.display())]
    NoFileName(PathBuf),
    #[error("creating {}: {source}{}", path.display(), hint(source))]
    CreateDir { path: PathBuf, source: std::io::Error },
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => "; the disk is full: free space or write elsewhere",
        Some(libc::EACCES) | Some(libc::EPERM) => "; no permission: choose a writable place",
        _ => "",
    }
}

/// The writer handed to a caller: it remembers the first I/O error of a
/// write (what follows it may only say that one failed), so a writer that
/// fails because the disk is full is reported as that file's error (with
/// the fix) whatever error type the caller uses.
struct Recording<'a> {
    inner: &'a mut dyn Write,
    failed: Option<(std::io::ErrorKind, Option<i32>)>,
}

impl Recording<'_> {
    fn note<T>(&mut self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let (Err(e), None) = (&r, self.failed) {
            self.failed = Some((e.kind(), e.raw_os_error()));
        }
        r
    }

    /// The I/O error a write met, if one did.
    fn io_error(&self) -> Option<std::io::Error> {
        self.failed.map(|(kind, os)| os.map_or_else(|| std::io::Error::from(kind), std::io::Error::from_raw_os_error))
    }
}

impl Write for Recording<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let r = self.inner.write(b);
        self.note(r)
    }
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        let r = self.inner.write_all(b);
        self.note(r)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.note(r)
    }
}

/// Run the caller's writer `f` on `w`: its own error passes through, but
/// one caused by a failed write is the file's [`FileError`].
fn run<E: From<FileError>>(
    path: &Path,
    w: &mut dyn Write,
    f: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<(), E> {
    let mut rec = Recording { inner: w, failed: None };
    match f(&mut rec) {
        Ok(()) => Ok(()),
        Err(e) => match rec.io_error() {
            Some(source) => Err(FileError::Write { path: path.to_path_buf(), source }.into()),
            None => Err(e),
        },
    }
}

/// Who may read the file written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 0600: the user pileup runs as.
    Private,
    /// The owner and mode of the file being replaced (a server's own file,
    /// which the server must still be able to read and replace); when there
    /// is none, the directory's owner, 0660. Not synced: such a file is
    /// rewritten every few milliseconds and is whole after a crash either
    /// way (the rename is atomic), only perhaps older.
    KeepExisting,
}

/// Write `path` through `f`: 0600, under a temporary name, synced, renamed
/// into place. A path that is not a regular file (`/dev/null`, a FIFO, a
/// symlink) is written through instead: renaming over it would replace
/// the node itself. Errors name the file and, for a full disk or a refused
/// permission, the fix ([`FileError`]); an error of `f`'s own (not of a
/// write) passes through as it is.
pub fn write_private<E: From<FileError>>(
    path: &Path,
    f: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<(), E> {
    write_with(path, Mode::Private, f)
}

/// [`write_private`] of bytes.
pub fn write_private_bytes(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    write_private(path, |w| w.write_all(bytes).map_err(|source| FileError::Write { path: path.into(), source }))
}

/// Write `path` as [`write_private`] does, with the given [`Mode`].
pub fn write_with<E: From<FileError>>(
    path: &Path,
    mode: Mode,
    f: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<(), E> {
    Ok(write_staged(path, mode, false, f)?.finish()?)
}

/// Write `path` as [`write_private`] does, but leave the sync and the
/// rename to [`Staged::finish`], which may run on another thread: a writer
/// that holds something costly (a dump's connection in its snapshot) goes
/// on to its next file while this one reaches the device.
pub fn write_private_staged<E: From<FileError>>(
    path: &Path,
    f: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<Staged, E> {
    write_staged(path, Mode::Private, false, f)
}

/// [`write_private_staged`] with the data handed to the device by direct
/// I/O (`O_DIRECT`, a megabyte at a time) rather than copied into the
/// kernel's page cache: a dump's files are written once and not read
/// again soon, and the copy into the cache was a quarter of a plain dump's
/// own CPU (it also pushes out what the host caches for the server). The
/// writer does not wait for the device: each full megabyte is written by a
/// thread of its own meanwhile, and the last one by [`Staged::finish`]. A
/// filesystem that refuses direct I/O is written through the cache; the
/// file's last partial block always is.
pub fn write_private_staged_direct<E: From<FileError>>(
    path: &Path,
    f: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<Staged, E> {
    write_staged(path, Mode::Private, true, f)
}

/// A file written under its temporary name, not yet synced nor renamed.
/// Dropped without [`Staged::finish`], its temporary file is removed, so the
/// name asked for never holds a file that was not synced.
#[must_use = "a staged file is only under its name once finished"]
pub struct Staged {
    /// None for a path written through (not a regular file).
    pending: Option<Pending>,
}

struct Pending {
    file: fs::File,
    tmp: PathBuf,
    path: PathBuf,
    sync: bool,
    /// A direct file's last bytes, written before its sync.
    tail: Option<Tail>,
}

impl Staged {
    /// Sync the file (a private one) and rename it into place.
    pub fn finish(mut self) -> Result<(), FileError> {
        let Some(mut p) = self.pending.take() else { return Ok(()) };
        let failed = |source| FileError::Write { path: p.path.clone(), source };
        let res = (|| {
            if let Some(t) = p.tail.take() {
                t.write(&p.file).map_err(failed)?;
            }
            if p.sync {
                p.file.sync_all().map_err(failed)?;
            }
            fs::rename(&p.tmp, &p.path).map_err(failed)
        })();
        if res.is_err() {
            let _ = fs::remove_file(&p.tmp);
        }
        res
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            let _ = fs::remove_file(&p.tmp);
        }
    }
}

fn write_staged<E: From<FileError>>(
    path: &Path,
    mode: Mode,
    direct: bool,
    f: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<Staged, E> {
    let failed = |source| FileError::Write { path: path.to_path_buf(), source };
    if fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_file()) {
        let file = fs::OpenOptions::new().write(true).truncate(true).open(path).map_err(failed)?;
        let mut w = std::io::BufWriter::new(file);
        run(path, &mut w, f)?;
        w.flush().map_err(failed)?;
        return Ok(Staged { pending: None });
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(FileError::NoDirectory { path: path.into(), dir: dir.into() }.into());
    }
    let tmp = temporary_name(path)?;
    let file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(failed)?;
    // Direct I/O is asked for once the file exists: a filesystem without it
    // refuses the flag (EINVAL), and the file is then written through the
    // cache (an open with the flag may create the file before refusing it).
    let direct = direct && set_direct(&file, true).is_ok();
    // From here the temporary file is removed if anything fails.
    let mut staged = Staged {
        pending: Some(Pending { file, tmp, path: path.to_path_buf(), sync: mode == Mode::Private, tail: None }),
    };
    let p = staged.pending.as_mut().expect("just set");
    if mode == Mode::KeepExisting {
        let (owner, bits) = match fs::metadata(path) {
            Ok(m) => (Some(m), None),
            Err(_) => (fs::metadata(dir).ok(), Some(0o660)),
        };
        if let Some(m) = owner {
            let _ = std::os::unix::fs::fchown(&p.file, Some(m.uid()), Some(m.gid()));
            p.file.set_permissions(fs::Permissions::from_mode(bits.unwrap_or(m.mode() & 0o7777))).map_err(failed)?;
        }
    }
    if direct {
        let mut w = Direct::new(&p.file, true);
        run(path, &mut w, f)?;
        p.tail = Some(w.finish().map_err(failed)?);
        return Ok(staged);
    }
    let mut w = std::io::BufWriter::new(WrittenBack { file: &p.file, written: 0, started: 0 });
    run(path, &mut w, f)?;
    w.flush().map_err(failed)?;
    drop(w);
    Ok(staged)
}

/// A file being written through the page cache whose pages are handed to
/// the device as it grows,
/// every [`WrittenBack::STEP`] bytes, without waiting for them: the kernel
/// would otherwise hold a large file's pages dirty until its closing fsync,
/// which then waits for all of them at once (a dump's 40 MB chunk paid
/// that wait on its connection after every chunk).
struct WrittenBack<'a> {
    file: &'a fs::File,
    written: u64,
    /// Bytes handed to the device so far.
    started: u64,
}

impl WrittenBack<'_> {
    const STEP: u64 = 8 << 20;
}

impl Write for WrittenBack<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.started >= Self::STEP {
            // SAFETY: a plain system call on a descriptor this value owns.
            // Only starts the writing: a failure here leaves the pages to
            // the closing fsync, which reports any error.
            unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    self.started as libc::off64_t,
                    (self.written - self.started) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
            self.started = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Bytes an unprivileged writer may still use on the filesystem holding
/// `path` (the disk guards of captures and of the upload queue).
pub fn free_bytes(path: &Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    Some(s.blocks_available() as u64 * s.fragment_size() as u64)
}

/// Create `dir` (and its parents) for private files: 0700.
pub fn create_private_dir(dir: &Path) -> Result<(), FileError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| FileError::CreateDir { path: dir.into(), source })
}

/// `.NAME.pileup-tmp-PID` beside `path`: hidden, and never the name of a
/// file another process writes.
fn temporary_name(path: &Path) -> Result<PathBuf, FileError> {
    let name = path.file_name().ok_or_else(|| FileError::NoFileName(path.into()))?;
    Ok(path.with_file_name(format!(".{}.pileup-tmp-{}", name.to_string_lossy(), std::process::id())))
}

/// Write a file's dirty pages to disk a step at a time, then fsync it: the
/// device's queue stays short, so other writers' syncs (a server's commits)
/// go through between the steps instead of behind one large flush. The
/// file is only read (a read-only descriptor is enough); it may be another
/// process's file, still growing.
pub fn sync_gently(path: &Path, step: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut at = 0u64;
    while at < len {
        let n = step.min(len - at);
        // SAFETY: a plain system call on a descriptor this function owns.
        let r = unsafe {
            libc::sync_file_range(
                f.as_raw_fd(),
                at as libc::off64_t,
                n as libc::off64_t,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        at += n;
    }
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's own error type.
    #[derive(Debug)]
    struct Failed(String);
    impl From<FileError> for Failed {
        fn from(e: FileError) -> Failed {
            Failed(e.to_string())
        }
    }
    impl std::fmt::Display for Failed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    #[test]
    fn a_write_that_fails_is_the_files_error_with_the_fix_whatever_the_callers_error_type() {
        let big = vec![0u8; 1 << 17];
        let e = write_private(Path::new("/dev/full"), |w| w.write_all(&big).map_err(|e| Failed(e.to_string())))
            .unwrap_err();
        assert!(e.0.starts_with("cannot write /dev/full: No space left on device"), "{e}");
        assert!(e.0.ends_with("; the disk is full: free space or write elsewhere"), "{e}");
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn private_files_are_0600_and_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.txt");
        fs::write(&p, "old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        write_private_bytes(&p, b"new").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(mode(&p), 0o600, "replaced, not written into the readable file");
        // A writer that fails leaves the old file and no temporary behind;
        // its own error passes through.
        let err = write_private(&p, |w| {
            w.write_all(b"half").map_err(|e| Failed(e.to_string()))?;
            Err(Failed("the writer failed".into()))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "the writer failed");
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "no temporary file left");
    }

    #[test]
    fn a_staged_file_is_under_its_name_only_once_finished_and_gone_if_dropped() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("chunk.tsv");
        let ok = |w: &mut dyn Write| w.write_all(&vec![7u8; 9 << 20]).map_err(|e| Failed(e.to_string()));
        let staged = write_private_staged(&p, ok).unwrap();
        assert!(!p.exists(), "not under its name before finish");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "only the temporary file");
        // Finished on another thread, as a dump's collector does.
        std::thread::spawn(move || staged.finish()).join().unwrap().unwrap();
        assert_eq!((fs::metadata(&p).unwrap().len(), mode(&p)), (9 << 20, 0o600));
        let q = d.path().join("dropped.tsv");
        drop(write_private_staged(&q, ok).unwrap());
        assert!(!q.exists());
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "the dropped file's temporary file removed");
    }

    #[test]
    fn keep_existing_keeps_the_mode_and_devices_are_written_through() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("ib_buffer_pool");
        fs::write(&p, "dump").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o660)).unwrap();
        write_with(&p, Mode::KeepExisting, |w| w.write_all(b"list").map_err(|e| Failed(e.to_string()))).unwrap();
        assert_eq!((fs::read_to_string(&p).unwrap().as_str(), mode(&p)), ("list", 0o660));
        write_private_bytes(Path::new("/dev/null"), b"x").unwrap();
        assert!(Path::new("/dev/null").exists());
        let missing = d.path().join("no/such/dir/f");
        assert!(write_private_bytes(&missing, b"x").unwrap_err().to_string().contains("does not exist"));
    }

    #[test]
    fn direct_files_hold_every_byte_written_whatever_the_sizes() {
        let d = tempfile::tempdir().unwrap();
        let shm = tempfile::tempdir_in("/dev/shm").ok();
        let data: Vec<u8> = (0..(3 << 20) + 777).map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for dir in [Some(d.path()), shm.as_ref().map(|s| s.path())].into_iter().flatten() {
            for len in [0, 1, 4095, 4096, 4097, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, data.len()] {
                for piece in [1000, 65536, 3 << 20] {
                    let p = dir.join(format!("chunk-{len}-{piece}.tsv"));
                    let staged = write_private_staged_direct(&p, |w| {
                        data[..len].chunks(piece).try_for_each(|c| w.write_all(c)).map_err(|e| Failed(e.to_string()))
                    })
                    .unwrap();
                    staged.finish().unwrap();
                    assert!(
                        fs::read(&p).unwrap() == data[..len],
                        "{len} bytes in pieces of {piece} in {}",
                        dir.display()
                    );
                    assert_eq!(mode(&p), 0o600);
                }
            }
        }
    }

    #[test]
    fn private_dirs_are_0700() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b");
        create_private_dir(&p).unwrap();
        assert_eq!(mode(&p), 0o700);
    }
}
