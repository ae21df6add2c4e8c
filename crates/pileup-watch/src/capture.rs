//! Capture: when a trigger fires, gather the evidence while the stall lasts
//! and write it to one directory (mode 0700, files 0600: they hold query
//! text): stack samples of every mysqld thread (the stacks engine, no gdb,
//! with SQL annotation and lock owners), the full processlist, InnoDB status,
//! row-lock and metadata-lock waits with who blocks whom, the metric history
//! around the onset, and `report.txt` whose first line is the verdict.
//! If SQL does not answer, the stacks are still captured.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::error::{Result, WatchError};
use mysql::prelude::Queryable;
use pileup_annotate::SqlSource;
use pileup_conn::ConnSpec;
use pileup_engine::{CaptureOptions, LoadedModules, Mode, Sampler, SamplerOptions, ThreadFilter};

use crate::evidence::{CaptureSettings, Evidence, MdlLock, MetadataLocks, OpenTrx, RowLockWait, VARIABLES};
use crate::store::Row;

/// The server's modules (unwind and symbol tables), loaded once and kept
/// between captures: reading them again would delay each capture's first
/// stack by tens of milliseconds, and by hundreds on a host whose cores
/// the stall keeps busy. A capture takes them and gives them back; one
/// that finds them taken (captures overlapping) loads its own.
#[derive(Clone, Default)]
pub struct KeptModules(std::sync::Arc<std::sync::Mutex<Option<LoadedModules>>>);

impl KeptModules {
    /// Kept modules, loaded on a thread of their own for `pid` now.
    pub fn warmed(pid: Option<i32>) -> KeptModules {
        let kept = KeptModules::default();
        if let Some(pid) = pid {
            let k = kept.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                if let Ok(m) = LoadedModules::load(pid, &pileup_engine::default_debug_dirs()) {
                    k.put(m);
                    tracing::debug!("the server's modules loaded in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
                }
            });
        }
        kept
    }

    fn take(&self) -> Option<LoadedModules> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn put(&self, m: LoadedModules) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(m);
    }
}

/// Gather evidence (SQL and stacks, and for a memory trigger the server's
/// growth) for a fired trigger. Once `cancel` is set, sampling stops after
/// the current sample and SQL is skipped.
#[allow(clippy::too_many_arguments)]
pub fn gather(
    trigger: &str,
    unix: f64,
    spec: Option<&ConnSpec>,
    pid: Option<i32>,
    s: &CaptureSettings,
    history: Vec<Row>,
    cancel: Option<&std::sync::atomic::AtomicBool>,
    modules: &KeptModules,
) -> Evidence {
    let memory = pid.filter(|_| is_memory_trigger(trigger));
    std::thread::scope(|sc| {
        // A memory trigger: what grows the server, traced while the stacks
        // are taken (the trace stops no thread; the stacks' stops are
        // microseconds), so the verdict comes no later for it.
        let growth = memory.map(|pid| sc.spawn(move || trace_growth(pid, spec, s, cancel)));
        let mut ev = gather_stacks_and_sql(trigger, unix, spec, pid, s, history, cancel, modules);
        match growth.map(|h| h.join()) {
            Some(Ok(Ok((g, heap)))) => (ev.growth, ev.growth_heap) = (Some(g), heap),
            Some(Ok(Err(e))) => ev.growth_error = Some(e),
            Some(Err(_)) => ev.growth_error = Some("memory growth not traced: the tracer stopped".into()),
            None => {}
        }
        ev
    })
}

