//! The shipper: a thread that packs finished captures into the queue and
//! uploads the queue oldest first. A store that is down or refuses the
//! credentials never blocks the caller: the capture stays queued on local
//! disk, the failure is reported once per kind, and uploads are tried
//! again after 1, 2, 4 … up to 60 s. Captures queued by an earlier run are
//! picked up at start, a multipart upload where it stopped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::aws::AwsSettings;
use crate::error::Result;
use crate::remote::Remote;
use crate::spool::Spool;
use crate::url::StoreUrl;

/// What the shipper did, for the caller to show and count.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "ship", rename_all = "snake_case")]
pub enum ShipEvent {
    /// Packed and waiting for the store.
    Queued { capture_dir: String, key: String, bytes: u64 },
    /// In the store.
    Shipped { capture_dir: String, url: String, unix: f64 },
    /// Not queued (the disk guard, or packing failed): the capture stays
    /// on local disk only.
    NotQueued { capture_dir: String, error: String },
    /// An upload failed; everything queued waits for the next try.
    Failed { error: String, queued: usize, retry_in_s: u64 },
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
}

enum Msg {
    Enqueue { dir: PathBuf, unix: f64, class: String, verdict: String },
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

impl Shipper {
    /// Start shipping to `o.url`; `on` hears every event, on the
    /// shipper's thread.
    pub fn start(o: ShipOptions, mut on: impl FnMut(ShipEvent) + Send + 'static) -> Result<Shipper> {
        let spool = Spool::open(&o.spool_dir)?;
        let remote = Remote::open(&o.url, &o.aws)?;
        let queued = Arc::new(AtomicUsize::new(spool.pending()?.len()));
        let (tx, rx) = channel();
        let q2 = queued.clone();
        let spool_dir = o.spool_dir.clone();
        let self_tx = tx.clone();
        std::thread::Builder::new()
            .name("pileup-ship".into())
            .spawn(move || {
                let mut wait = Duration::ZERO;
                let mut next_try = Instant::now();
                let mut later: Vec<Msg> = vec![];
                loop {
                    let timeout = next_try.saturating_duration_since(Instant::now());
                    match rx.recv_timeout(timeout) {
                        Ok(Msg::Enqueue { dir, unix, class, verdict }) => {
                            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                            let key = o.url.key(&format!("{}/{name}.tar.zst", o.host));
                            let meta = BTreeMap::from([
                                ("host".to_string(), o.host.clone()),
                                ("class".to_string(), class),
                                ("verdict".to_string(), verdict),
                            ]);
                            let capture_dir = dir.display().to_string();
                            match spool.enqueue(&dir, key.clone(), unix, meta, o.min_free) {
                                Ok(q) => {
                                    q2.fetch_add(1, Ordering::Relaxed);
                                    on(ShipEvent::Queued { capture_dir, key, bytes: q.size });
                                }
                                Err(e) => on(ShipEvent::NotQueued { capture_dir, error: e.to_string() }),
                            }
                            if wait.is_zero() {
                                next_try = Instant::now();
                            }
                            continue;
                        }
                        Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                        Err(RecvTimeoutError::Timeout) => {}
                    }
                    let pending = match spool.pending() {
                        Ok(p) => p,
                        Err(e) => {
                            wait = backoff(wait);
                            next_try = Instant::now() + wait;
                            on(ShipEvent::Failed { error: e.to_string(), queued: 0, retry_in_s: wait.as_secs() });
                            continue;
                        }
                    };
                    q2.store(pending.len(), Ordering::Relaxed);
                    next_try = Instant::now() + Duration::from_secs(3600);
                    'queue: for mut q in pending {
                        // Step by step: a stop or a new capture is heard
                        // between the parts of a large upload.
                        let uploaded = loop {
                            match rx.try_recv() {
                                Ok(Msg::Stop) | Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                                Ok(m @ Msg::Enqueue { .. }) => later.push(m),
                                Err(std::sync::mpsc::TryRecvError::Empty) => {}
                            }
                            match remote.upload_step(&spool, &mut q) {
                                Ok(Some(url)) => break spool.done(&q).map(|_| url),
                                Ok(None) => continue,
                                Err(e) => break Err(e),
                            }
                        };
                        match uploaded {
                            Ok(url) => {
                                wait = Duration::ZERO;
                                q2.fetch_sub(1, Ordering::Relaxed);
                                on(ShipEvent::Shipped { capture_dir: q.capture_dir.clone(), url, unix: q.unix });
                            }
                            Err(e) => {
                                wait = backoff(wait);
                                next_try = Instant::now() + wait;
                                on(ShipEvent::Failed {
                                    error: e.to_string(),
                                    queued: q2.load(Ordering::Relaxed),
                                    retry_in_s: wait.as_secs(),
                                });
                                break 'queue;
                            }
                        }
                    }
                    // Captures that came during the uploads, queued now.
                    for m in later.drain(..) {
                        let _ = self_tx.send(m);
                    }
                }
            })
            .map_err(crate::error::io(&spool_dir))?;
        Ok(Shipper { tx, queued })
    }

    /// Queue a finished capture (packing happens on the shipper's thread).
    pub fn enqueue(&self, dir: PathBuf, unix: f64, class: String, verdict: String) {
        let _ = self.tx.send(Msg::Enqueue { dir, unix, class, verdict });
    }

    /// Captures waiting for the store.
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

#[cfg(test)]
mod tests {
    use super::*;

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
