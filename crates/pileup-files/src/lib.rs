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

use anyhow::{bail, Context, Result};

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
/// permission, the fix.
pub fn write_private(path: &Path, f: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    write_with(path, Mode::Private, f)
}

/// [`write_private`] of bytes.
pub fn write_private_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    write_private(path, |w| Ok(w.write_all(bytes)?))
}

/// Write `path` as [`write_private`] does, with the given [`Mode`].
pub fn write_with(path: &Path, mode: Mode, f: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    if fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_file()) {
        let file = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        f(&mut w)?;
        w.flush().with_context(|| format!("cannot write {}", path.display()))?;
        return Ok(());
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        bail!("cannot write {}: directory {} does not exist", path.display(), dir.display());
    }
    let tmp = temporary_name(path)?;
    let res = (|| -> Result<()> {
        let file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        if mode == Mode::KeepExisting {
            let (owner, bits) = match fs::metadata(path) {
                Ok(m) => (Some(m), None),
                Err(_) => (fs::metadata(dir).ok(), Some(0o660)),
            };
            if let Some(m) = owner {
                let _ = std::os::unix::fs::fchown(&file, Some(m.uid()), Some(m.gid()));
                file.set_permissions(fs::Permissions::from_mode(bits.unwrap_or(m.mode() & 0o7777)))?;
            }
        }
        let mut w = std::io::BufWriter::new(file);
        f(&mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        if mode == Mode::Private {
            file.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        Ok(())
    })();
    if let Err(e) = res {
        let _ = fs::remove_file(&tmp);
        let hint = match e.downcast_ref::<std::io::Error>().and_then(|io| io.raw_os_error()) {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => "; the disk is full: free space or write elsewhere",
            Some(libc::EACCES) | Some(libc::EPERM) => "; no permission: choose a writable place",
            _ => "",
        };
        bail!("cannot write {}: {e:#}{hint}", path.display());
    }
    Ok(())
}

/// Create `dir` (and its parents) for private files: 0700.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).with_context(|| format!("creating {}", dir.display()))
}

/// `.NAME.pileup-tmp-PID` beside `path`: hidden, and never the name of a
/// file another process writes.
fn temporary_name(path: &Path) -> Result<PathBuf> {
    let name = path.file_name().with_context(|| format!("{} has no file name", path.display()))?;
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
        // A writer that fails leaves the old file and no temporary behind.
        let err = write_private(&p, |w| {
            w.write_all(b"half")?;
            bail!("the writer failed")
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("cannot write") && format!("{err:#}").contains("the writer failed"));
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "no temporary file left");
    }

    #[test]
    fn keep_existing_keeps_the_mode_and_devices_are_written_through() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("ib_buffer_pool");
        fs::write(&p, "dump").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o660)).unwrap();
        write_with(&p, Mode::KeepExisting, |w| Ok(w.write_all(b"list")?)).unwrap();
        assert_eq!((fs::read_to_string(&p).unwrap().as_str(), mode(&p)), ("list", 0o660));
        write_private_bytes(Path::new("/dev/null"), b"x").unwrap();
        assert!(Path::new("/dev/null").exists());
        let missing = d.path().join("no/such/dir/f");
        assert!(format!("{:#}", write_private_bytes(&missing, b"x").unwrap_err()).contains("does not exist"));
    }

    #[test]
    fn private_dirs_are_0700() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b");
        create_private_dir(&p).unwrap();
        assert_eq!(mode(&p), 0o700);
    }
}
