//! The page warmer (`--warm pages`): keys of integer indexes mapped to
//! their leaf page numbers from the index's upper levels in its file
//! ([`crate::pages`]), handed to InnoDB's buffer pool load
//! ([`crate::load`]) in short lists, so InnoDB reads the pages itself and
//! no index latch is taken. Keys of other indexes go to the SQL readers.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{PrefetchError, Result};
use mysql::prelude::Queryable;
use pileup_replica::schema::Table;

use crate::config::Shared;
use crate::pages::{encode, node_fields, IndexLocation, Tree};
use crate::plan::Key;
use crate::progress::JobDone;

/// A key for the page mapper.
pub struct PageJob {
    table: Arc<Table>,
    key: Key,
    seq: u64,
}

/// Hands keys of mappable indexes to the page warmer.
pub struct PageSender {
    tx: mpsc::SyncSender<PageJob>,
    /// Can index (table, index) be mapped to pages? Keyed by the table's
    /// address, with the table kept so the address is not reused.
    mappable: HashMap<(usize, usize), (Arc<Table>, bool)>,
    /// The mapper has stopped.
    dead: bool,
}

impl PageSender {
    pub fn new(tx: mpsc::SyncSender<PageJob>) -> PageSender {
        PageSender { tx, mappable: HashMap::new(), dead: false }
    }

    /// Hand the key to the page mapper if its index can be mapped; false
    /// if it is for the SQL lookups.
    pub fn take(&mut self, table: &Arc<Table>, k: &Key, seq: u64, sh: &Shared) -> bool {
        if self.dead {
            return false;
        }
        if self.mappable.len() > 10_000 {
            self.mappable.clear();
        }
        let ok = self
            .mappable
            .entry((Arc::as_ptr(table) as usize, k.index))
            .or_insert_with(|| (table.clone(), node_fields(table, k.index).is_some()))
            .1;
        if !ok {
            return false;
        }
        sh.progress.job_queued(seq);
        match self.tx.try_send(PageJob { table: table.clone(), key: k.clone(), seq }) {
            Ok(()) => true,
            Err(mpsc::TrySendError::Full(_)) => {
                sh.progress.job_done(seq);
                sh.counters.keys_dropped_mapper_busy.fetch_add(1, Relaxed);
                true
            }
            // The mapper stopped: the SQL lookups take over.
            Err(mpsc::TrySendError::Disconnected(_)) => {
                sh.progress.job_done(seq);
                self.dead = true;
                false
            }
        }
    }
}

/// The cached upper levels of index `ix` of `t`, if its keys can be mapped
/// to pages; why not is said (once per reason) through `tell`.
/// `Err` when the server is gone (a restart): the index is looked up again
/// once the mapper has reconnected. `Ok(None)`: it cannot be mapped (said
/// through `tell`).
fn open_tree(
    meta: &mut mysql::Conn,
    datadir: &std::path::Path,
    page_size: usize,
    t: &Table,
    ix: usize,
    tell: &mut dyn FnMut(String),
) -> Result<Option<Tree>, ()> {
    let Some(fields) = node_fields(t, ix) else { return Ok(None) };
    let name = &t.indexes[ix].name;
    Ok(match IndexLocation::find(meta, datadir, &t.schema, &t.name, name) {
        Ok(Some(loc)) => match Tree::open(loc, fields, page_size, Duration::from_secs(5)) {
            Ok(tree) => Some(tree),
            Err(e) => {
                tell(format!(
                    "{}.{} index {name}: {}; its keys are not warmed",
                    t.schema,
                    t.name,
                    pileup_conn::error_text(&e)
                ));
                None
            }
        },
        Ok(None) => {
            tell(format!(
                "{}.{} index {name}: not an InnoDB index in a format pileup reads; its keys are not warmed",
                t.schema, t.name
            ));
            None
        }
        Err(_) if meta.ping().is_err() => return Err(()),
        Err(e) => {
            tell(format!(
                "{}.{} index {name}: cannot find it in InnoDB's dictionary ({e}); its keys are not warmed",
                t.schema, t.name
            ));
            None
        }
    })
}

