//! The load's workers: jobs (a table's creation, its chunks, then what
//! waits for all of them) run on `--threads` connections in loading
//! sessions, in the order given, as far as each job's table allows; one
//! more connection (the lane) takes the light ones ahead (see [`pool`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{mpsc, Arc, Condvar, Mutex};

use pileup_conn::watchdog::Watchdog;
use pileup_conn::ConnSpec;
use pileup_output::plural;

use crate::error::{bail, DumpError, Result};

/// Sets up a worker's connection.
pub type Session = Arc<dyn Fn(&mut mysql::Conn) -> Result<()> + Send + Sync>;

/// Which jobs are light: DDL that waits on the server's file syncs more
/// than it works (a table's creation, its statistics setting given back).
pub type Light = Arc<dyn Fn(&Job) -> bool + Send + Sync>;

/// What keeps work for the end of a load: the tables whose secondary
/// indexes are built after their data (`builds`, one server thread's work
/// each, which the other connections have to fill), and each job's bytes.
/// While such a table's first chunk runs alone, the other connections load
/// other tables beside it only as far as its bytes: what is left waits to
/// run beside its index build at the end instead (see [`pool`]).
#[derive(Default)]
pub struct Hold {
    pub builds: HashSet<usize>,
    pub bytes: HashMap<Job, u64>,
}

impl Hold {
    /// The tables of `builds` keep work for beside their index builds;
    /// `bytes` gives the bytes of a table's chunk (table, chunk).
    pub fn new(builds: HashSet<usize>, jobs: &[Job], bytes: impl Fn(usize, usize) -> u64) -> Hold {
        let bytes = jobs
            .iter()
            .filter_map(|&(i, p)| match p {
                Part::Chunk(k) => Some(((i, p), bytes(i, k))),
                _ => None,
            })
            .collect();
        Hold { builds, bytes }
    }
}

/// Where the workers run: the server, how many connections, the session
/// each connection is set up with, and the watchdog that watches them.
pub struct Workers<'a> {
    pub spec: &'a ConnSpec,
    pub threads: usize,
    pub session: Session,
    pub dog: Option<&'a Arc<Watchdog>>,
    /// One more connection for the light jobs (see [`pool`]).
    pub lane: Option<Light>,
    /// What is kept for beside the index builds (see [`pool`]).
    pub hold: Option<Arc<Hold>>,
}

