//! The queue of what to upload, on local disk: for each capture, its
//! archive (`NAME.tar.zst`), for each file shipped as it is (a digest's
//! Parquet window), the file (`NAME.EXT`); and a state file (`NAME.json`:
//! the object's key and metadata, the file's SHA-256 and size, and a
//! multipart upload's id and finished parts, so an upload goes on where it
//! stopped, across restarts too). Files are 0600 in a 0700 directory,
//! written under a temporary name and renamed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file a capture directory gets last, listing the files written
/// before it: a capture without it was cut short. `pileup report`,
/// `pileup captures` and the shipper read it.
pub const COMPLETE: &str = "complete.json";

use crate::error::{io, Result, StoreError};

/// A file shipped as it is, under a key of the caller's.
pub struct FileArtifact {
    /// The file's name in the queue (its stem) and extension.
    pub name: String,
    pub ext: String,
    pub bytes: Vec<u8>,
    /// The object's key under the store URL's prefix.
    pub key: String,
    /// When its data is from (Unix time): the queue's order.
    pub unix: f64,
    /// User metadata stored with the object, beside `host`.
    pub metadata: BTreeMap<String, String>,
    /// What the file replaces in the store once it is there (a digest's
    /// window, the parts an earlier run shipped for it). What is queued
    /// after this file with the same `unix` ships after it.
    pub supersedes: Option<Supersedes>,
}

/// Objects a file replaces: those whose keys start with `prefix`, unless
/// an object beside `unless` (in its directory) starts with it: then
/// none. Keys are under the store URL's prefix.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Supersedes {
    pub prefix: String,
    pub unless: Option<String>,
}

/// One capture or file waiting to be uploaded.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Queued {
    /// The queued file's stem (a capture directory's name).
    pub name: String,
    /// The queued file's extension: `tar.zst` for a capture's archive
    /// (absent in a queue an older pileup wrote: a capture's).
    #[serde(default = "archive_ext")]
    pub ext: String,
    /// The object's key in the bucket.
    pub key: String,
    /// The capture directory it was packed from, or the name of a file
    /// queued as it is.
    pub capture_dir: String,
    /// When the capture began, or the file's data (Unix time): the queue's
    /// order.
    pub unix: f64,
    /// When it was queued (nanoseconds since the epoch): the order of
    /// what has the same `unix` (a window's file before its later parts).
    #[serde(default)]
    pub seq: u64,
    /// What this file replaces once it is in the store
    /// ([`FileArtifact::supersedes`]; keys with the URL's prefix).
    #[serde(default)]
    pub supersedes: Option<Supersedes>,
    /// In the store already: only what it supersedes is left to delete.
    #[serde(default)]
    pub uploaded: bool,
    pub sha256: String,
    pub size: u64,
    /// User metadata stored with the object (host, class, verdict, unix, sha256).
    pub metadata: BTreeMap<String, String>,
    /// A multipart upload under way.
    pub upload: Option<Multipart>,
}

/// A multipart upload's id and the ETags of its parts uploaded so far.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Multipart {
    pub id: String,
    pub part_size: u64,
    pub parts: Vec<String>,
}

pub struct Spool {
    dir: PathBuf,
}

impl Spool {
    /// The queue in `dir` (made 0700 if absent).
    pub fn open(dir: &Path) -> Result<Spool> {
        pileup_files::create_private_dir(dir)?;
        let spool = Spool { dir: dir.to_path_buf() };
        // What is queued from now on goes after what waits, whatever the
        // clock did since it was queued.
        let last = spool.pending()?.iter().map(|q| q.seq).max().unwrap_or(0);
        LAST_SEQ.fetch_max(last, std::sync::atomic::Ordering::Relaxed);
        Ok(spool)
    }

    /// The queued file: a capture's archive, or a file queued as it is.
    pub fn archive(&self, q: &Queued) -> PathBuf {
        self.dir.join(format!("{}.{}", q.name, q.ext))
    }

