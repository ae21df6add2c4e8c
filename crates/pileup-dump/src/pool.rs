//! The load's workers: jobs (a table's chunks, then what waits for all of
//! them) run on `--threads` connections in loading sessions, in the order
//! given, as far as each job's table allows.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};

use pileup_conn::watchdog::Watchdog;
use pileup_conn::ConnSpec;
use pileup_output::plural;

use crate::error::{bail, DumpError, Result};

/// Sets up a worker's connection.
pub type Session = Arc<dyn Fn(&mut mysql::Conn) -> Result<()> + Send + Sync>;

/// Where the workers run: the server, how many connections, the session
/// each connection is set up with, and the watchdog that watches them.
pub struct Workers<'a> {
    pub spec: &'a ConnSpec,
    pub threads: usize,
    pub session: Session,
    pub dog: Option<&'a Arc<Watchdog>>,
}

/// What a job does for its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// Load (or read back) the table's chunk of this index.
    Chunk(usize),
    /// What waits for every chunk of the table: its secondary indexes and
    /// its statistics.
    After,
}

/// A job: its table's index and its part.
pub type Job = (usize, Part);

/// Jobs that failed, with their errors: their tables (the job's first
/// index) were stopped there, the others went on.
pub type Failed = Vec<(Job, DumpError)>;

/// What the pool tells the caller, on the caller's thread.
pub enum Heard<R> {
    /// A worker took the job.
    Started(Job),
    /// The job is done, with its result.
    Done(Job, R),
    /// The job failed: its table's other jobs are dropped (the error is
    /// among those [`pool`] returns).
    Failed(Job),
}

/// Run `jobs` on `w.threads` connections in `w.session`s, in order;
/// `each` hears every job started and done with its result. A job that
/// fails stops its table (its other jobs are dropped) and the others go
/// on, on a fresh connection; the failures are returned. Only a server
/// that cannot be reached again stops everything (`Err`).
///
/// A table's first chunk runs alone: with unique and foreign-key checks
/// off, InnoDB loads into an empty table in bulk mode under an exclusive
/// table lock, and a second connection loading the same empty table at
/// once waits for that lock or deadlocks with it. Once one chunk of a
/// table is done the table is not empty and its other chunks run on every
/// connection. A table's [`Part::After`] runs once all its chunks are done.
pub fn pool<R: Send + 'static>(
    workers: &Workers,
    jobs: Vec<Job>,
    f: impl Fn(&mut mysql::Conn, &Job) -> Result<R> + Send + Sync + 'static,
    mut each: impl FnMut(Heard<R>),
) -> Result<Failed> {
    enum Msg<R> {
        Started(Job),
        Done(Job, R),
        Failed(Job, DumpError),
    }
    let plan = Arc::new((Mutex::new(Plan::new(jobs)), Condvar::new()));
    let f = Arc::new(f);
    let gone = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Msg<R>>();
    let mut handles = vec![];
    for _ in 0..workers.threads.max(1) {
        let mut w = workers.spec.connect()?;
        (workers.session)(&mut w)?;
        let (plan, f, gone, tx) = (plan.clone(), f.clone(), gone.clone(), tx.clone());
        let (spec, session, dog) = (workers.spec.clone(), workers.session.clone(), workers.dog.cloned());
        handles.push(std::thread::spawn(move || {
            let mut _watched = dog.as_ref().map(|d| d.watch(&w));
            while !gone.load(Ordering::Relaxed) {
                let Some(job) = Plan::next(&plan) else { break };
                let _ = tx.send(Msg::Started(job));
                // A job that panics fails (its table stops) rather than
                // leaving its table marked running, which would keep the
                // other workers waiting for it.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut w, &job)))
                    .unwrap_or_else(|_| Err(DumpError::Failed("an internal error stopped this job".into())));
                Plan::done(&plan, job, r.is_ok());
                let e = match r {
                    Ok(r) => {
                        let _ = tx.send(Msg::Done(job, r));
                        continue;
                    }
                    Err(e) => e,
                };
                let _ = tx.send(Msg::Failed(job, e));
                match spec.connect().map_err(DumpError::from).and_then(|mut c| session(&mut c).map(|_| c)) {
                    Ok(c) => {
                        w = c;
                        _watched = dog.as_ref().map(|d| d.watch(&w));
                    }
                    Err(_) => {
                        gone.store(true, Ordering::Relaxed);
                        plan.1.notify_all();
                    }
                }
            }
        }));
    }
    drop(tx);
    let mut failed = vec![];
    for m in rx {
        match m {
            Msg::Started(job) => each(Heard::Started(job)),
            Msg::Done(job, r) => each(Heard::Done(job, r)),
            Msg::Failed(job, e) => {
                each(Heard::Failed(job));
                failed.push((job, e));
            }
        }
    }
    for h in handles {
        let _ = h.join();
    }
    if gone.load(Ordering::Relaxed) && !failed.is_empty() {
        let (_, e) = failed.remove(0);
        return Err(e.ctx("the server cannot be reached (run the load again with --resume once it answers)"));
    }
    Ok(failed)
}

/// The jobs left, and per table whether its first chunk is running or
/// done and how many of its chunks are still to do.
#[derive(Default)]
struct Plan {
    queue: VecDeque<Job>,
    /// Tables with a chunk running and none done yet: their chunks wait.
    first_running: HashSet<usize>,
    /// Tables with a chunk done: their chunks run anywhere.
    started: HashSet<usize>,
    /// Tables stopped by a failed job: their jobs are dropped.
    stopped: HashSet<usize>,
    /// Chunks not done yet, per table: its `After` waits for none.
    chunks_left: HashMap<usize, usize>,
}

