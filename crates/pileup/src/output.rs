//! Writing results: to stdout, or to a file created 0600 (results hold query
//! text) through a temporary file renamed into place, so a full disk or a
//! crash never leaves a truncated file under the requested name. Paths that
//! are not regular files (`/dev/null`, FIFOs, symlinks) are written through.

use std::fs;
use std::io::{IsTerminal, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{bail, Context, Result};

pub fn write_output(path: Option<&Path>, binary: bool, f: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    match path {
        None => {
            let stdout = std::io::stdout();
            if binary && stdout.is_terminal() {
                bail!("this format is binary; write it to a file with -o FILE");
            }
            let mut lock = stdout.lock();
            f(&mut lock)?;
            lock.flush()?;
            Ok(())
        }
        // Not a regular file (a device such as /dev/null, a FIFO, a symlink):
        // write through it; renaming over it would replace the node itself.
        Some(p) if fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_file()) => {
            let file = fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(p)
                .with_context(|| format!("cannot write {}", p.display()))?;
            let mut w = std::io::BufWriter::new(file);
            f(&mut w)?;
            w.flush().with_context(|| format!("cannot write {}", p.display()))?;
            Ok(())
        }
        Some(p) => {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !dir.is_dir() {
                bail!("cannot write {}: directory {} does not exist", p.display(), dir.display());
            }
            let name = p.file_name().context("output path has no file name")?.to_string_lossy();
            let tmp = dir.join(format!(".{name}.pileup-tmp-{}", std::process::id()));
            let res = (|| -> Result<()> {
                let file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
                let mut w = std::io::BufWriter::new(file);
                f(&mut w)?;
                let file = w.into_inner().map_err(|e| e.into_error())?;
                file.sync_all()?;
                fs::rename(&tmp, p)?;
                Ok(())
            })();
            if let Err(e) = res {
                let _ = fs::remove_file(&tmp);
                let hint = match e.downcast_ref::<std::io::Error>().and_then(|io| io.raw_os_error()) {
                    Some(libc::ENOSPC) => "; the disk is full: free space or choose another -o path",
                    Some(libc::EACCES) | Some(libc::EPERM) => "; no permission: choose a writable -o path",
                    _ => "",
                };
                bail!("cannot write {}: {e:#}{hint}", p.display());
            }
            Ok(())
        }
    }
}