    fn state(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// Pack `capture_dir` into the queue, unless that would leave less than
    /// `min_free` bytes free on the queue's disk.
    pub fn enqueue(
        &self,
        capture_dir: &Path,
        key: String,
        unix: f64,
        mut metadata: BTreeMap<String, String>,
        min_free: u64,
    ) -> Result<Queued> {
        let name = capture_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| StoreError::NotACapture(capture_dir.display().to_string()))?;
        if !capture_dir.join(COMPLETE).exists() {
            return Err(StoreError::Incomplete(capture_dir.display().to_string()));
        }
        let kept = "the capture stays on local disk";
        self.check_free(dir_size(capture_dir), min_free, kept)?;
        let archive = self.dir.join(format!("{name}.{}", archive_ext()));
        let (sha256, size) = crate::pack::pack(capture_dir, &archive)?;
        metadata.insert("sha256".into(), sha256.clone());
        metadata.insert("unix".into(), format!("{unix:.3}"));
        let q = Queued {
            name,
            ext: archive_ext(),
            key,
            capture_dir: capture_dir.display().to_string(),
            unix,
            seq: now_ns(),
            supersedes: None,
            uploaded: false,
            sha256,
            size,
            metadata,
            upload: None,
        };
        self.save(&q)?;
        Ok(q)
    }

    /// Queue `f` as the file `NAME.EXT` (a digest's window, shipped as it
    /// is) under the bucket's `key`, unless that would leave less than
    /// `min_free` bytes free. A file of the same name still queued is
    /// replaced: it held an earlier version of the same object.
    pub fn enqueue_file(
        &self,
        f: &FileArtifact,
        key: String,
        supersedes: Option<Supersedes>,
        mut metadata: BTreeMap<String, String>,
        min_free: u64,
    ) -> Result<Queued> {
        let (name, ext, bytes, unix) = (&f.name, &f.ext, &f.bytes, f.unix);
        self.check_free(bytes.len() as u64, min_free, "the file is not kept")?;
        let file = self.dir.join(format!("{name}.{ext}"));
        pileup_files::write_private_bytes(&file, bytes)?;
        let sha256 = crate::pack::sha256_hex(bytes);
        metadata.insert("sha256".into(), sha256.clone());
        metadata.insert("unix".into(), format!("{unix:.3}"));
        let q = Queued {
            name: name.to_string(),
            ext: ext.to_string(),
            key,
            capture_dir: format!("{name}.{ext}"),
            unix,
            seq: now_ns(),
            supersedes,
            uploaded: false,
            sha256,
            size: bytes.len() as u64,
            metadata,
            upload: None,
        };
        self.save(&q)?;
        Ok(q)
    }

    /// Refuse to queue `need` bytes when that would leave less than
    /// `min_free` free on the queue's disk (`kept`: what happens to what
    /// was not queued).
    fn check_free(&self, need: u64, min_free: u64, kept: &'static str) -> Result<()> {
        match pileup_files::free_bytes(&self.dir) {
            Some(free) if free < need.saturating_add(min_free) => {
                Err(StoreError::DiskLow { dir: self.dir.display().to_string(), free, need, min_free, kept })
            }
            _ => Ok(()),
        }
    }

    /// Record a capture's state (after each part of a multipart upload).
    pub fn save(&self, q: &Queued) -> Result<()> {
        let text = serde_json::to_vec_pretty(q).expect("plain data");
        Ok(pileup_files::write_private_bytes(&self.state(&q.name), &text)?)
    }

    /// What waits, oldest capture first. A state file without its archive,
    /// or one that does not parse, is left alone and not listed.
    pub fn pending(&self) -> Result<Vec<Queued>> {
        let mut out = vec![];
        for e in std::fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let p = e.map_err(io(&self.dir))?.path();
            if p.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let Ok(text) = std::fs::read(&p) else { continue };
            let Ok(q) = serde_json::from_slice::<Queued>(&text) else { continue };
            if self.archive(&q).exists() {
                out.push(q);
            }
        }
        out.sort_by(|a, b| a.unix.total_cmp(&b.unix).then(a.seq.cmp(&b.seq)).then_with(|| a.name.cmp(&b.name)));
        Ok(out)
    }

    /// The capture is in the store: drop it from the queue.
    pub fn done(&self, q: &Queued) -> Result<()> {
        let a = self.archive(q);
        std::fs::remove_file(&a).map_err(io(&a))?;
        let s = self.state(&q.name);
        std::fs::remove_file(&s).map_err(io(&s))
    }
}