/// The page mapper: keys to leaf page numbers ([`crate::pages`]), handed to
/// InnoDB's buffer pool load ([`crate::load`]) in short lists, a few
/// milliseconds apart. One thread: the trees' caches and the server's one
/// buffer pool file are its own.
pub fn start(spec: &pileup_conn::ConnSpec, sh: &Shared) -> Result<(mpsc::SyncSender<PageJob>, JoinHandle<()>)> {
    let mut meta = spec.connect()?;
    let (datadir, page_size): (String, usize) = meta
        .query_first("SELECT @@datadir, @@innodb_page_size")?
        .ok_or(PrefetchError::Page("the server reports no @@datadir".into()))?;
    let mut loader = crate::load::Loader::start(spec.connect()?, sh.say.clone())?;
    let (tx, rx) = mpsc::sync_channel::<PageJob>(65_536);
    let (sh, spec) = (sh.clone(), spec.clone());
    let h = std::thread::spawn(move || {
        let datadir = std::path::PathBuf::from(datadir);
        // The server went away (restart): when, to reconnect a second later.
        let mut broken: Option<Instant> = None;
        // By table address and index, with the table kept so the address
        // is not reused while its tree is cached.
        let mut trees: HashMap<(usize, usize), (Arc<Table>, Option<Tree>)> = HashMap::new();
        // Pages mapped and not yet listed, each with its job.
        let mut pending: Vec<((u32, u32), JobDone)> = vec![];
        let mut next_load = Instant::now();
        // At most 64 new pages per list, the next list as soon as the
        // server has finished the last (it waits for a list's reads before
        // it ends): the loads keep at most 64 reads in flight, so the
        // applier's own reads do not queue behind long bursts. Measured
        // (bench/prefetch, ROW, 128 MB pool, 2 rounds each, speed-up over
        // the plain applier): 24 pages 1.07× (the warming fell behind), 48
        // 1.34×, 96 1.29×, 190 every 5 ms 1.20× (device read latency 175,
        // 299, 447 and 600 µs). Each load costs two error-log lines.
        let (load_depth, load_every, busy_wait) =
            (64.min(loader.capacity()), Duration::from_millis(1), Duration::from_millis(1));
        let mut told = std::collections::HashSet::new();
        let mut tell = |what: String| {
            if told.len() < 20 && told.insert(what.clone()) {
                (sh.say)(what);
            }
        };
        while !sh.stop.load(Relaxed) {
            if broken.is_some_and(|t| t.elapsed() >= Duration::from_secs(1)) {
                match (spec.connect(), spec.connect()) {
                    (Ok(m), Ok(l)) => {
                        meta = m;
                        loader.reconnect(l);
                        broken = None;
                        // Indexes not found while the server was away: look again.
                        trees.retain(|_, (_, t)| t.is_some());
                    }
                    _ => broken = Some(Instant::now()),
                }
            }
            let first = match rx.recv_timeout(Duration::from_millis(1)) {
                Ok(j) => Some(j),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            for job in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok()).take(256)) {
                // Counted as warmed once its page is asked for.
                let done = JobDone { progress: &sh.progress, seq: job.seq };
                if broken.is_some() {
                    sh.counters.jobs_dropped.fetch_add(1, Relaxed);
                    continue;
                }
                if sh.progress.passed(job.seq) {
                    sh.counters.jobs_stale.fetch_add(1, Relaxed);
                    continue;
                }
                let ix = job.key.index;
                if trees.len() > 10_000 {
                    trees.clear();
                }
                let key = (Arc::as_ptr(&job.table) as usize, ix);
                let (_, tree) = match trees.entry(key) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        match open_tree(&mut meta, &datadir, page_size, &job.table, ix, &mut tell) {
                            Ok(t) => v.insert((job.table.clone(), t)),
                            // The server went away (a restart): reconnect a
                            // second later, dropping the work meanwhile.
                            Err(()) => {
                                tell("the server went away; trying again every second".into());
                                broken = Some(Instant::now());
                                sh.counters.jobs_dropped.fetch_add(1, Relaxed);
                                continue;
                            }
                        }
                    }
                };
                let Some(tree) = tree.as_mut() else {
                    sh.counters.keys_unmapped.fetch_add(1, Relaxed);
                    continue;
                };
                let before = tree.pages_read;
                let leaf = encode(tree.fields(), &job.key.values)
                    .ok_or_else(|| PrefetchError::Page("a key value does not fit its column".into()))
                    .and_then(|k| tree.leaf(&k));
                sh.counters.index_pages_read.fetch_add(tree.pages_read - before, Relaxed);
                match leaf {
                    Ok(page) => {
                        sh.counters.keys_mapped.fetch_add(1, Relaxed);
                        pending.push(((tree.loc.space, page), done));
                    }
                    Err(e) => {
                        sh.counters.keys_unmapped.fetch_add(1, Relaxed);
                        tracing::debug!(error = %format!("{e:#}"), "key not mapped to a page");
                        // A cached page may be stale or freed: read the path again.
                        tree.forget();
                    }
                }
            }
            // A list every few milliseconds (InnoDB logs two lines per load),
            // each with the pages mapped since the last one.
            if !pending.is_empty() && Instant::now() >= next_load {
                // Keys the applier has passed meanwhile need no page.
                pending.retain(|(_, job)| {
                    let stale = sh.progress.passed(job.seq);
                    if stale {
                        sh.counters.jobs_stale.fetch_add(1, Relaxed);
                    }
                    !stale
                });
                match loader.busy() {
                    // The next tick will look again.
                    Ok(true) => {
                        sh.counters.loads_waited.fetch_add(1, Relaxed);
                        next_load = Instant::now() + busy_wait;
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tell(format!(
                            "reading the buffer pool load status failed: {}; trying again every second",
                            pileup_conn::error_text(&e)
                        ));
                        broken = Some(Instant::now());
                        sh.counters.jobs_dropped.fetch_add(pending.len() as u64, Relaxed);
                        pending.clear();
                        continue;
                    }
                }
                let n = pending.len().min(load_depth);
                if n == 0 {
                    continue;
                }
                let pages: Vec<(u32, u32)> = pending[..n].iter().map(|(p, _)| *p).collect();
                match loader.load(&pages) {
                    Ok(new) => {
                        sh.counters.pages_listed.fetch_add(new as u64, Relaxed);
                        sh.counters.page_loads.store(loader.loads, Relaxed);
                    }
                    Err(e) => {
                        tell(format!(
                            "asking InnoDB to load pages failed: {}; trying again every second",
                            pileup_conn::error_text(&e)
                        ));
                        broken = Some(Instant::now());
                    }
                }
                pending.drain(..n);
                next_load = Instant::now() + load_every;
            }
        }
        if let Err(e) = loader.finish() {
            (sh.say)(pileup_conn::error_text(&e));
        }
    });
    Ok((tx, h))
}