/// The stacks, then SQL.
#[allow(clippy::too_many_arguments)]
fn gather_stacks_and_sql(
    trigger: &str,
    unix: f64,
    spec: Option<&ConnSpec>,
    pid: Option<i32>,
    s: &CaptureSettings,
    history: Vec<Row>,
    cancel: Option<&std::sync::atomic::AtomicBool>,
    modules: &KeptModules,
) -> Evidence {
    let mut ev = Evidence { trigger: trigger.to_string(), unix, history, ..Default::default() };
    std::thread::scope(|sc| {
        // The SQL side is read on its own thread while the stacks are taken:
        // at once, while the stall lasts, and again a moment later in a
        // long capture (a stall may end before sampling does).
        let span = s.interval * s.samples.max(1) as u32;
        let reads = spec.map(|sp| sc.spawn(move || read_sql_during(sp, s.own_connection, span, cancel)));
        take_stacks(&mut ev, trigger, spec, pid, s, cancel, modules);
        if let Some(Ok(reads)) = reads.map(|h| h.join()) {
            let mut ours: Vec<u64> = reads.iter().filter_map(|r| r.conn_id).collect();
            ours.push(s.own_connection);
            mark_pileups_own(&mut ev, &ours);
            use_sql_read(&mut ev, reads);
        }
    });
    if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst)) {
        return ev; // dropped: the rest is not needed
    }
    // Idle connections that may hold the lock others queue for: what each
    // last ran, from its memory (each stopped only to read its thread
    // pointer).
    let idle = crate::holder::idle_candidates(&ev);
    if let (Some(pid), false) = (pid, idle.is_empty()) {
        match crate::last_statement::last_statements(pid, &idle, s.max_stop) {
            Ok(found) => ev.last_statements = found.into_iter().collect(),
            Err(e) => ev.last_statements_error = Some(e),
        }
        if let Some(sp) = spec {
            moved_on(sp, &mut ev);
        }
    }
    ev
}

/// An idle row-lock holder whose memory was read after it ran another
/// statement (its transaction ended once the stall's evidence was read)
/// no longer holds the statement the evidence is about: say so rather
/// than name the later one.
fn moved_on(spec: &ConnSpec, ev: &mut Evidence) {
    // The idle holders of row locks: a holder of a global or metadata lock
    // is told from its peers by what each last ran, whenever it ran it.
    let holders: Vec<u64> = crate::evidence::root_blockers(&ev.row_lock_waits).into_iter().map(|r| r.0).collect();
    let ids: Vec<String> = ev.last_statements.keys().filter(|id| holders.contains(id)).map(u64::to_string).collect();
    let (Some(read_at), false) = (ev.processlist_unix, ids.is_empty()) else { return };
    let mut bounded = spec.clone();
    bounded.timeout = bounded.timeout.min(Duration::from_secs(2));
    let Ok(mut c) = bounded.connect() else { return };
    let sql = format!("SELECT ID, TIME_MS FROM information_schema.PROCESSLIST WHERE ID IN ({})", ids.join(", "));
    let Ok(rows) = c.query::<(u64, f64), _>(sql) else { return };
    let now = crate::poll::now_unix();
    for (id, ms) in rows {
        if now - ms / 1000.0 > read_at + 0.05 {
            ev.last_statements.insert(
                id,
                crate::last_statement::LastStatement::Unknown(
                    "it ran another statement after the evidence was read, which its memory now holds".into(),
                ),
            );
        }
    }
}

/// The server's stacks, sampled as the capture's settings say.
fn take_stacks(
    ev: &mut Evidence,
    trigger: &str,
    spec: Option<&ConnSpec>,
    pid: Option<i32>,
    s: &CaptureSettings,
    cancel: Option<&std::sync::atomic::AtomicBool>,
    modules: &KeptModules,
) {
    if let Some(pid) = pid {
        // Annotation must not delay the stacks of a server that hangs: a
        // short connect budget, and none at all when the poll had failed.
        let began = Instant::now();
        let sql = spec
            .filter(|_| trigger != "poll_failed" && !trigger.starts_with("poll_failed "))
            .and_then(|sp| {
                let mut quick = sp.clone();
                quick.timeout = quick.timeout.min(Duration::from_millis(500));
                quick.connect().ok()
            })
            .and_then(|c| SqlSource::new(c).ok());
        let opts = SamplerOptions {
            capture: CaptureOptions {
                mode: Mode::Consistent,
                stack_bytes: 256 * 1024,
                max_stop: s.max_stop,
                ..Default::default()
            },
            filter: ThreadFilter::default(),
            any_process: s.any_process,
            debug_info: false,
            sql_refresh: Duration::ZERO,
            sql_bracket: true,
            keep_samples: pileup_engine::KEEP_SAMPLES,
            debug_dirs: pileup_engine::default_debug_dirs(),
            // Debug files already in the debuginfod cache; nothing fetched
            // before a capture that must not wait.
            debuginfod: Some(pileup_engine::debug_files::DebuginfodOptions::cache_only()),
            debuginfod_wait: true,
        };
        let psi_from = crate::poll::io_pressure_us(pid).map(|us| (Instant::now(), us));
        let connected = began.elapsed();
        let sampler = Sampler::with_modules(pid, opts, sql.map(SqlSource::boxed), modules.take());
        tracing::debug!(
            "capture: SQL connected in {:.0} ms, sampler ready {:.0} ms later",
            connected.as_secs_f64() * 1e3,
            (began.elapsed() - connected).as_secs_f64() * 1e3
        );
        match sampler {
            Ok(mut sampler) => match sampler.run_until(s.samples.max(1), s.interval, None, cancel, |_| {}) {
                // Dropped: its stacks are not wanted, and naming their
                // frames would keep the next stall's capture from starting.
                Ok(()) if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst)) => {
                    modules.put(sampler.into_modules())
                }
                Ok(()) => {
                    let (profile, kept) = sampler.finish_keeping_modules();
                    ev.profile = Some(profile);
                    modules.put(kept);
                }
                Err(e) => {
                    ev.stacks_error = Some(e.to_string());
                    modules.put(sampler.into_modules());
                }
            },
            Err(e) => ev.stacks_error = Some(e.to_string()),
        }
        if let (Some((t0, us0)), Some(us1)) = (psi_from, crate::poll::io_pressure_us(pid)) {
            let dt = t0.elapsed().as_secs_f64();
            // Less than a tenth of a second says little about a disk.
            if dt >= 0.1 {
                ev.io_pressure_pct = Some(crate::derive::io_pressure_pct(us1 - us0, dt));
            }
        }
    }
}