/// What a job does for its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// Create the table: its chunks wait for it.
    Create,
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
/// connection. A table's [`Part::After`] runs once all its chunks are done,
/// its chunks once its [`Part::Create`] is.
///
/// With `w.hold`, while the first chunk of a table whose indexes are built
/// after its data runs alone, the other connections take other tables'
/// jobs (the smallest first) as long as their bytes, taken together, stay
/// within that chunk's (the first always goes), then wait for it: the
/// tables left load beside its index build at the end, which would
/// otherwise run alone on one server thread while the other connections
/// have nothing to do.
///
/// With `w.lane`, one more connection takes the light jobs: tables'
/// creation ahead of the loading connections, in their order, and the light
/// `After`s as their tables' data is in, so that the loading connections
/// do not wait on those statements' file syncs (on 400 small tables, a
/// table's `CREATE` and its statistics setting given back are 24 of its
/// 108 file syncs). The loading connections take a `Create` that the lane has not
/// reached, and the light `After`s once nothing else is left.
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
    // A lane only when it has work (a resumed load's tables may all exist).
    let light = workers.lane.clone().filter(|l| jobs.iter().any(|j| l(j)));
    let lanes = usize::from(light.is_some());
    let hold = workers.hold.clone();
    let plan = Arc::new((Mutex::new(Plan { light, hold, ..Plan::new(jobs) }), Condvar::new()));
    let f = Arc::new(f);
    let (tx, rx) = mpsc::channel::<Msg<R>>();
    let mut handles = vec![];
    let loaders = workers.threads.max(1);
    for n in 0..loaders + lanes {
        let lane = n == loaders;
        let mut w = workers.spec.connect()?;
        (workers.session)(&mut w)?;
        let (plan, f, tx) = (plan.clone(), f.clone(), tx.clone());
        let (spec, session, dog) = (workers.spec.clone(), workers.session.clone(), workers.dog.cloned());
        handles.push(std::thread::spawn(move || {
            let mut _watched = dog.as_ref().map(|d| d.watch(&w));
            // `None` once every job is handed out, or once a connection
            // could not reconnect (the plan's `gone`).
            while let Some(job) = Plan::next(&plan, lane) {
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
                        plan.0.lock().unwrap().gone = true;
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
    if plan.0.lock().unwrap().gone && !failed.is_empty() {
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
    /// Per table, that chunk's bytes and the bytes of other tables' jobs
    /// taken while it runs (see [`Hold`]).
    first_running: HashMap<usize, (u64, u64)>,
    /// Tables with a chunk done: their chunks run anywhere.
    started: HashSet<usize>,
    /// Tables stopped by a failed job: their jobs are dropped.
    stopped: HashSet<usize>,
    /// Chunks not done yet, per table: its `After` waits for none.
    chunks_left: HashMap<usize, usize>,
    /// Tables whose `Create` is still to run or running: their chunks wait.
    uncreated: HashSet<usize>,
    /// Tables created by a `Create` whose chunks have not started: how far
    /// the lane is ahead of the loading connections.
    created_ahead: HashSet<usize>,
    /// The light jobs, when a lane takes them.
    light: Option<Light>,
    /// What is kept for beside the index builds.
    hold: Option<Arc<Hold>>,
    /// A connection could not reconnect: no job is handed out any more (a
    /// job waited for may never come).
    gone: bool,
}

/// How many tables the lane creates ahead of the loading connections
/// before it turns to light `After`s.
const CREATE_AHEAD: usize = 4;

impl Plan {
    fn new(jobs: Vec<Job>) -> Plan {
        let mut chunks_left = HashMap::new();
        let mut uncreated = HashSet::new();
        for (t, p) in &jobs {
            match p {
                Part::Chunk(_) => *chunks_left.entry(*t).or_insert(0) += 1,
                Part::Create => {
                    uncreated.insert(*t);
                }
                Part::After => {}
            }
        }
        Plan { queue: jobs.into(), chunks_left, uncreated, ..Default::default() }
    }

    fn ready(&self, (t, p): &Job) -> bool {
        match p {
            Part::Create => true,
            Part::Chunk(_) => {
                !self.uncreated.contains(t) && (self.started.contains(t) || !self.first_running.contains_key(t))
            }
            Part::After => self.chunks_left.get(t).copied().unwrap_or(0) == 0,
        }
    }

    /// An `After` the lane takes.
    fn light_after(&self, j: &Job) -> bool {
        j.1 == Part::After && self.light.as_ref().is_some_and(|l| l(j))
    }

    /// The lane's job: a `Create` while fewer than [`CREATE_AHEAD`] tables
    /// wait created, else a light `After` that may run; else it waits.
    fn pick_light(&self) -> Option<usize> {
        let q = &self.queue;
        let create = || q.iter().position(|j| j.1 == Part::Create);
        let after = || q.iter().position(|j| self.light_after(j) && self.ready(j));
        if self.created_ahead.len() < CREATE_AHEAD {
            create().or_else(after)
        } else {
            after()
        }
    }

    /// Which job to run now: an `After` that may run (an index build is
    /// one server thread's work, so it starts as soon as it can); else,
    /// while the first job is a chunk waiting for its table's first chunk,
    /// the last that may run, the smallest table's (the queue is largest
    /// first), so that the larger ones are left to run beside the largest
    /// table's index build at the end, and with a [`Hold`] only as far as
    /// [`Plan::may_fill`] allows; else the first that may run.
    /// With a lane, the loading connections leave it the light `After`s
    /// while other work is left.
    fn pick(&self) -> Option<usize> {
        let q = &self.queue;
        let only_light_left = q.iter().all(|j| self.light_after(j));
        let mine = |j: &Job| self.ready(j) && (only_light_left || !self.light_after(j));
        let after = q.iter().position(|j| j.1 == Part::After && mine(j));
        let head = q.front();
        // The head's table is being created (by the lane: its `Create` is
        // queued ahead of its chunks): it is theirs in a few milliseconds.
        if head.is_some_and(|j| matches!(j.1, Part::Chunk(_)) && self.uncreated.contains(&j.0)) {
            return after;
        }
        after.or_else(|| match self.head_waits_for() {
            Some(t) => q.iter().rposition(mine).filter(|&k| self.may_fill(t, &q[k])),
            None => q.iter().position(mine),
        })
    }

    /// The table whose first chunk the queue's first job, a chunk, waits
    /// for.
    fn head_waits_for(&self) -> Option<usize> {
        self.queue.front().filter(|j| matches!(j.1, Part::Chunk(_)) && !self.ready(j)).map(|j| j.0)
    }

    /// Whether `job` may run beside table `t`'s first chunk (see [`Hold`]).
    fn may_fill(&self, t: usize, job: &Job) -> bool {
        let Some(hold) = self.hold.as_ref().filter(|h| h.builds.contains(&t)) else { return true };
        let (first, filled) = self.first_running.get(&t).copied().unwrap_or_default();
        filled == 0 || filled + hold.bytes.get(job).copied().unwrap_or(0) <= first
    }

    /// The bytes of `job`, for [`Plan::first_running`].
    fn bytes(&self, job: &Job) -> u64 {
        self.hold.as_ref().and_then(|h| h.bytes.get(job).copied()).unwrap_or(0)
    }

    /// The next job that may run now on a loading connection (or on the
    /// lane, `lane`), waiting while the only ones left wait for their
    /// table's chunks; `None` when none is left (for the lane: no `Create`
    /// or light `After`).
    fn next(plan: &(Mutex<Plan>, Condvar), lane: bool) -> Option<Job> {
        let mut p = plan.0.lock().unwrap();
        loop {
            match p.take(lane) {
                Some(Some(job)) => {
                    // A table's first chunk taken: the lane may create one
                    // more ahead.
                    if matches!(job.1, Part::Chunk(_)) {
                        plan.1.notify_all();
                    }
                    return Some(job);
                }
                Some(None) => p = plan.1.wait(p).unwrap(),
                None => return None,
            }
        }
    }

    /// [`Plan::next`] without waiting: `Some(None)` when the job left for
    /// this connection must wait for another's.
    fn take(&mut self, lane: bool) -> Option<Option<Job>> {
        if self.gone {
            return None;
        }
        let stopped = &self.stopped;
        self.queue.retain(|j| !stopped.contains(&j.0));
        let left = match lane {
            true => self.queue.iter().any(|j| j.1 == Part::Create || self.light_after(j)),
            false => !self.queue.is_empty(),
        };
        if !left {
            return None;
        }
        let Some(k) = (if lane { self.pick_light() } else { self.pick() }) else { return Some(None) };
        let waits_for = self.head_waits_for();
        let job = self.queue.remove(k).unwrap();
        let bytes = self.bytes(&job);
        if let Some((_, filled)) =
            waits_for.filter(|t| *t != job.0 && !lane).and_then(|t| self.first_running.get_mut(&t))
        {
            *filled += bytes;
        }
        if matches!(job.1, Part::Chunk(_)) && !self.started.contains(&job.0) {
            self.first_running.insert(job.0, (bytes, 0));
            self.created_ahead.remove(&job.0);
        }
        Some(Some(job))
    }

    fn done(plan: &(Mutex<Plan>, Condvar), (table, part): Job, ok: bool) {
        let mut p = plan.0.lock().unwrap();
        if ok {
            if part == Part::Create {
                p.uncreated.remove(&table);
                if !p.started.contains(&table) && !p.first_running.contains_key(&table) {
                    p.created_ahead.insert(table);
                }
            }
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
        assert_eq!(Plan::next(&plan, false), Some((0, Chunk(0))));
        // Table 0's others wait for its first chunk: the last job that may
        // run goes, the smallest table's.
        assert_eq!(Plan::next(&plan, false), Some((1, Chunk(1))));
        Plan::done(&plan, (0, Chunk(0)), true);
        assert_eq!(Plan::next(&plan, false), Some((0, Chunk(1))));
        // Table 1's first chunk failed: its other one is dropped.
        Plan::done(&plan, (1, Chunk(1)), false);
        assert_eq!(Plan::next(&plan, false), Some((0, Chunk(2))));
        assert_eq!(Plan::next(&plan, false), Some((2, Chunk(0))));
        assert_eq!(Plan::next(&plan, false), None);
    }

    #[test]
    fn beside_a_first_chunk_only_its_bytes_go_when_an_index_build_follows() {
        use Part::{After, Chunk};
        let jobs = vec![(0, Chunk(0)), (0, Chunk(1)), (0, After), (1, Chunk(0)), (2, Chunk(0)), (3, Chunk(0))];
        let held = |builds: &[usize]| {
            let bytes = jobs.iter().map(|&j| (j, if j.0 == 0 { 40 } else { 25 })).collect();
            let hold = Hold { builds: builds.iter().copied().collect(), bytes };
            (Mutex::new(Plan { hold: Some(Arc::new(hold)), ..Plan::new(jobs.clone()) }), Condvar::new())
        };
        // Table 0's index build follows its data: one table of 25 bytes
        // goes beside its first chunk of 40, the second (50 in all) waits
        // for the end.
        let plan = held(&[0]);
        assert_eq!(Plan::next(&plan, false), Some((0, Chunk(0))));
        assert_eq!(Plan::next(&plan, false), Some((3, Chunk(0))));
        assert_eq!(plan.0.lock().unwrap().take(false), Some(None));
        Plan::done(&plan, (3, Chunk(0)), true);
        assert_eq!(plan.0.lock().unwrap().take(false), Some(None), "the first chunk still runs");
        Plan::done(&plan, (0, Chunk(0)), true);
        assert_eq!(Plan::next(&plan, false), Some((0, Chunk(1))));
        assert_eq!(Plan::next(&plan, false), Some((1, Chunk(0))));
        Plan::done(&plan, (0, Chunk(1)), true);
        assert_eq!(Plan::next(&plan, false), Some((0, After)));
        assert_eq!(Plan::next(&plan, false), Some((2, Chunk(0))), "beside the index build");
        // No index build to fill: nothing waits.
        let plan = held(&[]);
        assert_eq!(Plan::next(&plan, false), Some((0, Chunk(0))));
        assert_eq!(Plan::next(&plan, false), Some((3, Chunk(0))));
        assert_eq!(Plan::next(&plan, false), Some((2, Chunk(0))));
        // A first job bigger than the first chunk still goes.
        let plan = held(&[0]);
        plan.0.lock().unwrap().hold = Some(Arc::new(Hold {
            builds: [0].into(),
            bytes: jobs.iter().map(|&j| (j, if j.0 == 0 { 10 } else { 25 })).collect(),
        }));
        assert_eq!(Plan::next(&plan, false), Some((0, Chunk(0))));
        assert_eq!(Plan::next(&plan, false), Some((3, Chunk(0))));
        assert_eq!(plan.0.lock().unwrap().take(false), Some(None));
    }

    #[test]
    fn what_waits_for_a_tables_data_goes_first_once_its_last_chunk_is_done() {
        use Part::{After, Chunk};
        let plan = plan(vec![(0, Chunk(0)), (0, Chunk(1)), (0, After), (1, Chunk(0)), (1, After), (2, Chunk(0))]);
        assert_eq!(Plan::next(&plan, false), Some((0, Chunk(0))));
        Plan::done(&plan, (0, Chunk(0)), true);
        assert_eq!(Plan::next(&plan, false), Some((0, Chunk(1))));
        // Table 0's indexes wait for its second chunk, still loading: the
        // next table in order goes.
        assert_eq!(Plan::next(&plan, false), Some((1, Chunk(0))));
        Plan::done(&plan, (0, Chunk(1)), true);
        assert_eq!(Plan::next(&plan, false), Some((0, After)), "ahead of the chunks queued before it");
        assert_eq!(Plan::next(&plan, false), Some((2, Chunk(0))));
        Plan::done(&plan, (1, Chunk(0)), true);
        assert_eq!(Plan::next(&plan, false), Some((1, After)));
        assert_eq!(Plan::next(&plan, false), None);
        // A failed chunk drops its table's After.
        let plan2 = super::tests::plan(vec![(0, Chunk(0)), (0, After)]);
        assert_eq!(Plan::next(&plan2, false), Some((0, Chunk(0))));
        Plan::done(&plan2, (0, Chunk(0)), false);
        assert_eq!(Plan::next(&plan2, false), None);
    }

    #[test]
    fn the_lane_creates_tables_ahead_and_gives_back_what_builds_no_index() {
        use Part::{After, Chunk, Create};
        let mut jobs = vec![(0, Create), (0, Chunk(0)), (0, Chunk(1)), (0, After)];
        for t in 1..=6 {
            jobs.extend([(t, Create), (t, Chunk(0)), (t, After)]);
        }
        let mut p = Plan::new(jobs);
        // Table 0's After builds indexes: the loading connections' own.
        p.light = Some(Arc::new(|j: &Job| j.1 == Create || (j.1 == After && j.0 != 0)));
        let done = |p: &mut Plan, j: Job| {
            let plan = (Mutex::new(std::mem::take(p)), Condvar::new());
            Plan::done(&plan, j, true);
            *p = plan.0.into_inner().unwrap();
        };
        assert_eq!(p.take(true), Some(Some((0, Create))));
        // A loading connection waits for the table the lane is creating
        // rather than starting on the last table.
        assert_eq!(p.take(false), Some(None));
        done(&mut p, (0, Create));
        assert_eq!(p.take(false), Some(Some((0, Chunk(0)))));
        // The other loads the smallest table meanwhile, creating it itself
        // (the lane has not got there).
        assert_eq!(p.take(false), Some(Some((6, Create))));
        // The lane creates tables in order, four ahead of the loaders, then
        // waits: no light After may run yet.
        for t in 1..=4 {
            assert_eq!(p.take(true), Some(Some((t, Create))));
            done(&mut p, (t, Create));
        }
        assert_eq!(p.take(true), Some(None), "four tables wait created");
        done(&mut p, (6, Create));
        assert_eq!(p.take(false), Some(Some((6, Chunk(0)))));
        done(&mut p, (6, Chunk(0)));
        // Table 6's After is light: the lane's, not a loader's, while
        // other work is left.
        done(&mut p, (0, Chunk(0)));
        assert_eq!(p.take(false), Some(Some((0, Chunk(1)))));
        assert_eq!(p.take(false), Some(Some((1, Chunk(0)))));
        // Three tables wait created: the lane creates the last one, then
        // gives table 6 its statistics back.
        assert_eq!(p.take(true), Some(Some((5, Create))));
        assert_eq!(p.take(true), Some(Some((6, After))));
        done(&mut p, (0, Chunk(1)));
        assert_eq!(p.take(false), Some(Some((0, After))), "the index build goes to a loader");
        done(&mut p, (1, Chunk(0)));
        done(&mut p, (5, Create));
        for t in 2..=5 {
            assert_eq!(p.take(false), Some(Some((t, Chunk(0)))));
            done(&mut p, (t, Chunk(0)));
        }
        // Only light Afters left: the loaders help.
        assert_eq!(p.take(false), Some(Some((1, After))));
        assert_eq!(p.take(true), Some(Some((2, After))));
        for t in 3..=5 {
            assert_eq!(p.take(false), Some(Some((t, After))));
        }
        assert_eq!(p.take(true), None);
        assert_eq!(p.take(false), None);
    }

    #[test]
    fn a_failed_creation_drops_its_table_and_a_lost_server_stops_every_connection() {
        use Part::{After, Chunk, Create};
        let mut p = Plan::new(vec![(0, Create), (0, Chunk(0)), (0, After), (1, Create), (1, Chunk(0)), (1, After)]);
        p.light = Some(Arc::new(|j: &Job| j.1 != Part::Chunk(0)));
        let plan = (Mutex::new(p), Condvar::new());
        assert_eq!(plan.0.lock().unwrap().take(true), Some(Some((0, Create))));
        // A loader waits on the table the lane creates; the creation fails:
        // the table's chunk and After are dropped, the next table goes.
        assert_eq!(plan.0.lock().unwrap().take(false), Some(None));
        Plan::done(&plan, (0, Create), false);
        assert_eq!(Plan::next(&plan, false), Some((1, Create)));
        Plan::done(&plan, (1, Create), true);
        assert_eq!(Plan::next(&plan, false), Some((1, Chunk(0))));
        // The lane waits for table 1's After; the server is lost: every
        // connection is told there is nothing left.
        assert_eq!(plan.0.lock().unwrap().take(true), Some(None));
        plan.0.lock().unwrap().gone = true;
        assert_eq!(Plan::next(&plan, true), None);
        assert_eq!(Plan::next(&plan, false), None);
    }
}
