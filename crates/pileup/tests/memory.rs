//! `pileup memory` against a real sandbox: a connection that fills a
//! MEMORY table grows the server, and the report charges the growth to
//! that connection by the server's own accounting while /proc shows where
//! the resident memory is.

mod common;

use std::time::Duration;

use common::*;
use mysql::prelude::Queryable;

/// One trace at a time: tests count the probes loaded in the kernel.
static ONE_TRACE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_TRACE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `pileup memory` on the sandbox for `secs`, points every 250 ms, as JSON,
/// its figures checked against each other.
fn memory_json(sb: &pileup_sandbox::Sandbox, secs: &str, extra: &[&str]) -> serde_json::Value {
    let (pid, sock) = (sb.pid().to_string(), sb.endpoint.socket.to_str().unwrap().to_string());
    let mut args = vec![
        "memory",
        "--pid",
        &pid,
        "-S",
        &sock,
        "-u",
        "root",
        "--duration",
        secs,
        "--interval",
        "250ms",
        "-f",
        "json",
    ];
    args.extend(extra);
    let out = pileup(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = serde_json::from_slice(&out.stdout).expect("memory's JSON parses");
    check_identity(&r);
    r
}

/// The report's figures agree with each other and with its points, worked
/// out here from the points: RSS is its parts at each point; the heap
/// identity (start + grown − given back = end) is read from the first and
/// last points, which walked the mappings, and from the largest heap of
/// any point that did; the growth the accounting does not explain is the
/// heap's change less Memory_used's; nothing is kept that was not freed or
/// is not resident.
fn check_identity(r: &serde_json::Value) {
    let points = r["points"].as_array().unwrap();
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("a number: {v}"));
    for p in points {
        let res = &p["resident"];
        assert_eq!(u(&res["rss"]), u(&res["anon"]) + u(&res["file"]) + u(&res["shmem"]), "{p}");
    }
    let heap = |p: &serde_json::Value| {
        let g = &p["regions"];
        (!g.is_null()).then(|| ["main_arena", "arenas", "other_anon"].iter().map(|k| u(&g[k])).sum::<u64>())
    };
    let walked: Vec<(f64, u64)> = points.iter().filter_map(|p| Some((p["at_s"].as_f64().unwrap(), heap(p)?))).collect();
    let exited = r["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("exited"));
    assert!(heap(&points[0]).is_some(), "the first point walks the mappings");
    assert!(exited || heap(points.last().unwrap()).is_some(), "the last point walks the mappings");
    let h = &r["heap"];
    let (first, last) = (walked[0], *walked.last().unwrap());
    let peak = walked.iter().map(|w| w.1).max().unwrap();
    assert_eq!((h["start_s"].as_f64().unwrap(), u(&h["start"])), first, "{h}");
    assert_eq!((h["end_s"].as_f64().unwrap(), u(&h["end"])), last, "{h}");
    assert_eq!(u(&h["peak"]), peak, "{h}");
    assert_eq!((u(&h["grown"]), u(&h["given_back"])), (peak - first.1, peak - last.1), "{h}");
    assert_eq!(u(&r["returned_to_kernel"]), peak - last.1);
    let at = |s: f64| points.iter().find(|p| p["at_s"].as_f64() == Some(s)).unwrap();
    let used = |p: &serde_json::Value| p["server"]["memory_used"].as_i64();
    if let (Some(a), Some(b)) = (used(at(first.0)), used(at(last.0))) {
        assert_eq!(r["unexplained"].as_i64().unwrap(), (last.1 as i64 - first.1 as i64) - (b - a), "{r:#}");
    }
    if let Some(kept) = r["kept_by_allocator"].as_u64() {
        assert!(kept <= u(&r["freed_by_server"]) && kept <= last.1, "kept {kept}: {r:#}");
    }
}

#[test]
fn growth_is_seen_in_proc_and_charged_to_its_connection() {
    let _one = serial();
    let sb = sandbox();
    let pid = sb.pid().to_string();
    let sock = sb.endpoint.socket.to_str().unwrap().to_string();
    let mut c = sb.connect().unwrap();
    let id: u64 = c.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    let grow = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1200));
        c.query_drop("SET SESSION max_heap_table_size = 512 * 1024 * 1024").unwrap();
        c.query_drop("CREATE DATABASE IF NOT EXISTS mem; USE mem").unwrap();
        c.query_drop(
            "CREATE TEMPORARY TABLE grow ENGINE=MEMORY SELECT seq, REPEAT('x', 100) AS pad FROM seq_1_to_400000",
        )
        .unwrap();
        // Held a while, so a point sees it.
        c.query_drop("SELECT SLEEP(2) FROM grow LIMIT 1").unwrap();
        c.query_drop("DROP TEMPORARY TABLE grow").unwrap();
    });
    let r = memory_json(&sb, "6s", &[]);
    grow.join().unwrap();
    let points = r["points"].as_array().unwrap();
    assert!(points.len() >= 15, "{} points", points.len());
    let first = &points[0];
    // Where resident memory is: the buffer pool (resident part of its
    // size), glibc's heaps, thread stacks.
    let pool = first["server"]["pool_size"].as_u64().unwrap();
    let pool_rss = first["regions"]["named"].as_u64().unwrap();
    assert!(pool_rss > 0 && pool_rss <= pool, "buffer pool {pool_rss} of {pool}");
    assert!(first["regions"]["arena_heaps"].as_u64().unwrap() >= 1, "{first}");
    assert!(first["regions"]["stacks"].as_u64().unwrap() > 0, "{first}");
    assert!(first["resident"]["rss"].as_u64().unwrap() > first["resident"]["anon"].as_u64().unwrap());
    // The growth: Memory_used rose by the table's size, and the connection
    // that made it is listed at that point with its statement. Its own
    // MEMORY_USED stays small: the table's rows are not charged to it,
    // which is why the server-wide figures are shown beside it.
    let used = |p: &serde_json::Value| p["server"]["memory_used"].as_u64().unwrap();
    let peak = points.iter().max_by_key(|p| used(p)).unwrap();
    assert!(used(peak) > used(first) + (30 << 20), "Memory_used {} → {}", used(first), used(peak));
    let ours = peak["server"]["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"].as_u64() == Some(id))
        .unwrap_or_else(|| panic!("connection {id} at the peak: {peak}"));
    assert!(ours["info"].as_str().unwrap_or("").contains("grow"), "{ours}");
    assert!(ours["bytes"].as_u64().unwrap() < 30 << 20, "a MEMORY table is not charged to the connection: {ours}");
    // Resident heap grew with it (the walks as memory moved saw it).
    let h = &r["heap"];
    assert!(h["peak"].as_u64().unwrap() > h["start"].as_u64().unwrap() + (20 << 20), "{h}");
    // The text report names the connection.
    let text = pileup(&["memory", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", "1s", "--interval", "500ms"]);
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(t.starts_with("pileup memory: mariadbd pid") && t.contains("the server's accounting: Memory_used"), "{t}");
}

#[test]
fn proc_alone_works_and_a_wrong_pid_is_one_line() {
    let _one = serial();
    let sb = sandbox();
    let pid = sb.pid().to_string();
    let out = pileup(&["memory", "--pid", &pid, "--no-sql", "--duration", "1s", "--interval", "500ms"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("not read (no SQL connection)"));
    let out = pileup(&["memory", "--pid", "999999999", "--no-sql", "--duration", "1s"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.starts_with("pileup: no process with pid 999999999") && e.lines().count() == 1,
        "{e}"
    );
}

/// RSS of a process, bytes.
fn rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

#[test]
fn tables_opened_then_flushed_leave_their_memory_kept_by_the_allocator() {
    let _one = serial();
    let sb = sandbox_with(vec![("table_open_cache", "4000"), ("table_definition_cache", "4000")]);
    let before = rss(sb.pid());
    let mut c = sb.connect().unwrap();
    c.query_drop("CREATE DATABASE t").unwrap();
    c.query_drop("USE t").unwrap();
    let cols: Vec<String> = (0..40).map(|i| format!("c{i} VARCHAR(64)")).collect();
    for i in 0..1000 {
        c.query_drop(format!("CREATE TABLE t{i} (id INT PRIMARY KEY, {}) ENGINE=Aria", cols.join(", "))).unwrap();
        c.query_drop(format!("SELECT * FROM t{i} LIMIT 1")).unwrap();
    }
    let flush = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        c.query_drop("FLUSH TABLES").unwrap();
    });
    let r = memory_json(&sb, "4s", &[]);
    flush.join().unwrap();
    let freed = r["freed_by_server"].as_u64().unwrap();
    let kept = r["kept_by_allocator"].as_u64().unwrap();
    assert!(freed > 50 << 20, "FLUSH TABLES freed {freed} bytes of the server's own");
    // What the server kept resident after giving the tables back, measured
    // apart: its RSS now against before the tables were made.
    let end = r["points"].as_array().unwrap().last().unwrap()["resident"]["rss"].as_u64().unwrap();
    let grown = end.saturating_sub(before);
    let off = (kept as f64 - grown as f64).abs() / kept as f64;
    assert!(off <= 0.10, "kept by the allocator {kept} bytes, RSS grown {grown} bytes ({:.0}% apart)", off * 100.0);
}

#[test]
fn a_large_group_by_adds_up_traced_and_not() {
    let _one = serial();
    let sb = sandbox();
    for extra in [&[][..], &["--no-trace"][..]] {
        let mut c = sb.connect().unwrap();
        // A million groups in an in-memory temporary table, then gone.
        let run = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1000));
            c.query_drop("CREATE DATABASE IF NOT EXISTS mem; USE mem").unwrap();
            c.query_drop("SET SESSION max_heap_table_size = 1024 * 1024 * 1024, tmp_table_size = 1024 * 1024 * 1024")
                .unwrap();
            c.query_drop("SELECT seq % 1000000 AS g, COUNT(*) FROM seq_1_to_2000000 GROUP BY g").unwrap();
        });
        let r = memory_json(&sb, "5s", extra);
        run.join().unwrap();
        // The statement allocated and freed; whatever stays resident of it
        // is at most what the heap grew over the window.
        let h = &r["heap"];
        let (start, end) = (h["start"].as_u64().unwrap(), h["end"].as_u64().unwrap());
        assert!(r["freed_by_server"].as_u64().unwrap() > 32 << 20, "{extra:?} {r:#}");
        // The heap grows by less than the statement allocates when it
        // reuses memory the server freed before the window and glibc kept
        // (the server's start leaves some 25 MB of it, at times): a few MB
        // is the least it grows by.
        assert!(h["grown"].as_u64().unwrap() > 4 << 20, "{extra:?}: the heap grew with the statement: {h}");
        let kept = r["kept_by_allocator"].as_u64().unwrap();
        assert!(kept <= end.saturating_sub(start) + (1 << 20), "{extra:?}: kept {kept}, heap {start} → {end}");
    }
    // The text prints the identity with the same figures.
    let (pid, sock) = (sb.pid().to_string(), sb.endpoint.socket.to_str().unwrap().to_string());
    let out = pileup(&["memory", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", "1s", "--no-trace"]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("given back =") && t.contains("not explained by the accounting"), "{t}");
}

#[test]
fn a_server_that_exits_mid_run_ends_the_report_cleanly() {
    let _one = serial();
    let sb = sandbox();
    let (pid, sock) = (sb.pid().to_string(), sb.endpoint.socket.to_str().unwrap().to_string());
    let run = std::thread::spawn(move || {
        pileup(&["memory", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", "6s", "--interval", "250ms"])
    });
    std::thread::sleep(Duration::from_millis(1500));
    sb.stop().unwrap();
    let out = run.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.starts_with("pileup memory: mariadbd pid"), "{t}");
    assert!(
        t.contains("note: the server's accounting could not be read") || t.contains("note: the server exited"),
        "{t}"
    );
}

/// `pileup memory` on the sandbox for `secs` in the background, as JSON;
/// returns once its probes are loaded.
fn traced_in_background(
    sb: &pileup_sandbox::Sandbox,
    secs: &str,
    extra: &[&str],
) -> std::thread::JoinHandle<serde_json::Value> {
    let (pid, sock) = (sb.pid().to_string(), sb.endpoint.socket.to_str().unwrap().to_string());
    let before = programs_named("growth_fault");
    let secs = secs.to_string();
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let run = std::thread::spawn(move || {
        let mut args = vec!["memory", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", &secs, "-f", "json"];
        args.extend(extra.iter().map(String::as_str));
        let out = pileup(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let r = serde_json::from_slice(&out.stdout).expect("memory's JSON parses");
        check_identity(&r);
        r
    });
    let t = std::time::Instant::now();
    while programs_named("growth_fault") == before {
        assert!(t.elapsed() < Duration::from_secs(30), "pileup memory never attached");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Attached; the processlist is read at the start.
    std::thread::sleep(Duration::from_millis(500));
    run
}

fn frames(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect()
}

#[test]
fn a_large_sort_is_charged_to_its_statement_through_filesort() {
    let _one = serial();
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    c.query_drop("CREATE DATABASE m").unwrap();
    c.query_drop("USE m").unwrap();
    c.query_drop("CREATE TABLE t (a INT PRIMARY KEY, b VARCHAR(200))").unwrap();
    c.query_drop("INSERT INTO t SELECT seq, REPEAT(MD5(seq), 6) FROM seq_1_to_300000").unwrap();
    // Statistics current, so the sort sizes its buffer to the rows.
    c.query_drop("ANALYZE TABLE t").unwrap();
    // InnoDB's purge of the load's undo log done, so its threads' faults
    // do not spend the stack budget of the sort's second (a run where they
    // did left the sort's 120 MB with no stack: 602 stacks, 2,943 over).
    c.query_drop("SET GLOBAL innodb_max_purge_lag_wait = 0").unwrap();
    let id: u64 = c.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    // A budget four times the default: at 200 stacks a second a loaded
    // machine's full run once left every sample of the statement over the
    // budget, charged to it without a stack (103 stacks sent, 2,033 over
    // the budget). The sort buffer's mmap gets its stack from the quarter
    // of the budget that faults cannot spend (a run where they could had
    // 1,542 records over the budget, the mmap among them).
    let run = traced_in_background(&sb, "6s", &["--stack-budget", "800"]);
    c.query_drop("SET SESSION sort_buffer_size = 512 * 1024 * 1024").unwrap();
    let rows: Vec<(i32, String)> = c.query("SELECT a, b FROM t ORDER BY b DESC").unwrap();
    assert_eq!(rows.len(), 300_000);
    let r = run.join().unwrap();
    let g = &r["traced"]["growth"];
    let touched = g["totals"]["anon_bytes"].as_u64().unwrap();
    assert!(touched > 40 << 20, "the sort touched {touched} bytes: {r:#}");
    // The statement that grew the server most is the sort, on its
    // connection, and its stack runs through filesort.
    let top = &g["by_statement"][0];
    assert!(top["class"].as_str().unwrap().to_lowercase().contains("order by"), "{g:#}");
    assert!(top["connections"].as_array().unwrap().iter().any(|c| c.as_u64() == Some(id)), "{top:#}");
    assert!(top["grown"].as_u64().unwrap() > touched / 2, "{top:#}");
    // On failure: the trace's counters (stacks sent, over the budget, ring
    // full), not its growth.
    let mut counters = r["traced"].clone();
    counters.as_object_mut().map(|o| o.remove("growth"));
    assert!(frames(&top["top_stack"]).iter().any(|f| f == "filesort"), "{top:#}\n{:#}\n{counters:#}", g["by_stack"]);
    // The sort buffer is one mmap of its size, under filesort's allocation.
    let mapped = g["mapped_by_stack"].as_array().unwrap();
    assert!(
        mapped.iter().any(|m| m["bytes"].as_u64().unwrap() >= 256 << 20
            && frames(&m["frames"]).iter().any(|f| f.starts_with("Filesort_buffer::alloc_sort_buffer"))),
        "{mapped:#?}\n{counters:#}"
    );
    // Freed with the statement: unmapped whole, so not kept by the
    // allocator, and the sampled pages are given back.
    assert!(g["given_back"].as_u64().unwrap() > top["grown"].as_u64().unwrap() / 2, "{g:#}");
    assert!(r["kept_by_allocator"].as_u64().unwrap_or(0) < 16 << 20, "{r:#}");
}

#[test]
fn prepared_statements_left_open_are_charged_to_their_connection_through_prepare() {
    let _one = serial();
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    c.query_drop("CREATE DATABASE p").unwrap();
    c.query_drop("USE p").unwrap();
    let cols: Vec<String> = (0..20).map(|i| format!("c{i} INT")).collect();
    c.query_drop(format!("CREATE TABLE t (id INT PRIMARY KEY, {})", cols.join(", "))).unwrap();
    let id: u64 = c.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    // And the connection's own allocations, sampled with uprobes.
    let conn_spec = format!("conn:{id}");
    let run = traced_in_background(&sb, "8s", &["--focus", &conn_spec]);
    // Ten thousand statements prepared and never closed, in batches.
    let select: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    for batch in 0..20 {
        let sql: Vec<String> = (0..500)
            .map(|i| {
                let n = batch * 500 + i;
                format!("PREPARE s{n} FROM 'SELECT {} FROM t WHERE id = ? AND c{} > {n}'", select.join(", "), n % 20)
            })
            .collect();
        c.query_drop(sql.join("; ")).unwrap();
    }
    let open: (String, u64) = c.query_first("SHOW SESSION STATUS LIKE 'Prepared_stmt_count'").unwrap().unwrap();
    assert!(open.1 >= 10_000, "{open:?}");
    let r = run.join().unwrap();
    let g = &r["traced"]["growth"];
    let conn = &g["by_connection"][0];
    assert_eq!(conn["id"].as_u64(), Some(id), "{g:#}");
    let touched = g["totals"]["anon_bytes"].as_u64().unwrap();
    assert!(conn["grown"].as_u64().unwrap() > touched / 2, "{g:#}");
    // Still held: nothing was closed.
    assert!(conn["held"].as_u64().unwrap() > conn["grown"].as_u64().unwrap() / 2, "{conn:#}");
    // While a statement is prepared the processlist shows the statement
    // being prepared (or the PREPARE itself).
    let top = &g["by_statement"][0];
    let class = top["class"].as_str().unwrap().to_lowercase();
    assert!(class.starts_with("prepare") || class.contains("from t where id = ?"), "{top:#}");
    assert!(top["connections"].as_array().unwrap().iter().any(|c| c.as_u64() == Some(id)), "{top:#}");
    let prepare_path = |f: &String| f.contains("Prepared_statement::prepare") || f.contains("mysql_sql_stmt_prepare");
    assert!(g["by_stack"].as_array().unwrap().iter().any(|s| frames(&s["frames"]).iter().any(prepare_path)), "{g:#}");
}

#[test]
fn sigkill_leaves_no_growth_probe_and_no_privileges_is_one_line() {
    let _one = serial();
    let sb = sandbox();
    let pid = sb.pid().to_string();
    let before = programs_named("growth_fault");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["memory", "--no-sql", "--pid", &pid, "--duration", "60s", "--probe-cost"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while programs_named("growth_fault") == before {
        assert!(t.elapsed() < Duration::from_secs(20), "pileup memory never attached");
        assert!(child.try_wait().unwrap().is_none(), "pileup memory exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    let probes = ["growth_fault", "growth_mmap", "growth_munmap", "growth_brk", "growth_madvise"];
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    let t = std::time::Instant::now();
    while probes.iter().any(|p| programs_named(p) > 0) {
        assert!(t.elapsed() < Duration::from_secs(10), "eBPF programs still loaded 10 s after SIGKILL");
        std::thread::sleep(Duration::from_millis(50));
    }
    sb.connect().unwrap().query_drop("DO 1").unwrap();

    let out = pileup_as_nobody(&["memory", "--no-sql", "--pid", &pid, "--duration", "1s"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("CAP_BPF") && e.contains("sudo") && e.contains("--no-trace"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn growth_renders_as_a_flame_graph_and_a_heap_profile() {
    let _one = serial();
    let sb = sandbox();
    let dir = scratch("memory-formats");
    let (pid, sock) = (sb.pid().to_string(), sb.endpoint.socket.to_str().unwrap().to_string());
    let mut c = sb.connect().unwrap();
    // Growth throughout both runs: a MEMORY table more every second.
    c.query_drop("SET SESSION max_heap_table_size = 256 * 1024 * 1024").unwrap();
    c.query_drop("CREATE DATABASE f").unwrap();
    c.query_drop("USE f").unwrap();
    let grow = std::thread::spawn(move || {
        for i in 0..8 {
            c.query_drop(format!(
                "CREATE TABLE g{i} ENGINE=MEMORY SELECT seq, REPEAT('x', 200) AS pad FROM seq_1_to_100000"
            ))
            .unwrap();
            std::thread::sleep(Duration::from_millis(700));
        }
    });
    let svg = dir.join("growth.svg");
    let pb = dir.join("heap.pb.gz");
    for out in [&svg, &pb] {
        let o = out.to_str().unwrap();
        let r = pileup(&["memory", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", "3s", "-o", o]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    }
    grow.join().unwrap();
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<?xml") && s.contains("Memory growth of mariadbd") && s.contains("bytes"), "{}", &s[..200]);
    // The pprof profile: gzip, with the heap profile's two sample types.
    let raw = std::fs::read(&pb).unwrap();
    let mut gz = flate2::read::GzDecoder::new(raw.as_slice());
    let mut body = vec![];
    std::io::Read::read_to_end(&mut gz, &mut body).unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("alloc_space") && text.contains("inuse_space"), "sample types missing");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&pb).unwrap().permissions().mode() & 0o777, 0o600);
}

/// The server killed while memory follows it: the run ends within seconds
/// with what it saw, and the report says the server exited.
#[test]
fn a_server_killed_mid_run_ends_it_and_the_report_says_so() {
    let _one = serial();
    let sb = sandbox();
    let pid = sb.pid().to_string();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["memory", "--pid", &pid, "--duration", "60s", "-S", sb.endpoint.socket.to_str().unwrap(), "-u", "root"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let t0 = std::time::Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(sb.pid() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(30), "memory went on {:?} after the server died", t0.elapsed());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("the server exited at"), "{text}");
}