/// One read of the SQL side, `at` seconds into the capture, and the
/// connection it read through.
struct SqlRead {
    at: f64,
    ev: Evidence,
    error: Option<String>,
    conn_id: Option<u64>,
}

/// The server threads that served pileup's own connections while the
/// stacks were taken (the watcher's polls, the evidence's reads) are
/// pileup's work, not the server's: marked so in the stacks, and left out
/// of what the classes count.
fn mark_pileups_own(ev: &mut Evidence, ours: &[u64]) {
    let Some(p) = ev.profile.as_mut() else { return };
    for t in p.samples.iter_mut().flat_map(|s| s.threads.iter_mut()) {
        if let Some(sql) = t.sql.as_mut().filter(|q| q.id != 0 && ours.contains(&q.id)) {
            sql.is_pileup = true;
        }
    }
}

impl SqlRead {
    /// Whether it shows connections waiting: for a row lock, a metadata,
    /// table or global lock, or anything else the processlist names.
    fn shows_waits(&self) -> bool {
        // Replication and the server's own threads wait for their work
        // ("Waiting for master to send event"): not a stall.
        let client = |r: &BTreeMap<String, String>| {
            let command = r.get("command").map(String::as_str).unwrap_or("");
            let user = r.get("user").map(String::as_str).unwrap_or("");
            !(matches!(command, "Daemon" | "Binlog Dump" | "Binlog Dump GTID")
                || command.starts_with("Slave_")
                || command.starts_with("Replica_")
                || matches!(user, "system user" | "event_scheduler"))
        };
        !self.ev.row_lock_waits.is_empty()
            || self
                .ev
                .processlist
                .iter()
                .any(|r| client(r) && r.get("state").is_some_and(|st| st.starts_with("Waiting for")))
    }
}