/// The time (nanoseconds since the epoch), at least one more than the
/// last this process asked for: what is queued later has a larger `seq`.
static LAST_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn now_ns() -> u64 {
    use std::sync::atomic::Ordering;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut prev = LAST_SEQ.load(Ordering::Relaxed);
    loop {
        let next = now.max(prev + 1);
        match LAST_SEQ.compare_exchange_weak(prev, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(p) => prev = p,
        }
    }
}

fn archive_ext() -> String {
    "tar.zst".into()
}

fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_survives_a_restart_and_keeps_its_upload_state() {
        let t = tempfile::tempdir().unwrap();
        let cap = t.path().join("20261128-050000-x");
        std::fs::create_dir(&cap).unwrap();
        std::fs::write(cap.join("evidence.json"), "{}").unwrap();
        let spool = Spool::open(&t.path().join("ship")).unwrap();
        let meta = BTreeMap::from([("host".to_string(), "db1".to_string())]);
        // A capture cut short (no completion marker) is not queued.
        let cut = spool.enqueue(&cap, "p/x.tar.zst".into(), 1.5, meta.clone(), 0);
        assert!(matches!(cut, Err(StoreError::Incomplete(_))), "{cut:?}");
        std::fs::write(cap.join(COMPLETE), r#"{"files":["evidence.json"]}"#).unwrap();
        let mut q = spool.enqueue(&cap, "p/db1/20261128-050000-x.tar.zst".into(), 1.5, meta, 0).unwrap();
        assert_eq!(q.metadata["sha256"], q.sha256);
        q.upload = Some(Multipart { id: "u1".into(), part_size: 5 << 20, parts: vec!["e1".into()] });
        spool.save(&q).unwrap();
        let again = Spool::open(&t.path().join("ship")).unwrap().pending().unwrap();
        assert_eq!(again, vec![q.clone()]);
        spool.done(&q).unwrap();
        assert!(spool.pending().unwrap().is_empty());
        let e = spool.enqueue(&cap, "k".into(), 2.0, BTreeMap::new(), u64::MAX / 2).unwrap_err().to_string();
        assert!(e.contains("not queued for the store"), "{e}");
    }

    #[test]
    fn a_window_s_file_ships_before_its_later_parts_whatever_their_names() {
        let t = tempfile::tempdir().unwrap();
        let spool = Spool::open(t.path()).unwrap();
        let file = |name: &str, unix: f64| FileArtifact {
            name: name.into(),
            ext: "parquet".into(),
            bytes: name.as_bytes().to_vec(),
            key: format!("{name}.parquet"),
            unix,
            metadata: BTreeMap::new(),
            supersedes: None,
        };
        // The queue's order is when each was queued, within the same time
        // of data: not the names (a stem sorts before its "-2").
        let parts = Supersedes { prefix: "w-10m-".into(), unless: None };
        for (name, unix, supersedes) in [("w-10m-2", 600.0, None), ("w-10m", 600.0, Some(parts)), ("v-10m", 0.0, None)]
        {
            let f = file(name, unix);
            spool.enqueue_file(&f, f.key.clone(), supersedes, BTreeMap::new(), 0).unwrap();
        }
        let p = spool.pending().unwrap();
        assert_eq!(p.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(), vec!["v-10m", "w-10m-2", "w-10m"]);
        assert_eq!(p[2].supersedes.as_ref().map(|s| s.prefix.as_str()), Some("w-10m-"));
        // Queued again by the next run, whose clock is behind the one that
        // queued what waits: after it all the same.
        let mut ahead = p[2].clone();
        ahead.seq += 1 << 40; // 18 minutes ahead
        spool.save(&ahead).unwrap();
        let spool = Spool::open(t.path()).unwrap();
        let f = file("w-10m-2", 600.0);
        spool.enqueue_file(&f, f.key.clone(), None, BTreeMap::new(), 0).unwrap();
        let p = spool.pending().unwrap();
        assert_eq!(p.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(), vec!["v-10m", "w-10m", "w-10m-2"]);
    }
}
