//! `pileup locks` against real sandboxes under real contention: a named
//! global mutex with its waiters' stacks and holders, an InnoDB latch,
//! every probe gone after SIGKILL, and the one-line error without
//! privileges.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use mysql::prelude::Queryable;
use pileup_sandbox::Sandbox;

/// One trace at a time: the SIGKILL test counts the kernel's eBPF programs
/// by name, which another test's trace would add to.
static ONE_TRACE: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_TRACE.lock().unwrap_or_else(|e| e.into_inner())
}

fn locks_json(sb: &Sandbox, extra: &[&str]) -> serde_json::Value {
    let pid = sb.pid().to_string();
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let mut args = vec!["locks", "--pid", &pid, "-S", &sock, "-u", "root", "--format", "json"];
    args.extend_from_slice(extra);
    let out = pileup(&args);
    assert!(out.status.success(), "pileup locks failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json output parses")
}

fn frames(stack: &serde_json::Value) -> Vec<&str> {
    stack["frames"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect()
}

#[test]
fn a_contended_global_mutex_is_named_with_its_waiters_stacks_and_holders() {
    let _one = serial();
    let sb = sandbox();
    // SHOW GLOBAL VARIABLES holds LOCK_global_system_variables while it
    // copies every variable: a dozen connections queue on it.
    let (go, handles) = storm(&sb, 12, "SHOW GLOBAL VARIABLES");
    std::thread::sleep(Duration::from_millis(300));
    let r = locks_json(&sb, &["--duration", "3s", "--probe-cost"]);
    let folded_dir = scratch("locks-folded");
    let folded = folded_dir.join("waits.folded");
    let pid = sb.pid().to_string();
    let pb = folded_dir.join("waits.pb.gz");
    let svg = folded_dir.join("waits.svg");
    let (dot, txt) = (folded_dir.join("waits.dot"), folded_dir.join("waits.txt"));
    // One run, every format by its extension.
    let mut args = vec!["locks", "--pid", &pid, "--no-sql", "--duration", "1s"];
    for f in [&folded, &pb, &svg, &dot, &txt] {
        args.extend(["-o", f.to_str().unwrap()]);
    }
    let out = pileup(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d = Command::new("dot").arg("-Tsvg").arg(&dot).output().expect("graphviz");
    assert!(d.status.success(), "dot rejected the call graph: {}", String::from_utf8_lossy(&d.stderr));
    let text = std::fs::read_to_string(&txt).unwrap();
    assert!(text.starts_with("pileup locks: ") && text.contains("LOCK_global_system_variables"), "{text}");
    let queries = stop(go, handles);
    // The flame graph: an SVG document, 0600, with the mutex as a frame.
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(doc.contains("<svg") && doc.trim_end().ends_with("</svg>"), "{}", &doc[..doc.len().min(300)]);
    assert!(doc.contains("LOCK_global_system_variables"), "the mutex in the flame graph");
    assert_eq!(std::fs::metadata(&svg).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(queries > 100, "the storm ran ({queries} queries)");
    // pprof: read by Go's own pprof, the lock as a frame, wait time as the value.
    let g = Command::new("go").args(["tool", "pprof", "-raw"]).arg(&pb).output().expect("go (golang-go)");
    assert!(g.status.success(), "pprof rejected: {}", String::from_utf8_lossy(&g.stderr));
    let raw = String::from_utf8_lossy(&g.stdout);
    assert!(raw.contains("wait/microseconds") && raw.contains("LOCK_global_system_variables"), "{raw}");

    let locks = r["locks"].as_array().unwrap();
    let l = locks
        .iter()
        .find(|l| l["name"] == "LOCK_global_system_variables")
        .unwrap_or_else(|| panic!("LOCK_global_system_variables among {:#}", r["locks"]));
    assert_eq!(l["kind"], "pthread mutex");
    assert_eq!(l["name_source"], "symbol");
    let waits = l["waits"].as_u64().unwrap();
    assert!(waits >= 50, "{waits} waits");
    // The kernel counts every wait into the histogram.
    let hist: u64 = l["histogram"].as_array().unwrap().iter().map(|b| b["waits"].as_u64().unwrap()).sum();
    assert_eq!(hist, waits);
    assert!(l["total_ms"].as_f64().unwrap() > 0.0 && l["max_us"].as_f64().unwrap() > 0.0);
    assert!(l["recorded"].as_u64().unwrap() > 0 && l["waiters"].as_u64().unwrap() >= 2, "{l:#}");
    // Every waiting stack is in the mutex's wait, under the statement.
    for s in l["stacks"].as_array().unwrap() {
        let f = frames(s);
        assert!(f.iter().take(3).any(|x| x.contains("lll_lock_wait")), "{f:?}");
        assert!(f.contains(&"fill_variables"), "{f:?}");
    }
    // Holders are read from the mutex as the wait began: server threads
    // with their connection and statement.
    let holders = l["holders"].as_array().unwrap();
    assert!(!holders.is_empty(), "{l:#}");
    assert!(holders.iter().any(|h| h["who"].as_str().unwrap().contains("SHOW GLOBAL VARIABLES")), "{holders:#?}");
    assert!(l["holder_note"].is_null());
    let st = l["statements"].as_array().unwrap();
    assert!(st.iter().any(|s| s["fingerprint"] == "show global variables"), "{st:#?}");
    assert!(r["counters"]["waits"].as_u64().unwrap() >= waits);
    // What it cost: pileup's CPU, and the probe timed by the kernel (it
    // runs on every context switch, the storm's waits among them).
    assert!(r["cpu_us"].as_u64().unwrap() > 0, "{:#}", r["cpu_us"]);
    let runs = r["probe_cost"]["runs"].as_u64().unwrap();
    assert!(runs >= waits, "the probe ran {runs} times for {waits} waits");
    assert!(r["probe_cost"]["run_ns"].as_u64().unwrap() > 0, "{:#}", r["probe_cost"]);

    // Folded stacks: 0600, frames root first, the lock as the leaf, µs.
    let mode = std::fs::metadata(&folded).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&folded).unwrap();
    let line = text.lines().find(|l| l.contains("LOCK_global_system_variables")).expect("the mutex in folded stacks");
    let (stack, us) = line.rsplit_once(' ').unwrap();
    assert!(us.parse::<u64>().unwrap() > 0);
    assert!(stack.ends_with("[pthread mutex: LOCK_global_system_variables]"), "{stack}");
    assert!(stack.contains(";fill_variables;"), "{stack}");
}

#[test]
fn focus_limits_the_trace_to_the_threads_chosen() {
    let _one = serial();
    let sb = sandbox();
    let (go, handles) = storm(&sb, 12, "SHOW GLOBAL VARIABLES");
    std::thread::sleep(Duration::from_millis(300));
    // Two of the storm's connections (every client connection but this
    // one), by their server thread ids.
    let tids: Vec<u64> = sb
        .connect()
        .unwrap()
        .query(
            "SELECT TID FROM information_schema.PROCESSLIST WHERE ID != CONNECTION_ID() AND USER = 'root' \
             AND COMMAND IN ('Query', 'Sleep') ORDER BY ID LIMIT 2",
        )
        .unwrap();
    assert_eq!(tids.len(), 2, "{tids:?}");
    let spec = format!("{},{}", tids[0], tids[1]);
    let two = locks_json(&sb, &["--duration", "2s", "--focus", &spec]);
    let all = locks_json(&sb, &["--duration", "2s", "--focus", "connections"]);
    stop(go, handles);
    let mutex = |r: &serde_json::Value| {
        r["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == "LOCK_global_system_variables")
            .unwrap_or_else(|| panic!("LOCK_global_system_variables among {:#}", r["locks"]))
            .clone()
    };
    let (l2, la) = (mutex(&two), mutex(&all));
    assert_eq!(two["threads"], 2, "{:#}", two["threads"]);
    assert_eq!(two["thread_filter"], spec.as_str());
    // Only the two threads' waits: at most two waiters, and far fewer
    // waits than the twelve connections'.
    assert!(l2["waiters"].as_u64().unwrap() <= 2 && l2["waits"].as_u64().unwrap() > 0, "{l2:#}");
    assert!(la["waiters"].as_u64().unwrap() >= 6, "{la:#}");
    assert!(
        l2["waits"].as_u64().unwrap() * 2 < la["waits"].as_u64().unwrap(),
        "two threads {} waits, every connection {}",
        l2["waits"],
        la["waits"]
    );
    assert!(all["threads"].as_u64().unwrap() >= 12, "{:#}", all["threads"]);

    // performance_schema's summary cannot be limited to threads: refused in one line.
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let out = pileup(&["locks", "--source", "performance-schema", "-S", &sock, "-u", "root", "--focus", "1"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--focus needs the eBPF source") && e.lines().count() == 1, "{e}");
    let out = pileup(&["locks", "--pid", "1", "--focus", "bogus thing"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--focus") && e.lines().count() == 1, "{e}");
}

#[test]
fn connections_that_start_waiting_mid_trace_are_annotated() {
    let _one = serial();
    let sb = sandbox();
    let pid = sb.pid().to_string();
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let tracer = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["locks", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", "4s", "--format", "json"])
        .env_remove("MYSQL_PWD")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The connections open after the trace began: only a processlist read
    // during the trace knows their statements.
    std::thread::sleep(Duration::from_millis(1500));
    let (go, handles) = storm(&sb, 12, "SHOW GLOBAL VARIABLES");
    let out = tracer.wait_with_output().unwrap();
    stop(go, handles);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let l = r["locks"].as_array().unwrap().iter().find(|l| l["name"] == "LOCK_global_system_variables");
    let l = l.unwrap_or_else(|| panic!("LOCK_global_system_variables among {:#}", r["locks"]));
    let st = l["statements"].as_array().unwrap();
    assert!(st.iter().any(|s| s["fingerprint"] == "show global variables"), "{l:#}");
}

#[test]
fn an_innodb_latch_is_reported_with_the_server_function_that_waited() {
    let _one = serial();
    let sb = sandbox();
    // Inserts at the end of one table's index: every writer wants the
    // same pages' latches.
    let mut load = sysbench(&sb, "oltp_insert", 16, 20);
    std::thread::sleep(Duration::from_secs(2));
    let r = locks_json(&sb, &["--duration", "3s", "--top", "3"]);
    let _ = load.kill();
    let _ = load.wait();
    let locks = r["locks"].as_array().unwrap();
    let innodb: Vec<&serde_json::Value> = locks.iter().filter(|l| l["kind"] == "InnoDB srw lock").collect();
    assert!(!innodb.is_empty(), "an InnoDB latch among {:#}", r["locks"]);
    // Waited for through libc's syscall() from unnamed InnoDB code; the
    // inserting connections' latches under the handler call that reached
    // them, which the lock's name gives.
    for l in &innodb {
        assert_eq!(l["holder_note"], "InnoDB srw locks record no owner in release builds");
        for s in l["stacks"].as_array().unwrap() {
            let f = frames(s);
            assert_eq!(f[0], "syscall", "{f:?}");
            assert!(f[1].starts_with("mariadbd+0x"), "{f:?}");
        }
    }
    let by_insert = innodb.iter().find(|l| {
        l["stacks"].as_array().unwrap().iter().any(|s| frames(s).iter().any(|x| x.starts_with("handler::ha_write_row")))
    });
    let l =
        by_insert.unwrap_or_else(|| panic!("an InnoDB latch waited on under handler::ha_write_row among {innodb:#?}"));
    assert!(l["taken_in"].as_str().unwrap().contains("(in "), "{l:#}");
}

/// `pileup locks` on the sandbox with `flags`, in the background, once its
/// probe is loaded (more `futex_switch` programs than `before`).
fn attached(sb: &Sandbox, flags: &[&str], before: usize) -> std::process::Child {
    let pid = sb.pid().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["locks", "--no-sql", "--pid", &pid])
        .args(flags)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while programs_named("futex_switch") == before {
        assert!(t.elapsed() < Duration::from_secs(20), "pileup locks never attached");
        assert!(child.try_wait().unwrap().is_none(), "pileup locks exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

#[test]
fn sigkill_leaves_no_probe_attached() {
    let _one = serial();
    let sb = sandbox();
    let before = programs_named("futex_switch");
    let mut child = attached(&sb, &["--probe-cost", "--duration", "60s"], before);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    // The kernel frees the program, and with it the tracepoint link, once
    // the dead process's descriptors are closed.
    let t = Instant::now();
    while programs_named("futex_switch") > before {
        assert!(t.elapsed() < Duration::from_secs(10), "eBPF programs still loaded 10 s after SIGKILL");
        std::thread::sleep(Duration::from_millis(50));
    }
    sb.connect().unwrap().query_drop("DO 1").unwrap();
    // --probe-cost's run-time statistics ended with the killed process: a
    // probe attached now, without the flag, is not timed (unless the host
    // has them on for everyone, kernel.bpf_stats_enabled).
    if std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|v| v.trim() == "0") {
        let mut child = attached(&sb, &["--duration", "5s"], before);
        // The probe runs on every context switch of the host.
        std::thread::sleep(Duration::from_millis(500));
        let timed: Vec<(u64, u64)> = libbpf_rs::query::ProgInfoIter::default()
            .filter(|p| p.name.to_str() == Some("futex_switch"))
            .map(|p| (p.run_cnt, p.run_time_ns))
            .collect();
        let _ = child.kill();
        child.wait().unwrap();
        assert!(timed.iter().all(|&(n, ns)| n == 0 && ns == 0), "the probe is still timed: {timed:?}");
    }
}

#[test]
fn without_privileges_the_error_is_one_line_naming_what_is_missing() {
    let sb = sandbox();
    let out = pileup_as_nobody(&["locks", "--no-sql", "--pid", &sb.pid().to_string()]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("CAP_BPF") && e.contains("CAP_PERFMON") && e.contains("sudo"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(!e.contains("{ "), "no debug formatting: {e}");
}

#[test]
fn wait_totals_agree_with_performance_schema_timers() {
    let _one = serial();
    let sb = sandbox_with(vec![
        ("performance_schema", "ON"),
        ("performance_schema_instrument", "wait/synch/mutex/sql/LOCK_global_system_variables=ON"),
    ]);
    let (go, handles) = storm(&sb, 12, "SHOW GLOBAL VARIABLES");
    std::thread::sleep(Duration::from_millis(300));
    let mut c = sb.connect().unwrap();
    let ps = |c: &mut mysql::Conn| -> (u64, f64) {
        let r: (u64, u64) = c
            .query_first(
                "SELECT COUNT_STAR, SUM_TIMER_WAIT FROM performance_schema.events_waits_summary_global_by_event_name \
                 WHERE EVENT_NAME = 'wait/synch/mutex/sql/LOCK_global_system_variables'",
            )
            .unwrap()
            .unwrap();
        (r.0, r.1 as f64 / 1e9) // picoseconds to ms
    };
    let before = ps(&mut c);
    let t = Instant::now();
    let r = locks_json(&sb, &["--duration", "4s", "--no-sql"]);
    let ps_window = t.elapsed().as_secs_f64();
    let after = ps(&mut c);
    stop(go, handles);
    let l = r["locks"].as_array().unwrap().iter().find(|l| l["name"] == "LOCK_global_system_variables").unwrap();
    let ours_ms = l["total_ms"].as_f64().unwrap();
    let traced_s = r["duration_s"].as_f64().unwrap();
    // performance_schema times every acquisition over the whole run of the
    // command (start-up included); pileup the contended sleeps while
    // attached. Per second of window, the two must be of one size.
    let ps_rate = (after.1 - before.1) / ps_window;
    let our_rate = ours_ms / traced_s;
    eprintln!("performance_schema {ps_rate:.1} ms/s over {ps_window:.2} s ({} acquisitions); pileup {our_rate:.1} ms/s over {traced_s:.2} s ({} waits)", after.0 - before.0, l["waits"]);
    assert!(ps_rate > 0.0);
    let ratio = our_rate / ps_rate;
    assert!((0.6..=1.25).contains(&ratio), "pileup {our_rate:.1} ms/s against performance_schema {ps_rate:.1} ms/s");
}

#[test]
fn performance_schema_stands_in_where_ebpf_cannot_be_used() {
    let _one = serial();
    let sb = sandbox_with(vec![
        ("performance_schema", "ON"),
        ("performance_schema_instrument", "wait/synch/mutex/sql/LOCK_global_system_variables=ON"),
    ]);
    let (go, handles) = storm(&sb, 8, "SHOW GLOBAL VARIABLES");
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let out = pileup(&[
        "locks",
        "--source",
        "performance-schema",
        "-S",
        &sock,
        "-u",
        "root",
        "--duration",
        "2s",
        "--format",
        "json",
    ]);
    stop(go, handles);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["source"], "performance_schema");
    let l = r["locks"].as_array().unwrap().iter().find(|l| l["name"] == "mutex/sql/LOCK_global_system_variables");
    let l = l.unwrap_or_else(|| panic!("the instrumented mutex among {:#}", r["locks"]));
    assert!(l["waits"].as_u64().unwrap() > 100 && l["total_ms"].as_f64().unwrap() > 0.0, "{l:#}");
    // Who waited: the storm's connections, under their statement.
    assert!(l["waiters"].as_u64().unwrap() >= 4, "{l:#}");
    assert_eq!(l["statements"][0]["fingerprint"], "show global variables", "{l:#}");
    assert!(r["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("every acquisition")));

    // A server with performance_schema off: one line naming the fix.
    let plain = sandbox();
    let sock = plain.endpoint.socket.to_string_lossy().into_owned();
    let out = pileup(&["locks", "--source", "performance-schema", "-S", &sock, "-u", "root", "--duration", "1s"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("performance_schema is off") && e.contains("performance_schema=ON"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    // It keeps no stacks: a pprof profile is refused, not written empty.
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let out = pileup(&["locks", "--source", "performance-schema", "-S", &sock, "-u", "root", "--format", "pprof"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("keeps no stacks") && e.contains("pprof") && e.lines().count() == 1, "{e}");
}

/// The server killed in the middle of the window: the trace ends within
/// seconds with what it saw, and the report says the server exited and
/// when.
#[test]
fn a_server_killed_mid_window_ends_the_trace_and_the_report_says_so() {
    let _one = serial();
    let sb = sandbox();
    let pid = sb.pid().to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["locks", "--pid", &pid, "--duration", "60s", "-S", sb.endpoint.socket.to_str().unwrap(), "-u", "root"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let t0 = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(sb.pid() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(30), "the trace went on {:?} after the server died", t0.elapsed());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("the server (pid {pid}) exited")) && text.contains("covers until then"), "{text}");
}
