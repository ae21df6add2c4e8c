//! `pileup lag` on a real replica catching up on an I/O-bound backlog.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_sandbox::{Options, Sandbox};

#[test]
fn lag_shows_where_the_applier_spends_its_time() {
    let base = common::it_base();
    let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
    let primary = Sandbox::start(Options { base_dir: Some(base.clone()), binlog: true, cnf: vec![kv("binlog_format", "ROW")], ..Default::default() }).unwrap();
    let mut replica = Sandbox::start(Options {
        base_dir: Some(base.clone()),
        replica_of: Some(primary.endpoint.clone()),
        cnf: vec![kv("innodb_buffer_pool_size", "16M"), kv("innodb_buffer_pool_load_at_startup", "OFF"), kv("innodb_buffer_pool_dump_at_shutdown", "OFF"), kv("skip_slave_start", "ON"), kv("performance_schema", "ON"), kv("performance_schema_instrument", "wait/synch/%=ON")],
        ..Default::default()
    })
    .unwrap();
    primary.sql("CREATE DATABASE sbtest").unwrap();
    let sock = primary.endpoint.socket.display().to_string();
    let sb = |args: &[&str]| {
        let st = Command::new("sysbench")
            .arg("oltp_update_index")
            .args(["--db-driver=mysql", &format!("--mysql-socket={sock}"), "--mysql-user=root", "--mysql-db=sbtest", "--tables=1", "--table-size=300000"])
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
    while replica.connect().unwrap().query_first::<mysql::Row, _>("SHOW SLAVE STATUS").unwrap().unwrap().get::<Option<String>, _>("Gtid_IO_Pos").flatten().as_deref() != Some(pos.as_str()) {
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(100));
    }
    // A cold buffer pool: the applier has pages to read.
    replica.restart().unwrap();
    replica.sql("START SLAVE").unwrap();

    let scratch = common::scratch("lag");
    let svg = scratch.join("lag.svg");
    let rsock = replica.endpoint.socket.to_string_lossy().into_owned();
    let out = common::pileup(&["lag", "-S", &rsock, "-u", "root", "--duration", "3s", "--interval-ms", "20", "--json", "-o", svg.to_str().unwrap()]);
    assert!(out.status.success(), "pileup lag failed: {}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("lag --json parses");
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
    // performance_schema names what the applier waited on: on a cold 16 MB
    // pool, InnoDB data file reads among them.
    let waits = r["waits"].as_array().unwrap();
    assert!(waits.iter().any(|w| w["event"] == "wait/io/file/innodb/innodb_data_file" && w["seconds"].as_f64().unwrap() > 0.0), "{waits:?}");
    let secs: Vec<f64> = waits.iter().map(|w| w["seconds"].as_f64().unwrap()).collect();
    assert!(secs.windows(2).all(|p| p[0] >= p[1]), "longest first: {secs:?}");
    let meta = std::fs::metadata(&svg).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));

    // The text report, and a clear refusal on a server that is not a replica.
    let text = common::pileup(&["lag", "-S", &rsock, "-u", "root", "--duration", "2s"]);
    assert!(text.status.success());
    let t = String::from_utf8_lossy(&text.stdout);
    eprintln!("{t}");
    assert!(t.contains("where apply time goes") && t.contains("applier states seen") && t.contains("instrumented waits of the applier threads"), "{t}");
    let psock = primary.endpoint.socket.to_string_lossy().into_owned();
    let bad = common::pileup(&["lag", "-S", &psock, "-u", "root", "--duration", "1s"]);
    assert!(!bad.status.success());
    let e = String::from_utf8_lossy(&bad.stderr);
    assert!(e.contains("not a replica") && e.lines().count() == 1, "{e}");
}
