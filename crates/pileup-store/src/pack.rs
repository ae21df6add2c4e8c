//! A capture directory as one `.tar.zst` archive, and back.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{io, Result, StoreError};

/// Counts and hashes what passes through to the file.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Pack `dir` (a capture directory: regular files, one level of
/// subdirectories at most) into `out` (0600, written under a temporary
/// name, synced and renamed, as every private file pileup writes): its
/// SHA-256 and size.
pub fn pack(dir: &Path, out: &Path) -> Result<(String, u64)> {
    let mut digest = (String::new(), 0);
    pileup_files::write_private(out, |w| -> Result<()> {
        let hashing = Hashing { inner: w, hash: Sha256::new(), bytes: 0 };
        let zst = zstd::Encoder::new(hashing, 3).map_err(io(out))?;
        let mut tar = tar::Builder::new(zst);
        tar.follow_symlinks(false);
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "capture".into());
        // Entries in name order under the capture's own directory name.
        let mut stack = vec![(dir.to_path_buf(), name)];
        while let Some((d, at)) = stack.pop() {
            let mut entries: Vec<_> =
                std::fs::read_dir(&d).map_err(io(&d))?.collect::<std::io::Result<Vec<_>>>().map_err(io(&d))?;
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let p = e.path();
                let rel = format!("{at}/{}", e.file_name().to_string_lossy());
                let t = e.file_type().map_err(io(&p))?;
                if t.is_dir() {
                    stack.push((p, rel));
                } else if t.is_file() {
                    tar.append_path_with_name(&p, &rel).map_err(io(&p))?;
                }
            }
        }
        let mut hashing = tar.into_inner().and_then(|z| z.finish()).map_err(io(out))?;
        hashing.flush().map_err(io(out))?;
        digest = (hex(&hashing.hash.finalize()), hashing.bytes);
        Ok(())
    })?;
    Ok(digest)
}

/// The SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The SHA-256 of a file.
pub fn sha256_of(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Unpack an archive into `dest` after checking it against `sha256` (when
/// known): the capture directory it held.
pub fn unpack(archive: &Path, sha256: Option<&str>, dest: &Path) -> Result<std::path::PathBuf> {
    if let Some(want) = sha256 {
        if sha256_of(archive)? != want {
            return Err(StoreError::Checksum(archive.display().to_string()));
        }
    }
    let not_capture = || StoreError::NotACapture(archive.display().to_string());
    let f = File::open(archive).map_err(io(archive))?;
    let zst = zstd::Decoder::new(f).map_err(|_| not_capture())?;
    let mut tar = tar::Archive::new(zst);
    pileup_files::create_private_dir(dest)?;
    let mut top: Option<String> = None;
    for entry in tar.entries().map_err(|_| not_capture())? {
        let mut entry = entry.map_err(|_| not_capture())?;
        let path = entry.path().map_err(|_| not_capture())?.into_owned();
        let first = path.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned());
        if top.is_none() {
            top = first.clone();
        }
        if first != top {
            return Err(not_capture());
        }
        // unpack_in refuses paths that leave `dest`.
        if !entry.unpack_in(dest).map_err(io(dest))? {
            return Err(not_capture());
        }
    }
    let dir = dest.join(top.ok_or_else(not_capture)?);
    if !dir.join("evidence.json").exists() {
        return Err(not_capture());
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_round_trips_and_a_damaged_archive_is_named() {
        let t = tempfile::tempdir().unwrap();
        let cap = t.path().join("20261128-050000-flushing");
        std::fs::create_dir_all(cap.join("stacks")).unwrap();
        std::fs::write(cap.join("evidence.json"), "{\"verdict\": \"x\"}").unwrap();
        std::fs::write(cap.join("stacks/a.txt"), vec![7u8; 100_000]).unwrap();
        let out = t.path().join("cap.tar.zst");
        let (sha, size) = pack(&cap, &out).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(size, std::fs::metadata(&out).unwrap().len());
        assert_eq!(sha, sha256_of(&out).unwrap());
        let dir = unpack(&out, Some(&sha), &t.path().join("back")).unwrap();
        assert_eq!(dir, t.path().join("back/20261128-050000-flushing"));
        assert_eq!(std::fs::read(dir.join("stacks/a.txt")).unwrap(), vec![7u8; 100_000]);
        let mut bytes = std::fs::read(&out).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 1;
        std::fs::write(&out, bytes).unwrap();
        let e = unpack(&out, Some(&sha), &t.path().join("again")).unwrap_err().to_string();
        assert!(e.ends_with("does not match the one it was stored with (damaged in the store or on the way)"), "{e}");
        std::fs::write(&out, b"not an archive").unwrap();
        let e = unpack(&out, None, &t.path().join("again")).unwrap_err().to_string();
        assert!(e.ends_with("not a pileup capture archive"), "{e}");
    }
}