impl Plan {
    fn new(jobs: Vec<Job>) -> Plan {
        let mut chunks_left = HashMap::new();
        for (t, p) in &jobs {
            if matches!(p, Part::Chunk(_)) {
                *chunks_left.entry(*t).or_insert(0) += 1;
            }
        }
        Plan { queue: jobs.into(), chunks_left, ..Default::default() }
    }

    fn ready(&self, (t, p): &Job) -> bool {
        match p {
            Part::Chunk(_) => self.started.contains(t) || !self.first_running.contains(t),
            Part::After => self.chunks_left.get(t).copied().unwrap_or(0) == 0,
        }
    }

    /// Which job to run now: an `After` that may run (an index build is
    /// one server thread's work, so it starts as soon as it can); else,
    /// while the first job is a chunk waiting for its table's first chunk,
    /// the last that may run, the smallest table's (the queue is largest
    /// first), so that the larger ones are left to run beside the largest
    /// table's index build at the end; else the first that may run.
    fn pick(&self) -> Option<usize> {
        let q = &self.queue;
        let head_waits = q.front().is_some_and(|j| matches!(j.1, Part::Chunk(_)) && !self.ready(j));
        q.iter().position(|j| j.1 == Part::After && self.ready(j)).or_else(|| match head_waits {
            true => q.iter().rposition(|j| self.ready(j)),
            false => q.iter().position(|j| self.ready(j)),
        })
    }

    /// The next job that may run now, waiting while the only ones left
    /// wait for their table's chunks; `None` when none is left.
    fn next(plan: &(Mutex<Plan>, Condvar)) -> Option<Job> {
        let mut p = plan.0.lock().unwrap();
        loop {
            let Plan { queue, stopped, .. } = &mut *p;
            queue.retain(|j| !stopped.contains(&j.0));
            if p.queue.is_empty() {
                return None;
            }
            if let Some(k) = p.pick() {
                let job = p.queue.remove(k).unwrap();
                if matches!(job.1, Part::Chunk(_)) && !p.started.contains(&job.0) {
                    p.first_running.insert(job.0);
                }
                return Some(job);
            }
            p = plan.1.wait(p).unwrap();
        }
    }

    fn done(plan: &(Mutex<Plan>, Condvar), (table, part): Job, ok: bool) {
        let mut p = plan.0.lock().unwrap();
        if ok {
            if matches!(part, Part::Chunk(_)) {
                p.first_running.remove(&table);
                p.started.insert(table);
                if let Some(n) = p.chunks_left.get_mut(&table) {
                    *n = n.saturating_sub(1);
                }
            }
        } else {
            p.first_running.remove(&table);
            p.stopped.insert(table);
        }
        plan.1.notify_all();
    }
}

/// One line naming every table that failed and why.
/// `noun`: what failed, singular and plural; `what`: what befell them.
pub fn failures(noun: (&str, &str), what: &str, failed: Failed, name: impl Fn(usize) -> String) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = failed.iter().map(|((i, _), e)| format!("{}: {e:#}", name(*i))).collect();
    bail!("{} {what}; the others are done: {}", plural(list.len(), noun.0, noun.1), list.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(jobs: Vec<Job>) -> (Mutex<Plan>, Condvar) {
        (Mutex::new(Plan::new(jobs)), Condvar::new())
    }

    #[test]
    fn a_tables_first_chunk_runs_alone_and_a_failed_one_drops_its_table() {
        use Part::Chunk;
        let plan = plan(vec![(0, Chunk(0)), (0, Chunk(1)), (1, Chunk(0)), (0, Chunk(2)), (2, Chunk(0)), (1, Chunk(1))]);
        assert_eq!(Plan::next(&plan), Some((0, Chunk(0))));
        // Table 0's others wait for its first chunk: the last job that may
        // run goes, the smallest table's.
        assert_eq!(Plan::next(&plan), Some((1, Chunk(1))));
        Plan::done(&plan, (0, Chunk(0)), true);
        assert_eq!(Plan::next(&plan), Some((0, Chunk(1))));
        // Table 1's first chunk failed: its other one is dropped.
        Plan::done(&plan, (1, Chunk(1)), false);
        assert_eq!(Plan::next(&plan), Some((0, Chunk(2))));
        assert_eq!(Plan::next(&plan), Some((2, Chunk(0))));
        assert_eq!(Plan::next(&plan), None);
    }

    #[test]
    fn what_waits_for_a_tables_data_goes_first_once_its_last_chunk_is_done() {
        use Part::{After, Chunk};
        let plan = plan(vec![(0, Chunk(0)), (0, Chunk(1)), (0, After), (1, Chunk(0)), (1, After), (2, Chunk(0))]);
        assert_eq!(Plan::next(&plan), Some((0, Chunk(0))));
        Plan::done(&plan, (0, Chunk(0)), true);
        assert_eq!(Plan::next(&plan), Some((0, Chunk(1))));
        // Table 0's indexes wait for its second chunk, still loading: the
        // next table in order goes.
        assert_eq!(Plan::next(&plan), Some((1, Chunk(0))));
        Plan::done(&plan, (0, Chunk(1)), true);
        assert_eq!(Plan::next(&plan), Some((0, After)), "ahead of the chunks queued before it");
        assert_eq!(Plan::next(&plan), Some((2, Chunk(0))));
        Plan::done(&plan, (1, Chunk(0)), true);
        assert_eq!(Plan::next(&plan), Some((1, After)));
        assert_eq!(Plan::next(&plan), None);
        // A failed chunk drops its table's After.
        let plan2 = super::tests::plan(vec![(0, Chunk(0)), (0, After)]);
        assert_eq!(Plan::next(&plan2), Some((0, Chunk(0))));
        Plan::done(&plan2, (0, Chunk(0)), false);
        assert_eq!(Plan::next(&plan2), None);
    }
}
