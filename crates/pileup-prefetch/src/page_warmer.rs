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
    let loader = crate::load::Loader::start(spec.connect()?, sh.say.clone())?;
    let (tx, rx) = mpsc::sync_channel::<PageJob>(65_536);
    let (sh, spec) = (sh.clone(), spec.clone());
    let h = std::thread::spawn(move || {
        // At most 64 new pages per list, the next list as soon as the
        // server has finished the last (it waits for a list's reads before
        // it ends): the loads keep at most 64 reads in flight, so the
        // applier's own reads do not queue behind long bursts. Measured
        // (bench/prefetch, ROW, 128 MB pool, 2 rounds each, speed-up over
        // the plain applier): 24 pages 1.07× (the warming fell behind), 48
        // 1.34×, 96 1.29×, 190 every 5 ms 1.20× (device read latency 175,
        // 299, 447 and 600 µs). Each load costs two error-log lines.
        let load_depth = 64.min(loader.capacity());
        let mut w = Warmer {
            sh: &sh,
            spec,
            meta,
            loader,
            datadir: std::path::PathBuf::from(datadir),
            page_size,
            broken: None,
            trees: HashMap::new(),
            pending: vec![],
            next_load: Instant::now(),
            load_depth,
            told: Default::default(),
        };
        while !sh.stop.load(Relaxed) {
            w.reconnect_when_due();
            let first = match rx.recv_timeout(Duration::from_millis(1)) {
                Ok(j) => Some(j),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            for job in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok()).take(256)) {
                w.map(job);
            }
            w.list();
        }
        if let Err(e) = w.loader.finish() {
            (sh.say)(pileup_conn::error_text(&e));
        }
    });
    Ok((tx, h))
}

/// A list every this often at most…
const LOAD_EVERY: Duration = Duration::from_millis(1);
/// …and while the server is still loading the last, look again this soon.
const BUSY_WAIT: Duration = Duration::from_millis(1);

/// The page warmer's thread: it maps keys to their leaf pages and hands
/// InnoDB lists of them to load.
struct Warmer<'a> {
    sh: &'a Shared,
    spec: pileup_conn::ConnSpec,
    meta: mysql::Conn,
    loader: crate::load::Loader,
    datadir: std::path::PathBuf,
    page_size: usize,
    /// The server went away (restart): when, to reconnect a second later.
    broken: Option<Instant>,
    /// By table address and index, with the table kept so the address is
    /// not reused while its tree is cached.
    trees: HashMap<(usize, usize), (Arc<Table>, Option<Tree>)>,
    /// Pages mapped and not yet listed, each with its job.
    pending: Vec<((u32, u32), JobDone<'a>)>,
    next_load: Instant,
    load_depth: usize,
    /// Messages said once each, at most 20.
    told: std::collections::HashSet<String>,
}

impl<'a> Warmer<'a> {
    fn tell(told: &mut std::collections::HashSet<String>, sh: &Shared, what: String) {
        if told.len() < 20 && told.insert(what.clone()) {
            (sh.say)(what);
        }
    }

