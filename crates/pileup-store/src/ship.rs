//! The shipper: a thread that packs finished captures (or takes files as
//! they are: a digest's windows) into the queue and uploads the queue
//! oldest first. A store that is down or refuses the
//! credentials never blocks the caller: the capture stays queued on local
//! disk, the failure is reported once per kind, and uploads are tried
//! again after 1, 2, 4 … up to 60 s. Captures queued by an earlier run are
//! picked up at start, a multipart upload where it stopped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::aws::AwsSettings;
use crate::error::{Result, StoreError};
use crate::remote::Remote;
pub use crate::spool::{FileArtifact, Supersedes};
use crate::spool::{Queued, Spool};
use crate::url::StoreUrl;

/// What the shipper did, for the caller to show and count.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "ship", rename_all = "snake_case")]
pub enum ShipEvent {
    /// Packed and waiting for the store (`capture_dir`: the capture
    /// directory, or the name of a file queued as it is).
    Queued { capture_dir: String, key: String, bytes: u64 },
    /// In the store.
    Shipped { capture_dir: String, url: String, unix: f64 },
    /// Not queued (the disk guard, or packing failed): a capture stays on
    /// local disk only, a file is not kept.
    NotQueued { capture_dir: String, error: String },
    /// An upload failed; everything queued waits for the next try.
    Failed { error: String, queued: usize, retry_in_s: u64 },
    /// In the store, but what it supersedes ([`FileArtifact::supersedes`])
    /// may be there still: the store refused to list or delete
    /// (credentials that may write only).
    NotReplaced { capture_dir: String, error: String },
}

#[derive(Debug, Clone)]
pub struct ShipOptions {
    pub url: StoreUrl,
    pub aws: AwsSettings,
    /// Where the queue lives (e.g. DATA_DIR/ship).
    pub spool_dir: PathBuf,
    /// This host's name: the objects' key component and metadata.
    pub host: String,
    /// Keep this much free on the queue's disk.
    pub min_free: u64,
    /// Whether an object found beside a file's [`Supersedes::unless`]
    /// holds the file (then what it supersedes is kept); without it, any
    /// such object does.
    pub holds: Option<Holds>,
}

/// `(store, object, file key)`: whether the object (a digest's compacted
/// hour) holds the file (a window of it), as only its reader can tell.
#[derive(Clone)]
pub struct Holds(pub std::sync::Arc<HoldsFn>);

/// The question [`Holds`] answers.
pub type HoldsFn = dyn Fn(&Remote, &str, &str) -> Result<bool> + Send + Sync;

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Holds(..)")
    }
}

enum Msg {
    Enqueue {
        dir: PathBuf,
        unix: f64,
        class: String,
        verdict: String,
    },
    File(FileArtifact),
    /// Answer (with what is left) once the queue is empty or at the
    /// deadline.
    Drain(Instant, Sender<usize>),
    Stop,
}

pub struct Shipper {
    tx: Sender<Msg>,
    queued: Arc<AtomicUsize>,
}

