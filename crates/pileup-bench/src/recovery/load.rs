//! The write load a crash interrupts: one table of fixed-width rows,
//! random single-row UPDATEs from a few clients (each dirties a page at
//! random), and the InnoDB figures read while it runs: dirty pages,
//! checkpoint age.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use crate::error::{ExperimentError, Result};
use crate::experiments::common::Rand;
use crate::target::SCHEMA;

/// The table the load writes.
pub(crate) const TABLE: &str = "recovery";

/// Rows of 200-byte padding fit about this many to a 16 KiB page, filled
/// in primary-key order (15/16 full).
pub(crate) const ROWS_PER_PAGE: u64 = 60;

/// Updates per transaction: enough to keep the clients off the commit's
/// own cost, few enough that a crash leaves little to roll back.
const PER_TRANSACTION: u32 = 20;

fn sql_err(what: &str) -> impl Fn(mysql::Error) -> ExperimentError + '_ {
    move |e| ExperimentError::Server(format!("{what}: {}", pileup_conn::error_text(&e)))
}

/// Create and fill the table (`rows` rows), in one statement from the
/// SEQUENCE engine: a million rows take seconds.
pub(crate) fn fill(c: &mut mysql::Conn, rows: u64) -> Result<u64> {
    c.query_drop(format!(
        "CREATE DATABASE IF NOT EXISTS {SCHEMA}; USE {SCHEMA}; DROP TABLE IF EXISTS {TABLE};
         CREATE TABLE {TABLE} (id INT UNSIGNED PRIMARY KEY, v BIGINT NOT NULL, pad CHAR(200) NOT NULL) ENGINE=InnoDB"
    ))
    .map_err(sql_err("creating the table"))?;
    c.query_drop(format!("INSERT INTO {TABLE} SELECT seq, 0, REPEAT('x', 200) FROM seq_1_to_{rows}"))
        .map_err(sql_err("filling the table (the SEQUENCE engine makes its rows)"))?;
    c.query_drop(format!("ANALYZE TABLE {TABLE}")).map_err(sql_err("reading the table's size"))?;
    let pages: Option<u64> = c
        .query_first(format!(
            "SELECT data_length DIV @@innodb_page_size FROM information_schema.tables
             WHERE table_schema = '{SCHEMA}' AND table_name = '{TABLE}'"
        ))
        .map_err(sql_err("reading the table's size"))?;
    Ok(pages.unwrap_or(rows / ROWS_PER_PAGE))
}

/// What InnoDB says about its unwritten work.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Unwritten {
    /// Modified pages not yet written to the data files.
    pub dirty_pages: u64,
    /// Redo written since the last checkpoint (bytes): what recovery reads.
    pub checkpoint_age: u64,
}

pub(crate) fn unwritten(c: &mut mysql::Conn) -> Result<Unwritten> {
    let mut read = |name: &str| {
        pileup_conn::global_status(c, name)
            .map_err(|e| ExperimentError::Server(format!("reading InnoDB's status: {e}")))?
            .ok_or_else(|| {
                ExperimentError::Server(format!("the server reports no {name} (MariaDB 10.5 or later has it)"))
            })
    };
    Ok(Unwritten {
        dirty_pages: read("Innodb_buffer_pool_pages_dirty")?,
        checkpoint_age: read("Innodb_checkpoint_age")?,
    })
}

/// The clients writing: they run until stopped, or until the server goes
/// (a crash ends them; their errors then are expected).
pub(crate) struct Writers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// The first error a client met while not asked to stop.
    pub error: Arc<std::sync::Mutex<Option<String>>>,
}

impl Writers {
    /// Start `clients` connections updating random rows among the first
    /// `hot` (the pages they dirty are those rows' pages).
    pub fn start(spec: &pileup_conn::ConnSpec, clients: u32, hot: u32) -> Result<Writers> {
        let stop = Arc::new(AtomicBool::new(false));
        let error = Arc::new(std::sync::Mutex::new(None));
        let mut threads = vec![];
        for i in 0..clients {
            let mut c = spec.connect().map_err(|e| ExperimentError::Server(pileup_conn::error_text(&e)))?;
            let (stop, error) = (stop.clone(), error.clone());
            threads.push(std::thread::spawn(move || {
                let mut rng = Rand::new(i);
                while !stop.load(Ordering::Relaxed) {
                    let ids: Vec<String> = (0..PER_TRANSACTION).map(|_| rng.upto(hot).to_string()).collect();
                    let batch = format!(
                        "START TRANSACTION; {} COMMIT",
                        ids.iter()
                            .map(|id| format!(
                                "UPDATE {SCHEMA}.{TABLE} SET v = v + 1, pad = RPAD(v, 200, '-') WHERE id = {id};"
                            ))
                            .collect::<String>()
                    );
                    match c.query_drop(&batch) {
                        Ok(()) => {}
                        Err(e) => {
                            let mut first = error.lock().unwrap_or_else(|p| p.into_inner());
                            if first.is_none() && !stop.load(Ordering::Relaxed) {
                                *first = Some(pileup_conn::error_text(&e));
                            }
                            return;
                        }
                    }
                }
            }));
        }
        Ok(Writers { stop, threads, error })
    }

    /// Whether every client has ended (the server is gone, or refused).
    pub fn all_ended(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Stop the clients and wait for them (each ends after its
    /// transaction, or at once when the server is gone).
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Where a fill stops: at least this many dirty pages and this much redo
/// since the last checkpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Goal {
    pub dirty_pages: u64,
    pub checkpoint_age: u64,
}

impl Goal {
    fn met(&self, at: &Unwritten) -> bool {
        at.dirty_pages >= self.dirty_pages && at.checkpoint_age >= self.checkpoint_age
    }
}

/// How a fill ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Filled {
    pub at: Unwritten,
    pub seconds: f64,
    /// The goal was met (else the time ran out: the redo log's checkpoints
    /// kept the pages or the redo below it).
    pub reached: bool,
}

/// Between reads of InnoDB's figures while the load runs.
const POLL: Duration = Duration::from_millis(10);

/// Read InnoDB's figures while the writers run, until the goal or
/// `within`; the figures of the last read.
pub(crate) fn until(
    c: &mut mysql::Conn,
    w: &Writers,
    goal: Goal,
    within: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<Filled> {
    let t0 = Instant::now();
    loop {
        let at = unwritten(c)?;
        let seconds = t0.elapsed().as_secs_f64();
        if goal.met(&at) {
            return Ok(Filled { at, seconds, reached: true });
        }
        if t0.elapsed() >= within || stop() {
            return Ok(Filled { at, seconds, reached: false });
        }
        if w.all_ended() {
            let why = w.error.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(ExperimentError::Server(format!(
                "the write load ended: {}",
                why.unwrap_or_else(|| "its clients stopped".into())
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// Write every dirty page and move the checkpoint up, the writers
/// stopped: flushing turned up ([`pileup_sandbox::flush::flushing`]) until
/// none is left (at most `within`). The figures after.
pub(crate) fn flush_all(c: &mut mysql::Conn, within: Duration) -> Result<Unwritten> {
    pileup_sandbox::flush::flushing(c, |c| {
        let t0 = Instant::now();
        let mut at = unwritten(c);
        while at.as_ref().is_ok_and(|a| a.dirty_pages > 0) && t0.elapsed() < within {
            std::thread::sleep(POLL);
            at = unwritten(c);
        }
        at
    })
    .map_err(sql_err("flushing InnoDB's dirty pages"))?
}
