//! `pileup dump` and `pileup load` against real sandboxes.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mysql::prelude::Queryable;
use pileup_sandbox::{Options, Sandbox};

fn conn_args(sb: &Sandbox) -> Vec<String> {
    vec!["-S".into(), sb.endpoint.socket.to_string_lossy().into_owned(), "-u".into(), "root".into()]
}

fn run(sb: &Sandbox, args: &[&str]) -> std::process::Output {
    let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    a.extend(conn_args(sb));
    Command::new(env!("CARGO_BIN_EXE_pileup")).args(&a).env_remove("MYSQL_PWD").output().unwrap()
}

fn ok(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "pileup failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn checksum(c: &mut mysql::Conn, db: &str, t: &str) -> Option<u64> {
    let r: Option<(String, Option<u64>)> = c.query_first(format!("CHECKSUM TABLE `{db}`.`{t}`")).unwrap();
    r.and_then(|r| r.1)
}

const SCHEMA: &[&str] = &[
    "CREATE DATABASE d1 CHARACTER SET latin1",
    "USE d1",
    "CREATE TABLE d1.t (id INT PRIMARY KEY, s VARCHAR(100) CHARACTER SET utf8mb4, b BLOB, vb VARBINARY(20), \
     f FLOAT, dbl DOUBLE, dec1 DECIMAL(10,3), bt BIT(12), dt DATETIME(3), ts TIMESTAMP(6) NULL, j JSON, \
     e ENUM('a','b'), st SET('x','y'), tm TIME(6), y YEAR, g INT AS (id*2) VIRTUAL, n INT NULL, \
     l1 VARCHAR(10) CHARACTER SET latin1, gk VARCHAR(10) CHARACTER SET gbk, d DATE, neg BIGINT, u BIGINT UNSIGNED)",
    "INSERT INTO d1.t (id,s,b,vb,f,dbl,dec1,bt,dt,ts,j,e,st,tm,y,n,l1,gk,d,neg,u) VALUES \
     (1,'plain','blob',0x00ff10,1.1,0.1,12.345,b'101010101010','2024-01-02 03:04:05.678','2024-06-01 12:00:00.123456',\
      '{\"k\":\"v\\\\\"q\"}','a','x,y','-838:59:59.000001',2024,NULL,'café',_gbk 0xC4E3BAC3,'2024-02-29',-9223372036854775808,18446744073709551615),\
     (2,'quote''s \"dq\" back\\\\slash nl\\nline tab\\t 😀 end', 0x000102030a0d1a5c27225c4e, '', 3.4e38, \
      1.7976931348623157e308, -0.001, b'0', '1000-01-01 00:00:00.000', NULL, '[]', 'b', '', '00:00:00', 1901, 0, '', '', '1000-01-01', 0, 0),\
     (3,'\\\\N',NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL),\
     (4,'',X'',X'',-0.0,5e-324,0,b'111111111111','2038-01-19 03:14:07.999','1970-01-01 00:00:01','{}','a','y','838:59:59',2155,-1,'x','x','9999-12-31',1,1)",
    "CREATE TABLE d1.allbytes (id INT PRIMARY KEY, b VARBINARY(256))",
    "CREATE TABLE d1.big (id BIGINT PRIMARY KEY, v VARCHAR(50), k INT, KEY (k))",
    "INSERT INTO d1.big SELECT seq, CONCAT('row', seq), seq % 97 FROM seq_1_to_60000",
    "CREATE TABLE d1.idx (id INT AUTO_INCREMENT PRIMARY KEY, a INT, b VARCHAR(20), c INT, UNIQUE KEY ab (a, b), \
     KEY c_desc (c DESC), KEY bpref (b(5)) COMMENT 'prefix, with a comma') STATS_AUTO_RECALC=1",
    "INSERT INTO d1.idx (a, b, c) SELECT seq, CONCAT('v', seq), seq % 7 FROM seq_1_to_30000",
    "CREATE SEQUENCE d1.s1 START WITH 100 INCREMENT BY 5 CACHE 10",
    "SELECT NEXTVAL(d1.s1), NEXTVAL(d1.s1)",
    "CREATE TABLE d1.nokey (a INT, b TEXT)",
    "INSERT INTO d1.nokey VALUES (1,'x'),(1,'x'),(2,NULL)",
    "CREATE TABLE d1.ar (id INT PRIMARY KEY, v TEXT) ENGINE=Aria",
    "INSERT INTO d1.ar VALUES (1,'aria')",
    "CREATE TABLE d1.blobby (id INT PRIMARY KEY, b LONGBLOB)",
    "INSERT INTO d1.blobby VALUES (1, REPEAT(0xABCDEF00, 1000000)), (2, ''), (3, REPEAT('y', 3000000))",
    "CREATE TABLE d1.part (id INT, p INT, PRIMARY KEY (id, p)) PARTITION BY RANGE (p) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)",
    "INSERT INTO d1.part SELECT seq, seq % 20 FROM seq_1_to_100",
    "CREATE TABLE d1.child (id INT PRIMARY KEY, big_id BIGINT, FOREIGN KEY (big_id) REFERENCES d1.big (id))",
    "INSERT INTO d1.child VALUES (1, 5), (2, 59999)",
    "CREATE VIEW d1.v1 AS SELECT id, s FROM d1.t",
    "CREATE VIEW d1.v0 AS SELECT id FROM d1.v1 WHERE id > 1",
    "CREATE PROCEDURE d1.p1(IN x INT) BEGIN SELECT x; SELECT x + 1; END",
    "CREATE FUNCTION d1.f1(x INT) RETURNS INT DETERMINISTIC RETURN x * 2",
    "CREATE TRIGGER d1.tr1 BEFORE INSERT ON d1.nokey FOR EACH ROW SET NEW.b = CONCAT(IFNULL(NEW.b, ''), '!')",
    "CREATE EVENT d1.ev1 ON SCHEDULE EVERY 1 DAY STARTS '2030-01-01 00:00:00' DISABLE DO DELETE FROM d1.nokey WHERE a < 0",
];

