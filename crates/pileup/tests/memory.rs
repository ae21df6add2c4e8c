//! `pileup memory` against a real sandbox: a connection that fills a
//! MEMORY table grows the server, and the report charges the growth to
//! that connection by the server's own accounting while /proc shows where
//! the resident memory is.

mod common;

use std::time::Duration;

use common::*;
use mysql::prelude::Queryable;

/// `pileup memory` on the sandbox for `secs`, points every 250 ms, as JSON.
fn memory_json(sb: &pileup_sandbox::Sandbox, secs: &str) -> serde_json::Value {
    let (pid, sock) = (sb.pid().to_string(), sb.endpoint.socket.to_str().unwrap().to_string());
    let args =
        ["memory", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", secs, "--interval", "250ms", "-f", "json"];
    let out = pileup(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("memory's JSON parses")
}

#[test]
fn growth_is_seen_in_proc_and_charged_to_its_connection() {
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
    let r = memory_json(&sb, "6s");
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
    // Resident heap grew with it.
    let heap = |p: &serde_json::Value| {
        ["main_arena", "arenas", "other_anon"].iter().map(|k| p["regions"][k].as_u64().unwrap()).sum::<u64>()
    };
    assert!(heap(peak) > heap(first) + (20 << 20), "heap {} → {}", heap(first), heap(peak));
    // The text report names the connection.
    let text = pileup(&["memory", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", "1s", "--interval", "500ms"]);
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(t.starts_with("pileup memory: mariadbd pid") && t.contains("the server's accounting: Memory_used"), "{t}");
}

#[test]
fn proc_alone_works_and_a_wrong_pid_is_one_line() {
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
    let r = memory_json(&sb, "4s");
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
fn a_server_that_exits_mid_run_ends_the_report_cleanly() {
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
