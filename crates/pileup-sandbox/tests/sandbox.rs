//! Real mariadbd servers: start, query, list, replicate, stop, clean up.

use mysql::prelude::Queryable;
use pileup_sandbox::{list, Options, Sandbox};

/// One base directory for every run (each sandbox has its own directory
/// below it and removes it when it stops).
fn base() -> std::path::PathBuf {
    let d = std::env::temp_dir().join("pileup-sbtest");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn start_query_list_stop() {
    let base = base();
    let sb = Sandbox::start(Options { base_dir: Some(base.clone()), ..Default::default() }).unwrap();
    let mut c = sb.connect().unwrap();
    let v: String = c.query_first("SELECT VERSION()").unwrap().unwrap();
    assert!(v.to_lowercase().contains("mariadb"), "{v}");
    let dd: String = c.query_first("SELECT @@datadir").unwrap().unwrap();
    assert!(dd.starts_with(&*base.to_string_lossy()), "datadir {dd} must be under the sandbox dir");
    let all = list(Some(&base)).unwrap();
    assert!(all.iter().any(|(ep, up)| ep.pid == sb.pid() && *up));
    let dir = sb.endpoint.dir.clone();
    let pid = sb.pid();
    sb.stop().unwrap();
    assert!(!dir.exists(), "sandbox dir removed");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| s.contains(") Z")).unwrap_or(true)
    );
}

#[test]
fn replica_follows_primary() {
    let base = base();
    let primary = Sandbox::start(Options { base_dir: Some(base.clone()), binlog: true, ..Default::default() }).unwrap();
    let replica = Sandbox::start(Options {
        base_dir: Some(base.clone()),
        replica_of: Some(primary.endpoint.clone()),
        ..Default::default()
    })
    .unwrap();
    primary.sql("CREATE DATABASE r; CREATE TABLE r.t (a INT PRIMARY KEY); INSERT INTO r.t VALUES (1),(2),(3)").unwrap();
    let mut c = replica.connect().unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let n: Option<i64> = c.query_first("SELECT COUNT(*) FROM r.t").unwrap_or(None);
        if n == Some(3) {
            break;
        }
        assert!(t0.elapsed().as_secs() < 30, "replica did not catch up");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn restart_keeps_data_socket_and_port() {
    let mut sb = Sandbox::start(Options { base_dir: Some(base()), ..Default::default() }).unwrap();
    sb.sql("CREATE DATABASE k; CREATE TABLE k.t (a INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO k.t VALUES (42)")
        .unwrap();
    let (pid, port) = (sb.pid(), sb.endpoint.port);
    sb.restart().unwrap();
    assert_ne!(sb.pid(), pid);
    assert_eq!(sb.endpoint.port, port);
    let v: i64 = sb.connect().unwrap().query_first("SELECT a FROM k.t").unwrap().unwrap();
    assert_eq!(v, 42);
}