/// The schema above, and every byte value in one row and spread over rows.
fn fill(c: &mut mysql::Conn) {
    c.query_drop("SET NAMES utf8mb4").unwrap();
    for s in SCHEMA {
        c.query_drop(*s).unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    let all: Vec<u8> = (0..=255).collect();
    c.exec_drop("INSERT INTO d1.allbytes VALUES (0, ?)", (all,)).unwrap();
    for b in 0..=255u8 {
        c.exec_drop("INSERT INTO d1.allbytes VALUES (?, ?)", (b as i32 + 1, vec![b])).unwrap();
    }
}

const TABLES: &[&str] = &["t", "allbytes", "big", "idx", "nokey", "ar", "blobby", "part", "child"];

#[test]
fn every_type_and_object_survives_a_dump_and_a_load() {
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    fill(&mut c);
    // The ends of FLOAT's and DOUBLE's ranges (mydumper's text keeps 6
    // digits of a FLOAT, so only this test has them).
    c.query_drop(
        "CREATE TABLE d1.fl (id INT PRIMARY KEY, f FLOAT, d DOUBLE); INSERT INTO d1.fl VALUES \
         (1, 3.4028234663852886e38, 1.7976931348623157e308), (2, -3.4028234663852886e38, -1.7976931348623157e308), \
         (3, 1.1754943508222875e-38, 2.2250738585072014e-308), (4, 1.401298464324817e-45, 5e-324)",
    )
    .unwrap();
    // Integers at the ends of their types, which the load sends as numbers;
    // a zero date, which it sends as text, beside dates it sends as dates.
    c.query_drop(
        "CREATE TABLE d1.ints (id INT PRIMARY KEY, s BIGINT, u BIGINT UNSIGNED, t TINYINT, z INT(5) UNSIGNED ZEROFILL, \
         w DATETIME); INSERT INTO d1.ints VALUES (1, -9223372036854775808, 18446744073709551615, -128, 12, '0000-00-00'), \
         (2, 9223372036854775807, 0, 127, 12345, '2024-05-06 07:08:09'), (3, 0, NULL, NULL, NULL, NULL), \
         (4, -1, 1, 0, 0, '2024-05-06')",
    )
    .unwrap();
    // A value near the packet limit the load is given below.
    c.query_drop(
        "CREATE TABLE d1.wide (id INT PRIMARY KEY, b LONGBLOB); INSERT INTO d1.wide VALUES (1, REPEAT('y', 4180000))",
    )
    .unwrap();
    let dir = scratch("dump");
    let out = dir.join("d1");
    let text = ok(&run(
        &sb,
        &["dump", "-o", out.to_str().unwrap(), "--databases", "d1", "--chunk-rows", "10000", "--threads", "3"],
    ));
    assert!(text.contains("dumped 12 tables"), "{text}");
    // Files hold data: 0600 files in 0700 directories.
    for d in [out.clone(), out.join("data")] {
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700, "{}", d.display());
    }
    let mut files = 0;
    for e in std::fs::read_dir(out.join("data")).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600, "{}", p.display());
        files += 1;
    }
    assert!(files >= 13, "the 60,000-row table is cut into chunks: {files} files");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("pileup-dump.json")).unwrap()).unwrap();
    let big = m["tables"].as_array().unwrap().iter().find(|t| t["name"] == "big").unwrap();
    assert!(big["chunks"].as_array().unwrap().len() >= 6, "{big}");
    assert_eq!(m["lock"]["copied_under_lock"][0], "d1.ar (Aria)");

    // Into another database of the same server, then checked table by table.
    let loads = |c: &mut mysql::Conn| -> u64 {
        c.query_first::<(String, u64), _>("SHOW GLOBAL STATUS LIKE 'Com_load'").unwrap().unwrap().1
    };
    // Packets of 4 MiB (4,194,304 bytes) for the load: it sends blobby's
    // row of 4,000,000 bytes in a bulk packet of its own, wide's row of
    // 4,180,000 (more than a bulk packet holds, 16 KiB under the limit) by
    // LOAD DATA.
    c.query_drop("SET GLOBAL max_allowed_packet = 4194304").unwrap();
    let before = loads(&mut c);
    ok(&run(&sb, &["load", out.to_str().unwrap(), "--rename", "d1:d2", "--threads", "3", "--verify"]));
    assert_eq!(loads(&mut c) - before, 1, "rows go in by bulk execution, wide's by LOAD DATA");
    for t in TABLES.iter().chain(&["fl", "ints", "wide"]) {
        let (a, b) = (checksum(&mut c, "d1", t), checksum(&mut c, "d2", t));
        assert!(a.is_some() && a == b, "table {t}: checksum {a:?} against {b:?}");
        // Indexes (those added after the data too), options and counters.
        assert_eq!(show_create(&mut c, "d1", t), show_create(&mut c, "d2", t), "table {t}");
    }
    // Loaded with InnoDB's statistics recalculation off, then analyzed once:
    // the statistics count the rows loaded.
    let n: u64 = c
        .query_first("SELECT n_rows FROM mysql.innodb_table_stats WHERE database_name = 'd2' AND table_name = 'big'")
        .unwrap()
        .unwrap();
    assert!((50_000..=70_000).contains(&n), "d2.big's statistics say {n} rows, not about 60,000");
    let cs: (String, String) = c
        .query_first("SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'd2'")
        .unwrap()
        .unwrap();
    assert_eq!(cs.0, "latin1");
    // The trigger was created after the data: it did not fire on load.
    let n: Vec<Option<String>> = c.query("SELECT b FROM d2.nokey ORDER BY a, b").unwrap();
    assert_eq!(n, vec![Some("x".into()), Some("x".into()), None]);
    // Views (one reading the other), routines, trigger and event, in d2.
    let v: Vec<i32> = c.query("SELECT id FROM d2.v0 ORDER BY id").unwrap();
    assert_eq!(v, vec![2, 3, 4]);
    let vdef: String = c
        .query_first(
            "SELECT VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_SCHEMA = 'd2' AND TABLE_NAME = 'v1'",
        )
        .unwrap()
        .unwrap();
    assert!(vdef.contains("`d2`") && !vdef.contains("`d1`"), "the view reads the loaded tables: {vdef}");
    // The sequence, with its definition, goes on past every value handed out.
    let def = |c: &mut mysql::Conn, db: &str| -> String {
        let r: (String, String) = c.query_first(format!("SHOW CREATE SEQUENCE {db}.s1")).unwrap().unwrap();
        r.1
    };
    assert_eq!(def(&mut c, "d1"), def(&mut c, "d2"));
    let next: i64 = c.query_first("SELECT NEXTVAL(d2.s1)").unwrap().unwrap();
    assert!(next > 105, "the loaded sequence hands out {next}, after 100 and 105");
    let f: i32 = c.query_first("SELECT d2.f1(21)").unwrap().unwrap();
    assert_eq!(f, 42);
    c.query_drop("INSERT INTO d2.nokey VALUES (9, 'y')").unwrap();
    let y: String = c.query_first("SELECT b FROM d2.nokey WHERE a = 9").unwrap().unwrap();
    assert_eq!(y, "y!");
    let ev: (String, String) = c
        .query_first("SELECT STATUS, DATE_FORMAT(STARTS, '%Y-%m-%d %H:%i:%s') FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'd2'")
        .unwrap()
        .unwrap();
    assert_eq!(ev, ("DISABLED".to_string(), "2030-01-01 00:00:00".to_string()));
    let p: usize = c
        .query_first::<usize, _>(
            "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'd2' AND ROUTINE_NAME = 'p1'",
        )
        .unwrap()
        .unwrap();
    assert_eq!(p, 1);

    // Loading again is refused (nothing is touched), --existing drop replaces.
    let again = run(&sb, &["load", out.to_str().unwrap(), "--rename", "d1:d2"]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("exists already") && err.contains("--existing"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    ok(&run(&sb, &["load", out.to_str().unwrap(), "--rename", "d1:d2", "--existing", "drop"]));
    // A rename of a database the dump does not hold is refused before any work.
    let typo = run(&sb, &["load", out.to_str().unwrap(), "--rename", "dl:d9"]);
    assert!(!typo.status.success());
    assert!(
        String::from_utf8_lossy(&typo.stderr).contains("holds no database dl (it holds d1"),
        "{}",
        String::from_utf8_lossy(&typo.stderr)
    );
    assert_eq!(checksum(&mut c, "d2", "big"), checksum(&mut c, "d1", "big"));

    // A chunk file damaged on disk: the load names it and fails.
    let chunk = out.join(big["chunks"][1]["file"].as_str().unwrap());
    let mut bytes = std::fs::read(&chunk).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&chunk, &bytes).unwrap();
    // That table stops; every other table is loaded; the exit is non-zero.
    let bad = run(&sb, &["load", out.to_str().unwrap(), "--rename", "d1:d3"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains(chunk.file_name().unwrap().to_str().unwrap()) && err.contains("d3.big"), "{err}");
    assert!(err.contains("1 table not loaded"), "{err}");
    for t in TABLES.iter().filter(|t| **t != "big") {
        assert_eq!(checksum(&mut c, "d1", t), checksum(&mut c, "d3", t), "table {t} loaded beside the damaged one");
    }
    assert_ne!(checksum(&mut c, "d1", "big"), checksum(&mut c, "d3", "big"));

    // A dump without its manifest is not a dump.
    std::fs::remove_file(out.join("pileup-dump.json")).unwrap();
    let cut = run(&sb, &["load", out.to_str().unwrap(), "--rename", "d1:d4"]);
    assert!(String::from_utf8_lossy(&cut.stderr).contains("not a complete pileup dump"));
}

#[test]
fn a_dump_during_transfers_sees_one_instant_and_records_its_binlog_position() {
    let sb = Sandbox::start(Options { base_dir: Some(it_base()), binlog: true, ..Default::default() }).unwrap();
    let mut c = sb.connect().unwrap();
    c.query_drop("CREATE DATABASE bank").unwrap();
    c.query_drop("USE bank").unwrap();
    c.query_drop("CREATE TABLE bank.acct (id INT PRIMARY KEY, bal BIGINT NOT NULL)").unwrap();
    c.query_drop("INSERT INTO bank.acct SELECT seq, 1000 FROM seq_1_to_20000").unwrap();
    c.query_drop("CREATE TABLE bank.moves (id INT AUTO_INCREMENT PRIMARY KEY, a INT, b INT, amt INT)").unwrap();
    let total: i64 = 20000 * 1000;
    // Transfers between accounts in two tables at once: any instant has
    // the same sum, and one move row per transfer.
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = vec![];
    for w in 0..4 {
        let stop = stop.clone();
        let mut wc = sb.connect().unwrap();
        writers.push(std::thread::spawn(move || {
            let mut n = 0u64;
            let mut x = 7919u64 * (w + 1);
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let (a, b) = ((x >> 33) % 20000 + 1, (x >> 13) % 20000 + 1);
                let mut t = wc.start_transaction(mysql::TxOpts::default()).unwrap();
                t.exec_drop("UPDATE bank.acct SET bal = bal - 7 WHERE id = ?", (a,)).unwrap();
                t.exec_drop("UPDATE bank.acct SET bal = bal + 7 WHERE id = ?", (b,)).unwrap();
                t.exec_drop("INSERT INTO bank.moves (a, b, amt) VALUES (?, ?, 7)", (a, b)).unwrap();
                t.commit().unwrap();
                n += 1;
            }
            n
        }));
    }
    std::thread::sleep(Duration::from_millis(500));
    let dir = scratch("dump-bank");
    let out = dir.join("bank");
    let text = ok(&run(
        &sb,
        &[
            "dump",
            "-o",
            out.to_str().unwrap(),
            "--database",
            "bank",
            "--chunk-rows",
            "2000",
            "--threads",
            "4",
            "--json",
        ],
    ));
    // Transfers go on after the dump: a replica built from it must apply them.
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::Relaxed);
    let moved: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(moved > 100, "{moved} transfers during the test");
    let done: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(done["event"], "done");
    assert!(done["binlog_file"].as_str().is_some() && done["binlog_pos"].as_u64().unwrap() > 0, "{done}");
    let held = done["lock_held_ms"].as_f64().unwrap();
    assert!(held < 1000.0, "the lock was held {held} ms");
    assert!(text.lines().any(|l| l.contains("\"event\":\"chunk\"")), "progress events: {text}");

    ok(&run(&sb, &["load", out.to_str().unwrap(), "--rename", "bank:copy", "--no-binlog"]));
    let sum: i64 = c.query_first("SELECT SUM(bal) FROM copy.acct").unwrap().unwrap();
    assert_eq!(sum, total, "the dump saw one instant of the transfers");
    // The moves dumped are exactly those committed at the recorded position:
    // the binlog up to it holds as many move inserts.
    let moves: u64 = c.query_first("SELECT COUNT(*) FROM copy.moves").unwrap().unwrap();
    let file = done["binlog_file"].as_str().unwrap();
    let pos = done["binlog_pos"].as_u64().unwrap();
    let events: Vec<mysql::Row> = c.query(format!("SHOW BINLOG EVENTS IN '{file}'")).unwrap();
    let commits_before = events
        .iter()
        .filter(|r| r.get::<u64, _>(1).unwrap() < pos)
        .filter(|r| r.get::<String, _>(2).unwrap() == "Xid")
        .count() as u64;
    // Setup wrote no Xid events (the tables were filled in one statement each: 1 Xid).
    assert!(
        commits_before == moves || commits_before == moves + 1,
        "{moves} moves dumped, {commits_before} commits before the recorded position"
    );
    let dumped_sum_moves: i64 = c.query_first("SELECT COALESCE(SUM(amt), 0) FROM copy.moves").unwrap().unwrap();
    assert_eq!(dumped_sum_moves, 7 * moves as i64);

    // A replica built from the dump, started at the recorded GTID, applies
    // exactly the transfers after it and converges with the primary.
    let gtid = done["gtid_binlog_pos"].as_str().unwrap().to_string();
    assert!(!gtid.is_empty(), "{done}");
    let replica = Sandbox::start(Options { base_dir: Some(it_base()), ..Default::default() }).unwrap();
    ok(&run(&replica, &["load", out.to_str().unwrap(), "--threads", "3"]));
    replica
        .sql(&format!(
            "SET GLOBAL gtid_slave_pos = '{gtid}'; CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='repl', MASTER_USE_GTID=slave_pos; START SLAVE",
            sb.endpoint.port
        ))
        .unwrap();
    replica.wait_caught_up(&sb, Duration::from_secs(120)).unwrap();
    let mut r = replica.connect().unwrap();
    for t in ["acct", "moves"] {
        let (a, b) = (checksum(&mut c, "bank", t), checksum(&mut r, "bank", t));
        assert!(a.is_some() && a == b, "bank.{t}: primary {a:?}, replica {b:?}");
    }
    let n: u64 = r.query_first("SELECT COUNT(*) FROM bank.moves").unwrap().unwrap();
    assert!(n > moves, "the replica applied the transfers after the dump: {n} moves, {moves} dumped");
}