/// The next wait after a failure: 1 s, doubling, at most 60 s.
pub fn backoff(prev: Duration) -> Duration {
    (prev * 2).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// The shipper thread's state.
struct Worker<F: FnMut(ShipEvent)> {
    o: ShipOptions,
    spool: Spool,
    remote: Remote,
    queued: Arc<AtomicUsize>,
    on: F,
    /// The wait after the last failure (zero after a success).
    wait: Duration,
    next_try: Instant,
    /// A caller waiting for the queue to empty, until a deadline.
    drain: Option<(Instant, Sender<usize>)>,
    /// The queue's directory, locked while this shipper runs.
    _lock: std::fs::File,
}

impl<F: FnMut(ShipEvent)> Worker<F> {
    /// Take a message; false on Stop (or every sender gone).
    fn take(&mut self, m: Msg) -> bool {
        match m {
            Msg::Enqueue { dir, unix, class, verdict } => self.pack(dir, unix, class, verdict),
            Msg::File(f) => self.file(f),
            Msg::Drain(until, reply) => self.drain = Some((until, reply)),
            Msg::Stop => return false,
        }
        if self.wait.is_zero() {
            self.next_try = Instant::now();
        }
        true
    }

    fn pack(&mut self, dir: PathBuf, unix: f64, class: String, verdict: String) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let key = self.o.url.key(&format!("{}/{name}.tar.zst", self.o.host));
        let meta = BTreeMap::from([
            ("host".to_string(), self.o.host.clone()),
            ("class".to_string(), class),
            ("verdict".to_string(), verdict),
        ]);
        let capture_dir = dir.display().to_string();
        match self.spool.enqueue(&dir, key.clone(), unix, meta, self.o.min_free) {
            Ok(q) => {
                self.count();
                (self.on)(ShipEvent::Queued { capture_dir, key, bytes: q.size });
            }
            Err(e) => (self.on)(ShipEvent::NotQueued { capture_dir, error: e.to_string() }),
        }
    }

    fn file(&mut self, f: FileArtifact) {
        let key = self.o.url.key(&f.key);
        let mut meta = f.metadata.clone();
        meta.insert("host".to_string(), self.o.host.clone());
        let name = format!("{}.{}", f.name, f.ext);
        let supersedes = f.supersedes.as_ref().map(|s| crate::spool::Supersedes {
            prefix: self.o.url.key(&s.prefix),
            unless: s.unless.as_ref().map(|u| self.o.url.key(u)),
        });
        match self.spool.enqueue_file(&f, key.clone(), supersedes, meta, self.o.min_free) {
            Ok(q) => {
                self.count();
                (self.on)(ShipEvent::Queued { capture_dir: name, key, bytes: q.size });
            }
            Err(e) => (self.on)(ShipEvent::NotQueued { capture_dir: name, error: e.to_string() }),
        }
    }

    /// The queue's length, from the disk (a file queued again replaces
    /// its earlier version).
    fn count(&self) {
        if let Ok(p) = self.spool.pending() {
            self.queued.store(p.len(), Ordering::Relaxed);
        }
    }

    fn failed(&mut self, error: String) {
        self.wait = backoff(self.wait);
        self.next_try = Instant::now() + self.wait;
        let queued = self.queued.load(Ordering::Relaxed);
        (self.on)(ShipEvent::Failed { error, queued, retry_in_s: self.wait.as_secs() });
    }

    /// Upload what waits, oldest first, until the queue is empty or an
    /// upload fails. False on Stop.
    fn pass(&mut self, rx: &Receiver<Msg>) -> bool {
        let pending = match self.spool.pending() {
            Ok(p) => p,
            Err(e) => {
                self.failed(e.to_string());
                return true;
            }
        };
        self.queued.store(pending.len(), Ordering::Relaxed);
        self.next_try = Instant::now() + Duration::from_secs(3600);
        // The names this pass has yet to upload (the one under way too).
        let mut ahead: std::collections::HashSet<String> = pending.iter().map(|q| q.name.clone()).collect();
        for mut q in pending {
            // Step by step: a stop or a new capture is heard between the
            // parts of a large upload.
            let uploaded = loop {
                match rx.try_recv() {
                    Ok(m) => {
                        // A file queued again replaces its queued version,
                        // which this pass's list holds: list again.
                        let again = matches!(&m, Msg::File(f) if ahead.contains(&f.name));
                        if !self.take(m) {
                            return false;
                        }
                        if again {
                            self.next_try = Instant::now();
                            return true;
                        }
                    }
                    Err(TryRecvError::Disconnected) => return false,
                    Err(TryRecvError::Empty) => {}
                }
                // A caller waiting past its deadline is answered between
                // steps, however long the queue.
                self.answer_drain();
                let step = if q.uploaded {
                    Ok(Some(self.remote.url_of(&q.key)))
                } else {
                    self.remote.upload_step(&self.spool, &mut q)
                };
                match step {
                    // What the file supersedes goes before it leaves the
                    // queue: a failure is tried again, the upload not.
                    Ok(Some(url)) if q.supersedes.is_some() => {
                        if !q.uploaded {
                            q.uploaded = true;
                            if let Err(e) = self.spool.save(&q) {
                                break Err(e);
                            }
                        }
                        break self.supersede(&q).and_then(|_| self.spool.done(&q)).map(|_| url);
                    }
                    Ok(Some(url)) => break self.spool.done(&q).map(|_| url),
                    Ok(None) => continue,
                    Err(e) => break Err(e),
                }
            };
            ahead.remove(&q.name);
            match uploaded {
                Ok(url) => {
                    self.wait = Duration::ZERO;
                    self.count();
                    (self.on)(ShipEvent::Shipped { capture_dir: q.capture_dir.clone(), url, unix: q.unix });
                }
                Err(e) => {
                    self.failed(e.to_string());
                    return true;
                }
            }
        }
        // What came during the uploads waits for the next pass, at once.
        self.count();
        if self.queued.load(Ordering::Relaxed) > 0 && self.wait.is_zero() {
            self.next_try = Instant::now();
        }
        true
    }

    /// Delete the objects a file in the store supersedes. A refusal (the
    /// credentials may write but not list or delete) is told and the file
    /// leaves the queue all the same: it is in the store, and asking again
    /// would be refused again.
    fn supersede(&mut self, q: &Queued) -> Result<()> {
        let Some(s) = &q.supersedes else { return Ok(()) };
        let holds = |object: &str| match &self.o.holds {
            Some(h) => (h.0)(&self.remote, object, &q.key),
            None => Ok(true),
        };
        match self.remote.delete_prefix(&s.prefix, s.unless.as_deref(), &q.key, &holds) {
            Err(e @ StoreError::Denied { .. }) => {
                (self.on)(ShipEvent::NotReplaced { capture_dir: q.capture_dir.clone(), error: e.to_string() });
                Ok(())
            }
            r => r.map(|_| ()),
        }
    }

    /// Answer a caller waiting for the queue to empty, when it has or
    /// its deadline has come: with what is left.
    fn answer_drain(&mut self) {
        let left = self.queued.load(Ordering::Relaxed);
        if let Some((until, _)) = &self.drain {
            if left == 0 || Instant::now() >= *until {
                let (_, reply) = self.drain.take().expect("checked");
                let _ = reply.send(left);
            }
        }
    }

    fn run(mut self, rx: Receiver<Msg>) {
        loop {
            self.answer_drain();
            let wake = self.drain.as_ref().map_or(self.next_try, |d| d.0.min(self.next_try));
            match rx.recv_timeout(wake.saturating_duration_since(Instant::now())) {
                Ok(m) => {
                    if !self.take(m) {
                        return;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
            if Instant::now() >= self.next_try && !self.pass(&rx) {
                return;
            }
        }
    }
}

impl Shipper {
    /// Start shipping to `o.url`; `on` hears every event, on the
    /// shipper's thread.
    pub fn start(o: ShipOptions, on: impl FnMut(ShipEvent) + Send + 'static) -> Result<Shipper> {
        let spool = Spool::open(&o.spool_dir)?;
        let lock = lock(&o.spool_dir)?;
        let remote = Remote::open(&o.url, &o.aws)?;
        let queued = Arc::new(AtomicUsize::new(spool.pending()?.len()));
        let (tx, rx) = channel();
        let spool_dir = o.spool_dir.clone();
        let w = Worker {
            o,
            spool,
            remote,
            queued: queued.clone(),
            on,
            wait: Duration::ZERO,
            next_try: Instant::now(),
            drain: None,
            _lock: lock,
        };
        std::thread::Builder::new()
            .name("pileup-ship".into())
            .spawn(move || w.run(rx))
            .map_err(crate::error::io(&spool_dir))?;
        Ok(Shipper { tx, queued })
    }

    /// Queue a finished capture (packing happens on the shipper's thread).
    pub fn enqueue(&self, dir: PathBuf, unix: f64, class: String, verdict: String) {
        let _ = self.tx.send(Msg::Enqueue { dir, unix, class, verdict });
    }

    /// Queue a file to ship as it is (written to the queue on the
    /// shipper's thread).
    pub fn enqueue_file(&self, f: FileArtifact) {
        let _ = self.tx.send(Msg::File(f));
    }

    /// Wait until everything queued so far is in the store, or `timeout`
    /// has passed (a store that is down is tried on its backoff meanwhile):
    /// how many captures and files are left in the queue.
    pub fn drain(&self, timeout: Duration) -> usize {
        let (reply, answer) = channel();
        if self.tx.send(Msg::Drain(Instant::now() + timeout, reply)).is_err() {
            return self.queued();
        }
        answer.recv().unwrap_or_else(|_| self.queued())
    }

    /// Captures and files waiting for the store.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

impl Drop for Shipper {
    /// The thread ends after the upload in flight, if any; what is left
    /// stays queued on disk for the next run.
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
    }
}

/// The queue's directory, locked (flock, released when the file is closed,
/// by the process's end too): two pileups shipping from one queue would
/// upload and delete each other's files.
fn lock(dir: &std::path::Path) -> Result<std::fs::File> {
    let f = std::fs::File::open(dir).map_err(crate::error::io(dir))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::SpoolBusy(dir.display().to_string())),
        Err(std::fs::TryLockError::Error(e)) => Err(crate::error::io(dir)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_queue_ships_for_one_pileup_at_a_time() {
        let t = tempfile::tempdir().unwrap();
        let first = lock(t.path()).unwrap();
        let e = lock(t.path()).unwrap_err();
        assert!(matches!(e, StoreError::SpoolBusy(_)), "{e}");
        assert!(e.to_string().contains("--spool-dir"), "{e}");
        drop(first);
        lock(t.path()).unwrap();
    }

    #[test]
    fn retries_back_off_to_a_minute() {
        let mut w = Duration::ZERO;
        let mut seen = vec![];
        for _ in 0..9 {
            w = backoff(w);
            seen.push(w.as_secs());
        }
        assert_eq!(seen, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
