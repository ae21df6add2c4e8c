//! `pileup lag` on a real replica catching up on an I/O-bound backlog.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_sandbox::{Options, Sandbox};

/// A primary and a cold replica (16 MB pool, performance_schema on) whose
/// applier has just started on a backlog of oltp_update_index writes to
/// `tables` sysbench tables, made while its SQL thread was stopped.
fn replica_catching_up(tables: u32, extra: &[(&str, &str)]) -> (Sandbox, Sandbox) {
    let base = common::it_base();
    let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
    let primary = Sandbox::start(Options {
        base_dir: Some(base.clone()),
        binlog: true,
        cnf: vec![kv("binlog_format", "ROW")],
        ..Default::default()
    })
    .unwrap();
    let mut cnf = vec![
        kv("innodb_buffer_pool_size", "16M"),
        kv("innodb_buffer_pool_load_at_startup", "OFF"),
        kv("innodb_buffer_pool_dump_at_shutdown", "OFF"),
        kv("skip_slave_start", "ON"),
        kv("performance_schema", "ON"),
        kv("performance_schema_instrument", "wait/synch/%=ON"),
    ];
    cnf.extend(extra.iter().map(|(k, v)| kv(k, v)));
    let mut replica = Sandbox::start(Options {
        base_dir: Some(base),
        replica_of: Some(primary.endpoint.clone()),
        cnf,
        ..Default::default()
    })
    .unwrap();
    primary.sql("CREATE DATABASE sbtest").unwrap();
    let sock = primary.endpoint.socket.display().to_string();
    let size = 300_000 / tables;
    let sb = |args: &[&str]| {
        let st = Command::new("sysbench")
            .arg("oltp_update_index")
            .args([
                "--db-driver=mysql",
                &format!("--mysql-socket={sock}"),
                "--mysql-user=root",
                "--mysql-db=sbtest",
                &format!("--tables={tables}"),
                &format!("--table-size={size}"),
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    };
    sb(&["prepare"]);
    replica.wait_caught_up(&primary, Duration::from_secs(300)).unwrap();
    replica.sql("STOP SLAVE SQL_THREAD").unwrap();
    sb(&["--threads=4", "--time=8", "--rand-type=uniform", "run"]);
    let pos: String = primary.connect().unwrap().query_first("SELECT @@gtid_binlog_pos").unwrap().unwrap();
    let t0 = Instant::now();
    while replica
        .connect()
        .unwrap()
        .query_first::<mysql::Row, _>("SHOW SLAVE STATUS")
        .unwrap()
        .unwrap()
        .get::<Option<String>, _>("Gtid_IO_Pos")
        .flatten()
        .as_deref()
        != Some(pos.as_str())
    {
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(100));
    }
    // A cold buffer pool: the applier has pages to read.
    replica.restart().unwrap();
    replica.sql("START SLAVE").unwrap();
    (primary, replica)
}

#[test]
fn lag_shows_where_the_applier_spends_its_time() {
    // With O_DIRECT the applier's page reads reach the device, where its
    // storage counters see them (when the test directory has a block
    // device: not on tmpfs).
    let on_disk = pileup_lag::io::device_of(std::process::id() as i32, common::it_base().to_str().unwrap()).is_some();
    let extra: &[(&str, &str)] = if on_disk { &[("innodb_flush_method", "O_DIRECT")] } else { &[] };
    let (primary, replica) = replica_catching_up(1, extra);
    let scratch = common::scratch("lag");
    let svg = scratch.join("lag.svg");
    let json = scratch.join("lag.json");
    let rsock = replica.endpoint.socket.to_string_lossy().into_owned();
    let out = common::pileup(&[
        "lag",
        "-S",
        &rsock,
        "-u",
        "root",
        "--duration",
        "3s",
        "--interval-ms",
        "20",
        "-o",
        svg.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
        "-o",
        scratch.join("lag.folded").to_str().unwrap(),
        "-o",
        scratch.join("lag.dot").to_str().unwrap(),
        "-o",
        scratch.join("lag.pb.gz").to_str().unwrap(),
        "-o",
        scratch.join("lag.txt").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "pileup lag failed: {}", String::from_utf8_lossy(&out.stderr));
    // Every format by its extension, each read by its consumer.
    let folded = std::fs::read_to_string(scratch.join("lag.folded")).unwrap();
    assert!(
        !folded.is_empty() && folded.lines().all(|l| l.rsplit_once(' ').is_some_and(|(_, n)| n.parse::<u64>().is_ok())),
        "{folded}"
    );
    let d = std::process::Command::new("dot").arg("-Tsvg").arg(scratch.join("lag.dot")).output().expect("graphviz");
    assert!(d.status.success(), "dot rejected the call graph: {}", String::from_utf8_lossy(&d.stderr));
    let g = std::process::Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(scratch.join("lag.pb.gz"))
        .output()
        .expect("go (golang-go)");
    assert!(g.status.success(), "pprof rejected: {}", String::from_utf8_lossy(&g.stderr));
    assert!(std::fs::read_to_string(scratch.join("lag.txt")).unwrap().contains("applier"));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("lag's JSON parses");
    eprintln!("{}", serde_json::to_string_pretty(&r["tally"]).unwrap());
    assert!(r["applier_threads"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["samples"].as_u64().unwrap() >= 50, "{r}");
    let tally = &r["tally"];
    let by_cat: u64 = tally["by_category"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(by_cat, tally["samples"].as_u64().unwrap());
    assert!(r["transactions"].as_u64().unwrap() > 0, "the replica applied nothing while sampled: {r}");
    let cat = |k: &str| tally["by_category"][k].as_u64().unwrap_or(0);
    assert!(cat("page_read") + cat("latch_wait") > 0, "an I/O-bound applier must wait for pages: {tally}");
    assert!(tally["by_table"]["sbtest.sbtest1"].is_object(), "the table being applied must be named: {tally}");
    // Row events find their row by primary key and then change it: the
    // waits are put on those storage-engine calls.
    let ops: Vec<&String> =
        tally["by_operation"].as_object().unwrap().values().flat_map(|m| m.as_object().unwrap().keys()).collect();
    assert!(ops.iter().any(|o| *o == "ha_rnd_pos" || *o == "ha_update_row"), "{tally}");
    // performance_schema names what the applier waited on: on a cold 16 MB
    // pool, InnoDB data file reads among them.
    let waits = r["waits"].as_array().unwrap();
    assert!(
        waits
            .iter()
            .any(|w| w["event"] == "wait/io/file/innodb/innodb_data_file" && w["seconds"].as_f64().unwrap() > 0.0),
        "{waits:?}"
    );
    let secs: Vec<f64> = waits.iter().map(|w| w["seconds"].as_f64().unwrap()).collect();
    assert!(secs.windows(2).all(|p| p[0] >= p[1]), "longest first: {secs:?}");
    // The storage side: the datadir's device and the applier's own reads.
    if on_disk {
        let d = &r["device"];
        assert!(d["reads_per_s"].as_f64().unwrap() > 0.0 && d["mean_read_us"].as_f64().unwrap() > 0.0, "{d}");
        let page = r["page_size"].as_u64().unwrap();
        assert!(
            r["applier_read_bytes"].as_u64().unwrap() >= page,
            "with O_DIRECT the applier's page reads reach storage: {r}"
        );
        assert!(r["applier_write_bytes"].is_u64(), "{r}");
    } else {
        assert!(r["device"].is_null() && r["notes"].to_string().contains("no block device statistics"), "{r}");
    }
    // The whole pool's reads (the applier's and everyone else's) and the
    // history list at both ends, whatever the storage.
    let pool = r["pool_reads"].as_u64().expect("pool_reads");
    assert!(pool > 0, "an I/O-bound replica's pool reads pages: {r}");
    let h = r["history"].as_array().expect("history [start, end]");
    assert!(h.len() == 2 && h.iter().all(|x| x.is_u64()), "{r}");
    // Stalls: the report always says; when there were some, they add up.
    let st = &r["stalls"];
    assert_eq!(st["threshold_ms"], 200, "{st}");
    let (n, secs) = (st["count"].as_u64().unwrap(), st["seconds"].as_f64().unwrap());
    assert!(secs <= r["seconds"].as_f64().unwrap(), "{st}");
    if n > 0 {
        assert!(
            st["longest_ms"].as_u64().unwrap() >= 200
                && secs >= 0.2
                && !st["by_category"].as_object().unwrap().is_empty(),
            "{st}"
        );
    } else {
        assert_eq!(secs, 0.0, "{st}");
    }
    let meta = std::fs::metadata(&svg).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    common::xmllint(&svg).unwrap();
    common::jq("length == 1 and .[0].schema_version == 1 and (.[0].tally.samples > 0)", &std::fs::read(&json).unwrap())
        .unwrap();

    // The text report, and a clear refusal on a server that is not a replica.
    let text = common::pileup(&["lag", "-S", &rsock, "-u", "root", "--duration", "2s"]);
    assert!(text.status.success());
    let t = String::from_utf8_lossy(&text.stdout);
    eprintln!("{t}");
    assert!(t.contains("  stalls: ") && t.contains("inside which row operation"), "{t}");
    assert!(
        t.contains("where apply time goes")
            && t.contains("applier states seen")
            && t.contains("instrumented waits of the applier threads"),
        "{t}"
    );
    assert!(t.contains("the buffer pool read ") && t.contains("pages in all"), "{t}");
    if on_disk {
        assert!(t.contains("\nstorage\n") && t.contains("holds the datadir") && t.contains("from storage"), "{t}");
    }
    let short = common::pileup(&["lag", "-S", &rsock, "-u", "root", "--duration", "1s", "--stall-ms", "10"]);
    let e = String::from_utf8_lossy(&short.stderr);
    assert!(
        !short.status.success()
            && e.contains("--stall-ms (10) must be at least --interval-ms (50)")
            && e.lines().count() == 1,
        "{e}"
    );
    let psock = primary.endpoint.socket.to_string_lossy().into_owned();
    let bad = common::pileup(&["lag", "-S", &psock, "-u", "root", "--duration", "1s"]);
    assert!(!bad.status.success());
    let e = String::from_utf8_lossy(&bad.stderr);
    assert!(e.contains("not a replica") && e.lines().count() == 1, "{e}");
}

#[test]
fn lag_names_the_table_each_parallel_worker_is_on() {
    let (_primary, replica) =
        replica_catching_up(4, &[("slave_parallel_threads", "4"), ("slave_parallel_mode", "optimistic")]);
    let rsock = replica.endpoint.socket.to_string_lossy().into_owned();
    let out = common::pileup(&["lag", "-S", &rsock, "-u", "root", "--duration", "3s", "--interval-ms", "20", "--json"]);
    assert!(out.status.success(), "pileup lag failed: {}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tally = &r["tally"];
    eprintln!("{}", serde_json::to_string_pretty(tally).unwrap());
    assert!(r["applier_threads"].as_u64().unwrap() >= 2, "the driver and its workers are sampled: {r}");
    // Tables come from the transaction each worker is on, not only from the
    // driver's (oldest uncommitted) position.
    assert!(tally["table_from"]["worker transaction"].as_u64().unwrap_or(0) > 0, "{tally}");
    let tables: Vec<&String> =
        tally["by_table"].as_object().unwrap().keys().filter(|t| t.starts_with("sbtest.")).collect();
    assert!(tables.len() >= 2, "writes to 4 tables, applied in parallel, name more than one: {tables:?}");
}

/// The replica killed mid-window: lag ends within seconds, keeps the
/// samples taken (the -o file written), and the report says the server
/// exited and what it could no longer read.
#[test]
fn a_replica_killed_mid_window_ends_the_report_and_says_so() {
    let base = common::it_base();
    let primary = Sandbox::start(Options { base_dir: Some(base.clone()), binlog: true, ..Default::default() }).unwrap();
    let replica = Sandbox::start(Options {
        base_dir: Some(base),
        replica_of: Some(primary.endpoint.clone()),
        ..Default::default()
    })
    .unwrap();
    let dir = common::scratch("lag-killed");
    let out = dir.join("lag.json");
    let rsock = replica.endpoint.socket.display().to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["lag", "-S", &rsock, "-u", "root", "--duration", "60s", "-o", out.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let pid = replica.pid();
    let t0 = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(30), "lag went on {:?} after the server died", t0.elapsed());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(r["samples"].as_u64().unwrap() > 0, "{r:#}");
    let notes = r["notes"].to_string();
    assert!(
        notes.contains(&format!("the server (pid {pid}) exited")) && notes.contains("covers until then"),
        "{notes}"
    );
}