    /// A second after the server went away, connect again.
    fn reconnect_when_due(&mut self) {
        if self.broken.is_none_or(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        match (self.spec.connect(), self.spec.connect()) {
            (Ok(m), Ok(l)) => {
                self.meta = m;
                self.loader.reconnect(l);
                self.broken = None;
                // Indexes not found while the server was away: look again.
                self.trees.retain(|_, (_, t)| t.is_some());
            }
            _ => self.broken = Some(Instant::now()),
        }
    }

    /// Map one job's key to its leaf page, kept to be listed (counted as
    /// warmed once its page is asked for).
    fn map(&mut self, job: PageJob) {
        let sh = self.sh;
        let done = JobDone { progress: &sh.progress, seq: job.seq };
        if self.broken.is_some() {
            sh.counters.jobs_dropped.fetch_add(1, Relaxed);
            return;
        }
        if sh.progress.passed(job.seq) {
            sh.counters.jobs_stale.fetch_add(1, Relaxed);
            return;
        }
        let ix = job.key.index;
        if self.trees.len() > 10_000 {
            self.trees.clear();
        }
        let key = (Arc::as_ptr(&job.table) as usize, ix);
        let (_, tree) = match self.trees.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let told = &mut self.told;
                let mut tell = |w: String| Self::tell(told, sh, w);
                match open_tree(&mut self.meta, &self.datadir, self.page_size, &job.table, ix, &mut tell) {
                    Ok(t) => v.insert((job.table.clone(), t)),
                    // The server went away (a restart): reconnect a second
                    // later, dropping the work meanwhile.
                    Err(()) => {
                        tell("the server went away; trying again every second".into());
                        self.broken = Some(Instant::now());
                        sh.counters.jobs_dropped.fetch_add(1, Relaxed);
                        return;
                    }
                }
            }
        };
        let Some(tree) = tree.as_mut() else {
            sh.counters.keys_unmapped.fetch_add(1, Relaxed);
            return;
        };
        let before = tree.pages_read;
        let leaf = encode(tree.fields(), &job.key.values)
            .ok_or_else(|| PrefetchError::Page("a key value does not fit its column".into()))
            .and_then(|k| tree.leaf(&k));
        sh.counters.index_pages_read.fetch_add(tree.pages_read - before, Relaxed);
        match leaf {
            Ok(page) => {
                sh.counters.keys_mapped.fetch_add(1, Relaxed);
                self.pending.push(((tree.loc.space, page), done));
            }
            Err(e) => {
                sh.counters.keys_unmapped.fetch_add(1, Relaxed);
                tracing::debug!(error = %format!("{e:#}"), "key not mapped to a page");
                // A cached page may be stale or freed: read the path again.
                tree.forget();
            }
        }
    }

    /// A list every few milliseconds (InnoDB logs two lines per load), each
    /// with the pages mapped since the last one; keys the applier has
    /// passed meanwhile need no page.
    fn list(&mut self) {
        let sh = self.sh;
        if self.pending.is_empty() || Instant::now() < self.next_load {
            return;
        }
        self.pending.retain(|(_, job)| {
            let stale = sh.progress.passed(job.seq);
            if stale {
                sh.counters.jobs_stale.fetch_add(1, Relaxed);
            }
            !stale
        });
        match self.loader.busy() {
            // The next tick will look again.
            Ok(true) => {
                sh.counters.loads_waited.fetch_add(1, Relaxed);
                self.next_load = Instant::now() + BUSY_WAIT;
                return;
            }
            Ok(false) => {}
            Err(e) => {
                let what = format!(
                    "reading the buffer pool load status failed: {}; trying again every second",
                    pileup_conn::error_text(&e)
                );
                Self::tell(&mut self.told, sh, what);
                self.broken = Some(Instant::now());
                sh.counters.jobs_dropped.fetch_add(self.pending.len() as u64, Relaxed);
                self.pending.clear();
                return;
            }
        }
        let n = self.pending.len().min(self.load_depth);
        if n == 0 {
            return;
        }
        let pages: Vec<(u32, u32)> = self.pending[..n].iter().map(|(p, _)| *p).collect();
        match self.loader.load(&pages) {
            Ok(new) => {
                sh.counters.pages_listed.fetch_add(new as u64, Relaxed);
                sh.counters.page_loads.store(self.loader.loads, Relaxed);
            }
            Err(e) => {
                let what = format!(
                    "asking InnoDB to load pages failed: {}; trying again every second",
                    pileup_conn::error_text(&e)
                );
                Self::tell(&mut self.told, sh, what);
                self.broken = Some(Instant::now());
            }
        }
        self.pending.drain(..n);
        self.next_load = Instant::now() + LOAD_EVERY;
    }
}