/// The SQL side read a second into the capture (or when its sampling
/// ends, if sooner: by then the stall has settled, and a client between
/// two statements at its very start is not taken for idle), and, in a
/// capture longer than two seconds, again at three seconds (or at its
/// end), unless the capture is dropped meanwhile. Each query of a read is
/// bounded to 2 s.
fn read_sql_during(
    spec: &ConnSpec,
    own_connection: u64,
    span: Duration,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Vec<SqlRead> {
    let t0 = Instant::now();
    let dropped = || cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst));
    let until = |at: Duration| {
        while t0.elapsed() < at && !dropped() {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut bounded = spec.clone();
    bounded.timeout = bounded.timeout.min(Duration::from_secs(2));
    let read = || {
        let at = t0.elapsed().as_secs_f64();
        let mut ev = Evidence::default();
        let mut conn_id = None;
        let error = gather_sql(&bounded, own_connection, &mut ev, &mut conn_id, &dropped)
            .err()
            .map(|e| pileup_conn::error_text(&e));
        SqlRead { at, ev, error, conn_id }
    };
    let mut reads = vec![];
    for at in [span.min(Duration::from_secs(1)), span.min(Duration::from_secs(3))] {
        if reads.len() == 1 && span <= Duration::from_secs(2) {
            break;
        }
        until(at);
        if dropped() {
            break;
        }
        reads.push(read());
    }
    reads
}

/// The read the evidence is: the first that shows connections waiting
/// (the stall as it was), else the last that answered; and which it was.
fn use_sql_read(ev: &mut Evidence, reads: Vec<SqlRead>) {
    let n = reads.len();
    let pick = reads
        .iter()
        .position(|r| r.error.is_none() && r.shows_waits())
        .map(|i| (i, "the first that showed connections waiting"))
        .or_else(|| reads.iter().rposition(|r| r.error.is_none()).map(|i| (i, "none showed connections waiting")));
    let Some((i, why)) = pick else {
        ev.sql_error = reads.into_iter().rev().find_map(|r| r.error);
        return;
    };
    let r = reads.into_iter().nth(i).expect("picked from these reads");
    ev.sql_read = Some(match n {
        1 => format!("SQL read {:.1} s into the capture", r.at),
        _ => format!("SQL read {:.1} s into the capture (read {} of {n}: {why})", r.at, i + 1),
    });
    let sql = r.ev;
    ev.processlist = sql.processlist;
    ev.processlist_unix = sql.processlist_unix;
    ev.innodb_status = sql.innodb_status;
    ev.row_lock_waits = sql.row_lock_waits;
    ev.trx = sql.trx;
    ev.mdl = sql.mdl;
    ev.variables = sql.variables;
}

/// Whether a trigger watches the server's memory (its resident size or
/// growth, or how near it is to its limit).
pub fn is_memory_trigger(trigger: &str) -> bool {
    ["memory_limit_pct", "mysqld_rss", "memory_limit_bytes"].iter().any(|m| trigger.contains(m))
}

/// Trace the server's memory growth for the capture's memory window,
/// charged to the statements (the processlist by thread) and stacks that
/// grew it, with what the resident heap did meanwhile. An error says why
/// it could not be, in one line.
fn trace_growth(
    pid: i32,
    spec: Option<&ConnSpec>,
    s: &CaptureSettings,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> std::result::Result<(pileup_growth::GrowthTrace, Option<pileup_growth::procmem::HeapIdentity>), String> {
    use pileup_growth::procmem::{heap, HeapIdentity, ProcReader};
    use pileup_growth::{GrowthError, GrowthOptions};
    pileup_growth::preflight().map_err(|e| match e {
        GrowthError::Privileges(m) => {
            format!("tracing memory growth needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (missing: {m})")
        }
        e => format!("memory growth not traced: {e}"),
    })?;
    let mut resolver = pileup_engine::Resolver::new(pid, s.any_process, false, &pileup_engine::default_debug_dirs())
        .map_err(|e| e.to_string())?;
    let mut sql = spec
        .and_then(|sp| {
            let mut quick = sp.clone();
            quick.timeout = quick.timeout.min(Duration::from_millis(500));
            quick.connect().ok()
        })
        .and_then(|c| SqlSource::new(c).ok());
    let o = GrowthOptions { pid, stack_budget: 200, probe_cost: false, top: 10 };
    let class_of: Box<dyn Fn(&str) -> String> = Box::new(pileup_sql::statement_class);
    let window = s.memory_trace;
    // The buffer pool's region is told apart from the heap by its size.
    let pool: u64 =
        sql.as_mut().and_then(|q| q.conn.query_first("SELECT @@innodb_buffer_pool_size").ok().flatten()).unwrap_or(0);
    let mut proc = ProcReader::new(pid);
    let mut reads: Vec<(f64, Option<u64>)> = vec![];
    let mut read = |at: f64, force: bool| {
        if let Some(r) = proc.read(at, pool, None, force) {
            reads.push((at, r.regions.as_ref().map(heap)));
        }
    };
    let started = Instant::now();
    let stop = |t: pileup_growth::Tick<'_, SqlSource>| {
        read(t.elapsed.as_secs_f64(), false);
        t.elapsed < window && !cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
    };
    let g =
        pileup_growth::trace_growth(&o, &mut sql, &mut resolver, class_of, false, stop).map_err(|e| e.to_string())?;
    read(started.elapsed().as_secs_f64(), true);
    Ok((g, HeapIdentity::of(reads)))
}

/// The SQL side's evidence, read through a connection of its own (its id
/// in `conn_id`), stopping between queries once `dropped` says the
/// capture is.
fn gather_sql(
    spec: &ConnSpec,
    own_connection: u64,
    ev: &mut Evidence,
    conn_id: &mut Option<u64>,
    dropped: &dyn Fn() -> bool,
) -> Result<()> {
    let mut c = spec.connect()?;
    *conn_id = Some(u64::from(c.connection_id()));
    // TIME_MS (when a connection's current state began, to the
    // millisecond) and TID are MariaDB's; MySQL has neither.
    let rows: Vec<mysql::Row> = match c.query(
        "SELECT ID, USER, HOST, DB, COMMAND, TIME, TIME_MS, STATE, INFO, TID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() ORDER BY TIME_MS DESC",
    ) {
        Ok(r) => r,
        Err(_) => c.query(
            "SELECT ID, USER, HOST, DB, COMMAND, TIME, STATE, INFO FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() ORDER BY TIME DESC",
        )?,
    };
    ev.processlist_unix = Some(crate::poll::now_unix());
    for r in rows {
        // The watcher's poll connection is pileup's, not the server's work.
        if own_connection != 0 && r.get::<u64, _>(0) == Some(own_connection) {
            continue;
        }
        let mut m = BTreeMap::new();
        for (i, col) in r.columns_ref().iter().enumerate() {
            let v: Option<mysql::Value> = r.get(i);
            let s = match v {
                Some(mysql::Value::NULL) | None => continue,
                Some(mysql::Value::Bytes(b)) => String::from_utf8_lossy(&b).into_owned(),
                Some(o) => o.as_sql(true).trim_matches('\'').to_string(),
            };
            m.insert(col.name_str().to_lowercase(), s);
        }
        ev.processlist.push(m);
    }
    if dropped() {
        return Ok(());
    }
    ev.innodb_status =
        c.query_first::<mysql::Row, _>("SHOW ENGINE INNODB STATUS").ok().flatten().and_then(|r| r.get::<String, _>(2));
    let waits: Vec<(u64, Option<String>, u64, Option<String>, Option<i64>)> = c
        .query(
            "SELECT r.trx_mysql_thread_id, r.trx_query, b.trx_mysql_thread_id, b.trx_query, TIMESTAMPDIFF(SECOND, b.trx_started, NOW()) \
             FROM information_schema.INNODB_LOCK_WAITS w \
             JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
             JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id",
        )
        .unwrap_or_default();
    ev.row_lock_waits = waits
        .into_iter()
        .map(|(w, wq, b, bq, age)| RowLockWait {
            waiting_conn: w,
            waiting_query: wq,
            blocking_conn: b,
            blocking_query: bq,
            blocking_trx_age_s: age,
        })
        .collect();
    if dropped() {
        return Ok(());
    }
    let trx: Vec<(u64, Option<i64>, String, Option<String>, Option<u64>, Option<u64>)> = c
        .query(
            "SELECT trx_mysql_thread_id, TIMESTAMPDIFF(SECOND, trx_started, NOW()), trx_state, trx_query, trx_tables_locked, trx_rows_locked \
             FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id <> CONNECTION_ID() ORDER BY trx_started",
        )
        .unwrap_or_default();
    ev.trx = trx
        .into_iter()
        .filter(|t| t.0 != 0) // background (purge, recovered) transactions
        .map(|(conn, age, state, query, tl, rl)| OpenTrx {
            conn,
            age_s: age.unwrap_or(0),
            state,
            query,
            tables_locked: tl.unwrap_or(0),
            rows_locked: rl.unwrap_or(0),
        })
        .collect();
    if dropped() {
        return Ok(());
    }
    ev.mdl = metadata_locks(&mut c);
    let names = VARIABLES.iter().map(|v| format!("'{v}'")).collect::<Vec<_>>().join(", ");
    let vars: Vec<(String, String)> = c
        .query(format!("SELECT LOWER(VARIABLE_NAME), VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES WHERE LOWER(VARIABLE_NAME) IN ({names})"))
        .unwrap_or_default();
    ev.variables = vars.into_iter().collect();
    Ok(())
}

/// Install the metadata_lock_info plugin unless it is active (the watcher's
/// `--install-plugins`: it changes the server, so only on request). Says
/// what it did. MariaDB only; the plugin stays installed until `UNINSTALL
/// SONAME 'metadata_lock_info'`.
pub fn install_plugins(spec: &ConnSpec) -> Result<String> {
    let mut c = spec.connect()?;
    let (flavor, _) = pileup_conn::flavor(&mut c)?;
    if flavor != pileup_conn::Flavor::MariaDb {
        return Err(WatchError::PluginIsMariadbs);
    }
    let active: Option<i64> = c.query_first(
        "SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO' AND PLUGIN_STATUS = 'ACTIVE'",
    )?;
    if active.unwrap_or(0) > 0 {
        return Ok("metadata_lock_info is already installed: metadata-lock holders are exact".into());
    }
    c.query_drop("INSTALL SONAME 'metadata_lock_info'").map_err(|e| WatchError::PluginRefused(e.into()))?;
    Ok("installed the metadata_lock_info plugin (--install-plugins): metadata-lock holders are exact; UNINSTALL SONAME 'metadata_lock_info' removes it".into())
}

/// The metadata locks, from the metadata_lock_info plugin or from
/// performance_schema with its `wait/lock/metadata/sql/mdl` instrument on;
/// `None` when the server lists neither.
fn metadata_locks(c: &mut mysql::Conn) -> Option<MetadataLocks> {
    let strip = |m: String| m.strip_prefix("MDL_").map(str::to_string).unwrap_or(m);
    // The plugin gives empty strings where performance_schema gives NULL.
    let name = |s: Option<String>, n: Option<String>| match (s.filter(|s| !s.is_empty()), n.filter(|n| !n.is_empty())) {
        (None, None) => String::new(),
        (s, n) => format!("{}.{}", s.unwrap_or_default(), n.unwrap_or_default()),
    };
    let plugin: Option<i64> = c
        .query_first("SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO' AND PLUGIN_STATUS = 'ACTIVE'")
        .unwrap_or(None);
    if plugin.unwrap_or(0) > 0 {
        let m: Vec<(u64, String, String, Option<String>, Option<String>)> = c
            .query("SELECT THREAD_ID, LOCK_MODE, LOCK_TYPE, TABLE_SCHEMA, TABLE_NAME FROM information_schema.METADATA_LOCK_INFO WHERE THREAD_ID <> CONNECTION_ID()")
            .ok()?;
        let locks = m
            .into_iter()
            .map(|(conn, mode, ty, s, n)| MdlLock {
                conn,
                mode: strip(mode),
                // "Backup lock", "Table metadata lock", "Schema metadata lock"…
                namespace: ty.split(' ').next().unwrap_or("").to_ascii_uppercase(),
                object: name(s, n),
                granted: true,
            })
            .collect();
        return Some(MetadataLocks { source: "metadata_lock_info".into(), locks });
    }
    let on: Option<(String, String)> = c
        .query_first(
            "SELECT ENABLED, TIMED FROM performance_schema.setup_instruments WHERE NAME = 'wait/lock/metadata/sql/mdl'",
        )
        .ok()
        .flatten();
    if on.is_none_or(|(e, _)| e != "YES") {
        return None;
    }
    let m: Vec<(Option<u64>, String, String, Option<String>, Option<String>, String)> = c
        .query(
            "SELECT t.PROCESSLIST_ID, m.LOCK_TYPE, m.OBJECT_TYPE, m.OBJECT_SCHEMA, m.OBJECT_NAME, m.LOCK_STATUS \
             FROM performance_schema.metadata_locks m JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID \
             WHERE t.PROCESSLIST_ID IS NOT NULL AND t.PROCESSLIST_ID <> CONNECTION_ID()",
        )
        .ok()?;
    let locks = m
        .into_iter()
        .filter_map(|(conn, mode, ns, s, n, status)| {
            Some(MdlLock {
                conn: conn?,
                mode: strip(mode),
                namespace: ns,
                object: name(s, n),
                granted: status == "GRANTED",
            })
        })
        .collect();
    Some(MetadataLocks { source: "performance_schema".into(), locks })
}