#[test]
fn the_snapshot_lock_names_the_query_that_blocks_it_and_kills_it_when_asked() {
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    c.query_drop("CREATE DATABASE g").unwrap();
    c.query_drop("CREATE TABLE g.t (id INT PRIMARY KEY)").unwrap();
    c.query_drop("INSERT INTO g.t VALUES (1)").unwrap();
    // A CREATE ... SELECT holds the backup lock's DDL share while it runs.
    let blocker = |secs: u32| {
        let mut b = sb.connect().unwrap();
        std::thread::spawn(move || {
            let _ = b.query_drop("SET SESSION max_statement_time = 0");
            b.query_drop(format!("CREATE TABLE g.slow SELECT SLEEP({secs}) AS s")).map_err(|e| e.to_string())
        })
    };
    let h = blocker(8);
    std::thread::sleep(Duration::from_millis(1500));
    let dir = scratch("dump-guard");
    let t0 = Instant::now();
    let o = run(&sb, &["dump", "-o", dir.join("a").to_str().unwrap(), "--databases", "g", "--lock-wait", "2s"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("CREATE TABLE g.slow SELECT SLEEP(8)") && err.contains("--kill-long-queries"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(12), "gave up after {:?}: {err}", t0.elapsed());
    assert!(!dir.join("a").join("pileup-dump.json").exists());
    assert!(h.join().unwrap().is_ok(), "the blocking statement was left alone");

    c.query_drop("DROP TABLE g.slow").unwrap();
    let h = blocker(30);
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    let o = run(&sb, &["dump", "-o", dir.join("b").to_str().unwrap(), "--databases", "g", "--kill-long-queries"]);
    ok(&o);
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("killed the query of connection"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = h.join().unwrap();
    assert!(r.is_err(), "the blocking statement was killed: {r:?}");
}

#[test]
fn a_load_killed_midway_resumes_to_an_identical_copy() {
    use std::io::BufRead;
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    c.query_drop("CREATE DATABASE r").unwrap();
    c.query_drop("USE r").unwrap();
    c.query_drop("CREATE TABLE r.big (id INT PRIMARY KEY, v VARCHAR(64), k INT, KEY (k))").unwrap();
    c.query_drop("INSERT INTO r.big SELECT seq, MD5(seq), seq % 1000 FROM seq_1_to_400000").unwrap();
    c.query_drop("CREATE TABLE r.small (a INT, b TEXT)").unwrap();
    c.query_drop("INSERT INTO r.small VALUES (1, 'one'), (2, 'two')").unwrap();
    c.query_drop("ANALYZE TABLE r.big").unwrap();
    let dir = scratch("dump-resume");
    let out = dir.join("r");
    ok(&run(&sb, &["dump", "-o", out.to_str().unwrap(), "--databases", "r", "--chunk-rows", "20000"]));

    // Killed after a few chunks are in.
    let mut args: Vec<String> = ["load", out.to_str().unwrap(), "--rename", "r:r2", "--threads", "2", "--json"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(conn_args(&sb));
    let mut child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut chunks = 0;
    while chunks < 3 {
        let l = lines.next().expect("the load reports chunks").unwrap();
        if l.contains("\"event\":\"chunk\"") {
            chunks += 1;
        }
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    let loaded: u64 = c.query_first("SELECT COUNT(*) FROM r2.big").unwrap().unwrap();
    assert!(loaded > 0 && loaded < 400_000, "{loaded} rows in when killed");
    // Its secondary index waits for the data.
    let idx: Vec<String> = c.query("SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'r2' AND TABLE_NAME = 'big'").unwrap();
    assert_eq!(idx, vec!["PRIMARY".to_string()]);

    // Without --resume the load refuses to touch it, and says how to go on.
    let again = run(&sb, &["load", out.to_str().unwrap(), "--rename", "r:r2"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));

    let done = ok(&run(&sb, &["load", out.to_str().unwrap(), "--rename", "r:r2", "--resume", "--verify", "--json"]));
    let last: serde_json::Value = serde_json::from_str(done.lines().last().unwrap()).unwrap();
    assert!(last["chunks_already_loaded"].as_u64().unwrap() >= 3, "{last}");
    for t in ["big", "small"] {
        assert_eq!(checksum(&mut c, "r", t), checksum(&mut c, "r2", t), "table {t}");
    }
    let n: u64 = c.query_first("SELECT COUNT(*) FROM r2.big").unwrap().unwrap();
    assert_eq!(n, 400_000);
    // The resumed load added the index the killed one had not.
    assert_eq!(show_create(&mut c, "r", "big"), show_create(&mut c, "r2", "big"));

    // --profile: the server's threads sampled while loading; where their
    // time went, and the folded stacks in a private file.
    let folded = dir.join("load.folded");
    let text = ok(&run(
        &sb,
        &["load", out.to_str().unwrap(), "--rename", "r:r3", "--profile", folded.to_str().unwrap(), "--json"],
    ));
    let p: serde_json::Value =
        serde_json::from_str(text.lines().find(|l| l.contains("\"event\":\"profile\"")).expect("a profile event"))
            .unwrap();
    assert!(p["samples"].as_u64().unwrap() >= 3, "{p}");
    let shares = p["shares"].as_array().unwrap();
    assert!(!shares.is_empty(), "working threads seen: {p}");
    assert!(shares.iter().all(|s| ["on CPU", "disk wait", "lock wait"].contains(&s["state"].as_str().unwrap())), "{p}");
    assert_eq!(std::fs::metadata(&folded).unwrap().permissions().mode() & 0o777, 0o600);
    let stacks = std::fs::read_to_string(&folded).unwrap();
    assert!(
        stacks.lines().count() > 1
            && stacks.lines().all(|l| l.rsplit_once(' ').is_some_and(|(_, n)| n.parse::<u64>().is_ok())),
        "{stacks}"
    );
    assert_eq!(checksum(&mut c, "r", "big"), checksum(&mut c, "r3", "big"));

    // The index build the load waited on at its end is said: it starts
    // after big's chunks, and once every chunk is in it is named as what
    // the load waits on alone, before it ends.
    let events: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let at = |event: &str| events.iter().position(|e| e["event"] == event);
    let indexing = &events[at("indexing").expect("an indexing event")];
    assert_eq!(
        (indexing["table"].as_str(), indexing["indexes"].as_u64(), indexing["rows"].as_u64()),
        (Some("r3.big"), Some(1), Some(400_000))
    );
    let only = at("only_indexing").expect("an only_indexing event");
    assert_eq!(events[only]["tables"], serde_json::json!(["r3.big"]));
    let last_chunk = events.iter().rposition(|e| e["event"] == "chunk").unwrap();
    let indexed = at("indexed").expect("an indexed event");
    assert!(last_chunk < only && only < indexed, "{events:?}");
    assert!(events[indexed]["seconds"].as_f64().unwrap() > 0.0);
    assert_eq!(events.iter().filter(|e| e["event"] == "indexing").count(), 1, "r.small has no index to defer");
}

fn show_create(c: &mut mysql::Conn, db: &str, t: &str) -> String {
    let r: (String, String) = c.query_first(format!("SHOW CREATE TABLE `{db}`.`{t}`")).unwrap().unwrap();
    r.1
}

#[test]
fn myloader_loads_pileups_mydumper_format_and_pileup_loads_mydumpers() {
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    fill(&mut c);
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let dir = scratch("dump-interop");

    // pileup → myloader 0.10.1.
    let ours = dir.join("ours");
    let bad = run(
        &sb,
        &["dump", "-o", ours.to_str().unwrap(), "--databases", "d1", "--layout", "mydumper", "--compress", "zstd"],
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--compress gzip or none"), "zstd is refused for myloader");
    // mydumper's format has no place for a sequence: refused, named.
    let seq = run(&sb, &["dump", "-o", ours.to_str().unwrap(), "--databases", "d1", "--layout", "mydumper"]);
    assert!(!seq.status.success() && String::from_utf8_lossy(&seq.stderr).contains("sequence"));
    c.query_drop("DROP SEQUENCE d1.s1").unwrap();
    let _ = std::fs::remove_dir_all(&ours);
    ok(&run(
        &sb,
        &["dump", "-o", ours.to_str().unwrap(), "--databases", "d1", "--layout", "mydumper", "--chunk-rows", "10000"],
    ));
    // myloader's format alone gives files myloader reads: gzip.
    assert!(ours.join("metadata").exists() && ours.join("d1.big.00001.sql.gz").exists());
    let ml = Command::new("myloader")
        .args(["-S", &sock, "-u", "root", "-d", ours.to_str().unwrap(), "-B", "m1", "-t", "2"])
        .output()
        .expect("myloader is installed (make deps)");
    assert!(ml.status.success(), "myloader: {}", String::from_utf8_lossy(&ml.stderr));
    for t in TABLES {
        assert_eq!(checksum(&mut c, "d1", t), checksum(&mut c, "m1", t), "myloader of pileup's dump: table {t}");
    }
    let v: usize = c.query_first("SELECT COUNT(*) FROM m1.v0").unwrap().unwrap();
    assert_eq!(v, 3);
    let f: i32 = c.query_first("SELECT m1.f1(5)").unwrap().unwrap();
    assert_eq!(f, 10);

    // mydumper 0.10.1 → pileup load.
    // mydumper 0.10.1 now and then never finishes: every file written, its
    // main thread waiting on a queue nothing posts to again. Bounded, and
    // tried again in a fresh directory.
    let mut theirs = dir.join("theirs-0");
    for attempt in 0..3 {
        theirs = dir.join(format!("theirs-{attempt}"));
        let md = Command::new("timeout")
            .args(["60", "mydumper", "-S", &sock, "-u", "root", "-B", "d1", "-o", theirs.to_str().unwrap()])
            .args(["-r", "10000", "-c", "-G", "-R", "-E", "-t", "2"])
            .output()
            .expect("mydumper is installed (make deps)");
        if md.status.success() {
            break;
        }
        assert!(attempt < 2 && md.status.code() == Some(124), "mydumper: {}", String::from_utf8_lossy(&md.stderr));
    }
    ok(&run(&sb, &["load", theirs.to_str().unwrap(), "--rename", "d1:m2", "--threads", "2"]));
    for t in TABLES {
        assert_eq!(checksum(&mut c, "d1", t), checksum(&mut c, "m2", t), "pileup load of mydumper's dump: table {t}");
    }
    // Each table's own STATS_AUTO_RECALC back after the data.
    assert!(show_create(&mut c, "m2", "idx").contains("STATS_AUTO_RECALC=1"));
    assert!(!show_create(&mut c, "m2", "big").contains("STATS_AUTO_RECALC"));
    let n: u64 = c
        .query_first("SELECT n_rows FROM mysql.innodb_table_stats WHERE database_name = 'm2' AND table_name = 'big'")
        .unwrap()
        .unwrap();
    assert!((50_000..=70_000).contains(&n), "m2.big's statistics say {n} rows, not about 60,000");
    let v: usize = c.query_first("SELECT COUNT(*) FROM m2.v0").unwrap().unwrap();
    assert_eq!(v, 3);
    let trig: usize =
        c.query_first("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'm2'").unwrap().unwrap();
    assert_eq!(trig, 1);
    let r = run(&sb, &["load", theirs.to_str().unwrap(), "--rename", "d1:m3", "--verify"]);
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("need the row counts"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
}

#[test]
fn accounts_and_grants_go_with_users_to_another_server() {
    let a = sandbox();
    let b = sandbox();
    let mut ca = a.connect().unwrap();
    ca.query_drop("CREATE DATABASE u1").unwrap();
    ca.query_drop("CREATE TABLE u1.t (id INT PRIMARY KEY)").unwrap();
    ca.query_drop("INSERT INTO u1.t VALUES (1), (2)").unwrap();
    ca.query_drop("CREATE USER 'app'@'localhost' IDENTIFIED BY 'pw-of-app'").unwrap();
    ca.query_drop("GRANT SELECT, INSERT ON u1.* TO 'app'@'localhost'").unwrap();
    let dir = scratch("dump-users");
    let out = dir.join("u");
    ok(&run(&a, &["dump", "-o", out.to_str().unwrap(), "--databases", "u1", "--users"]));
    ok(&run(&b, &["load", out.to_str().unwrap(), "--rename", "u1:u2"]));
    let mut cb = b.connect().unwrap();
    let grants: Vec<String> = cb.query("SHOW GRANTS FOR 'app'@'localhost'").unwrap();
    assert!(grants.iter().any(|g| g.contains("SELECT, INSERT ON `u2`.*")), "{grants:?}");
    // The account logs in with its password on the new server.
    let opts = mysql::OptsBuilder::new()
        .socket(Some(b.endpoint.socket.to_string_lossy().into_owned()))
        .user(Some("app"))
        .pass(Some("pw-of-app"));
    let mut app = mysql::Conn::new(opts).expect("the account and its password were loaded");
    let n: u64 = app.query_first("SELECT COUNT(*) FROM u2.t").unwrap().unwrap();
    assert_eq!(n, 2);
}

/// A dump of some tables takes the triggers of those tables and not the
/// others': a trigger on a table left out could not be created on load.
#[test]
fn a_dump_of_some_tables_takes_their_triggers_only_and_loads() {
    let sb = sandbox();
    let mut c = sb.connect().unwrap();
    fill(&mut c);
    let dir = scratch("dump-some");
    let triggers = |out: &std::path::Path| -> usize {
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("pileup-dump.json")).unwrap()).unwrap();
        m["objects"].as_array().unwrap().iter().filter(|o| o["kind"] == "trigger").count()
    };
    let with = dir.join("with");
    ok(&run(&sb, &["dump", "-o", with.to_str().unwrap(), "--include", r"^d1\.(t|nokey)$"]));
    assert_eq!(triggers(&with), 1, "nokey's trigger goes with nokey");
    let without = dir.join("without");
    ok(&run(&sb, &["dump", "-o", without.to_str().unwrap(), "--include", r"^d1\.t$"]));
    assert_eq!(triggers(&without), 0, "no trigger of a table left out");
    ok(&run(&sb, &["load", without.to_str().unwrap(), "--rename", "d1:d3"]));
    ok(&run(&sb, &["load", with.to_str().unwrap(), "--rename", "d1:d4"]));
    let n: u64 =
        c.query_first("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'd4'").unwrap().unwrap();
    assert_eq!(n, 1);
}
