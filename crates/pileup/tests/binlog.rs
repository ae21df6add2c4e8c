//! `pileup binlog` against relay logs written by a real MariaDB replica:
//! every format decodes to what the primary wrote, row images replay to the
//! primary's tables, corruption is named and skipped, rotation is followed.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use mysql::prelude::Queryable;
use pileup_sandbox::{Options, Sandbox};
use serde_json::Value as J;

fn pair(cnf: &[(&str, &str)]) -> (Sandbox, Sandbox) {
    let base = it_base();
    let primary = Sandbox::start(Options {
        base_dir: Some(base.clone()),
        binlog: true,
        cnf: cnf.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    })
    .unwrap();
    let replica = Sandbox::start(Options {
        base_dir: Some(base),
        replica_of: Some(primary.endpoint.clone()),
        ..Default::default()
    })
    .unwrap();
    (primary, replica)
}

fn caught_up(primary: &Sandbox, replica: &Sandbox) {
    replica.wait_caught_up(primary, Duration::from_secs(60)).unwrap();
}

/// The files listed in a server's relay log or binlog index, in order.
fn index_files(sb: &Sandbox, var: &str) -> Vec<PathBuf> {
    let (index, datadir): (String, String) =
        sb.connect().unwrap().query_first(format!("SELECT @@{var}, @@datadir")).unwrap().unwrap();
    let index = Path::new(&datadir).join(index);
    std::fs::read_to_string(&index)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let p = Path::new(l);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                Path::new(&datadir).join(p)
            }
        })
        .collect()
}

fn decode(files: &[PathBuf]) -> Vec<J> {
    let mut args = vec!["binlog".to_string(), "--format".into(), "json".into()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let out = Command::new(env!("CARGO_BIN_EXE_pileup")).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect()
}

/// What a transaction stream says, without where it was stored: GTIDs,
/// statements and row images, in order. (ANNOTATE_ROWS reach a relay log
/// only when the replica asks for them, so they are left out.)
/// A replica inflates MariaDB's compressed events as it receives them, so
/// `Query_compressed` and `Query` (etc.) are the same change.
fn changes(events: &[J]) -> Vec<J> {
    events
        .iter()
        .map(|e| (e, e["type"].as_str().unwrap().replace("_compressed", "")))
        .filter(|(_, t)| matches!(t.as_str(), "Gtid" | "Query" | "Write_rows_v1" | "Update_rows_v1" | "Delete_rows_v1" | "Xid"))
        .map(|(e, t)| serde_json::json!({"type": t, "gtid": e["gtid"], "sql": e["sql"], "table": e["table"], "rows": e["rows"]}))
        .collect()
}

/// The two streams are the same; on a difference, name the first one.
fn same_changes(a: &[J], b: &[J], what: &str) {
    let (a, b) = (changes(a), changes(b));
    if let Some(i) = (0..a.len().min(b.len())).find(|&i| a[i] != b[i]) {
        panic!("{what}: change {i} differs:\n relay:   {}\n primary: {}", a[i], b[i]);
    }
    assert_eq!(a.len(), b.len(), "{what}: number of changes");
}

/// Replay row events into tables keyed by their `id` column.
fn replay(events: &[J]) -> BTreeMap<String, BTreeMap<i64, J>> {
    let mut t: BTreeMap<String, BTreeMap<i64, J>> = BTreeMap::new();
    for e in events {
        let Some(rows) = e["rows"].as_array() else { continue };
        let table = t.entry(e["table"].as_str().unwrap().to_string()).or_default();
        for r in rows {
            // Named columns (binlog_row_metadata=FULL) or positions.
            let id = |img: &J| img.get("id").or_else(|| img.get("@1")).and_then(|v| v.as_i64()).unwrap();
            if let Some(b) = r.get("before") {
                assert!(table.remove(&id(b)).is_some(), "before image of a row that does not exist: {b}");
            }
            if let Some(a) = r.get("after") {
                table.insert(id(a), a.clone());
            }
        }
    }
    t
}

#[test]
fn row_format_relay_log_replays_to_the_primarys_tables() {
    let (primary, replica) = pair(&[("binlog_format", "ROW"), ("binlog_row_metadata", "FULL")]);
    let mut load = sysbench(&primary, "oltp_write_only", 4, 5);
    primary
        .sql(
            "CREATE TABLE sbtest.types (id INT PRIMARY KEY, u INT UNSIGNED, big BIGINT, dec_ DECIMAL(12,3), vc VARCHAR(300), ch CHAR(10), dt DATETIME(6), ts TIMESTAMP(3) NULL, d DATE, tm TIME(2), e ENUM('x','y','z'), s SET('p','q','r'), b BIT(10), f FLOAT, g DOUBLE, txt TEXT, bl BLOB, j JSON, ti TINYINT, y YEAR) CHARSET utf8mb4;
             INSERT INTO sbtest.types VALUES (1, 4294967295, -9223372036854775808, -123456789.125, 'héllo wörld', 'ch', '2024-02-29 13:45:07.123456', '2024-01-01 00:00:01.5', '2023-12-31', '-01:02:03.25', 'y', 'p,r', b'1010101010', 1.5, -2.25, 'text', 'blob', '{\"a\": [1, 2]}', -3, 2024);
             INSERT INTO sbtest.types (id) VALUES (2);
             UPDATE sbtest.types SET big = big + 1, vc = REPEAT('x', 290) WHERE id = 1;",
        )
        .unwrap();
    assert!(load.wait().unwrap().success());
    caught_up(&primary, &replica);

    let relay_files = index_files(&replica, "relay_log_index");
    let relay = decode(&relay_files);
    let tables = replay(&relay);
    // --stats counts exactly the rows the events hold.
    let mut args = vec!["binlog".to_string(), "--stats".into(), "--format".into(), "json".into()];
    args.extend(relay_files.iter().map(|f| f.display().to_string()));
    let out = Command::new(env!("CARGO_BIN_EXE_pileup")).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st: J = serde_json::from_slice(&out.stdout).unwrap();
    let rows: usize = relay.iter().filter_map(|e| e["rows"].as_array()).map(|r| r.len()).sum();
    assert_eq!(st["rows"].as_u64().unwrap() as usize, rows);
    assert_eq!(st["events"].as_u64().unwrap() as usize, relay.len());
    let sb1 = &st["by_table"]["sbtest.sbtest1"];
    assert!(sb1[0].as_u64().unwrap() >= 2000 && sb1[1].as_u64().unwrap() > 0 && sb1[2].as_u64().unwrap() > 0, "{sb1}");
    let mut c = primary.connect().unwrap();
    for t in ["sbtest1", "sbtest2"] {
        let rows: Vec<(i64, i64, String, String)> = c.query(format!("SELECT id, k, c, pad FROM sbtest.{t}")).unwrap();
        let decoded = &tables[&format!("sbtest.{t}")];
        assert_eq!(decoded.len(), rows.len(), "{t}: row count");
        for (id, k, cc, pad) in rows {
            let r = &decoded[&id];
            assert_eq!(
                (r["k"].as_i64().unwrap(), r["c"].as_str().unwrap(), r["pad"].as_str().unwrap()),
                (k, cc.as_str(), pad.as_str()),
                "{t} id {id}"
            );
        }
    }
    // Every column type decodes to what the server itself prints.
    let want: mysql::Row = c
        .query_first("SELECT u, big, CAST(dec_ AS CHAR), vc, ch, CAST(dt AS CHAR), UNIX_TIMESTAMP(ts), CAST(d AS CHAR), CAST(tm AS CHAR), e + 0, s + 0, b + 0, f, g, txt, bl, j, ti, y FROM sbtest.types WHERE id = 1")
        .unwrap()
        .unwrap();
    let got = &tables["sbtest.types"][&1];
    let cols =
        ["u", "big", "dec_", "vc", "ch", "dt", "ts", "d", "tm", "e", "s", "b", "f", "g", "txt", "bl", "j", "ti", "y"];
    for (i, name) in cols.iter().enumerate() {
        let server: String = match want.get::<mysql::Value, _>(i).unwrap() {
            mysql::Value::Bytes(b) => String::from_utf8(b).unwrap(),
            mysql::Value::Int(v) => v.to_string(),
            mysql::Value::UInt(v) => v.to_string(),
            mysql::Value::Float(v) => v.to_string(),
            mysql::Value::Double(v) => v.to_string(),
            v => panic!("{name}: unexpected {v:?}"),
        };
        let mine = match &got[*name] {
            J::String(s) => s.clone(),
            other => other.to_string(),
        };
        assert_eq!(mine, server, "column {name}");
    }
    assert!(tables["sbtest.types"][&2]["u"].is_null());

    // The relay log holds exactly what the primary's binlog holds.
    let primary_log = decode(&index_files(&primary, "log_bin_index"));
    same_changes(&relay, &primary_log, "ROW");
}

#[test]
fn statement_and_mixed_formats_decode_to_what_the_primary_wrote() {
    for format in ["STATEMENT", "MIXED"] {
        let (primary, replica) = pair(&[("binlog_format", format)]);
        primary
            .sql(
                "CREATE DATABASE d; CREATE TABLE d.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64), n INT);
                 INSERT INTO d.t (v, n) VALUES ('a', 1), ('b', 2);
                 UPDATE d.t SET n = n + 10 WHERE v = 'a';
                 INSERT INTO d.t (v, n) VALUES (UUID(), 3);
                 DELETE FROM d.t WHERE v = 'b';",
            )
            .unwrap();
        caught_up(&primary, &replica);
        let relay = decode(&index_files(&replica, "relay_log_index"));
        let primary_log = decode(&index_files(&primary, "log_bin_index"));
        same_changes(&relay, &primary_log, format);
        let sql: Vec<&str> = relay.iter().filter(|e| e["type"] == "Query").filter_map(|e| e["sql"].as_str()).collect();
        assert!(sql.iter().any(|s| s.starts_with("UPDATE d.t SET n = n + 10")), "{format}: {sql:?}");
        let uuid_rows = relay.iter().any(|e| e["type"] == "Write_rows_v1" && e["table"] == "d.t");
        // MIXED logs the non-deterministic UUID() insert as rows; STATEMENT as a statement.
        assert_eq!(uuid_rows, format == "MIXED", "{format}");
    }
}

#[test]
fn corruption_is_named_and_skipped_and_a_torn_tail_is_read_up_to_the_cut() {
    let (primary, replica) = pair(&[("binlog_format", "ROW")]);
    primary.sql("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v INT)").unwrap();
    for i in 0..50 {
        primary.sql(&format!("INSERT INTO d.t VALUES ({i}, {i})")).unwrap();
    }
    caught_up(&primary, &replica);
    let files = index_files(&replica, "relay_log_index");
    let last = files.last().unwrap();
    let events = decode(std::slice::from_ref(last));
    // Damage the body of the 30th event of a copy.
    let victim = &events[30];
    let (off, end) = (victim["offset"].as_u64().unwrap(), victim["end"].as_u64().unwrap());
    let dir = scratch("binlog-corrupt");
    let copy = dir.join("relay.000009");
    let mut bytes = std::fs::read(last).unwrap();
    bytes[(off + 21) as usize] ^= 0x5a;
    std::fs::write(&copy, &bytes).unwrap();
    let out = pileup(&["binlog", "--format", "json", copy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "damaged input, the rest printed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("at offset {off}: corrupt event"))
            && err.contains("checksum mismatch")
            && err.contains(&format!("resynchronised at offset {end}")),
        "{err}"
    );
    let after: Vec<J> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(after.len(), events.len() - 1, "every other event is still read");
    assert_eq!(after.last().unwrap()["offset"], events.last().unwrap()["offset"]);

    // A file cut inside an event (a server still writing it) is read up to
    // the cut, and the exit status says the input was not whole.
    let torn = dir.join("relay.000010");
    let cut = events[40]["offset"].as_u64().unwrap() + 7;
    std::fs::write(&torn, &std::fs::read(last).unwrap()[..cut as usize]).unwrap();
    let out = pileup(&["binlog", "--format", "json", torn.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 40);
    assert!(String::from_utf8_lossy(&out.stderr).contains("ends inside an event"));

    // Not a binlog at all: one line, the fix.
    let out = pileup(&["binlog", "/etc/hostname"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("is not a binlog or relay log file") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn follow_tails_the_relay_log_across_rotation() {
    let (primary, replica) = pair(&[("binlog_format", "ROW")]);
    primary.sql("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(20))").unwrap();
    caught_up(&primary, &replica);
    let first = index_files(&replica, "relay_log_index").last().unwrap().clone();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["binlog", "--follow", "--format", "json", first.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str::<J>(&l).unwrap());
        }
    });
    primary.sql("INSERT INTO d.t VALUES (1, 'before-rotation')").unwrap();
    caught_up(&primary, &replica);
    replica.sql("FLUSH RELAY LOGS").unwrap();
    primary.sql("INSERT INTO d.t VALUES (2, 'after-rotation')").unwrap();
    caught_up(&primary, &replica);
    let t0 = Instant::now();
    let mut seen = vec![];
    while t0.elapsed() < Duration::from_secs(20) {
        if let Ok(e) = rx.recv_timeout(Duration::from_millis(200)) {
            let done = e["rows"][0]["after"]["@2"] == "after-rotation";
            seen.push(e);
            if done {
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let find = |v: &str| {
        seen.iter().find(|e| e["rows"][0]["after"]["@2"] == v).unwrap_or_else(|| panic!("{v} not seen: {seen:?}"))
    };
    let (a, b) = (find("before-rotation"), find("after-rotation"));
    assert_ne!(a["file"], b["file"], "the second insert is read from the next relay log file");
}

#[test]
fn compressed_events_decode() {
    let (primary, replica) =
        pair(&[("binlog_format", "MIXED"), ("log_bin_compress", "ON"), ("log_bin_compress_min_len", "10")]);
    primary
        .sql(
            "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v TEXT);
             INSERT INTO d.t VALUES (1, REPEAT('statement-logged ', 20));
             INSERT INTO d.t VALUES (2, CONCAT(UUID(), REPEAT(' row-logged', 30)));
             UPDATE d.t SET v = CONCAT(v, UUID()) WHERE id = 1;
             SET SESSION binlog_format = 'ROW'; DELETE FROM d.t WHERE id = 2;",
        )
        .unwrap();
    caught_up(&primary, &replica);
    // The primary's binlog holds the compressed events; its replica's relay
    // log the same changes, inflated on receipt.
    let binlog = decode(&index_files(&primary, "log_bin_index"));
    let relay = decode(&index_files(&replica, "relay_log_index"));
    same_changes(&relay, &binlog, "compressed");
    let types: Vec<&str> = binlog.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for t in ["Query_compressed", "Write_rows_compressed_v1", "Update_rows_compressed_v1", "Delete_rows_compressed_v1"]
    {
        assert!(types.contains(&t), "{t} not in {types:?}");
    }
    let q = binlog
        .iter()
        .find(|e| e["type"] == "Query_compressed" && e["sql"].as_str().unwrap().starts_with("INSERT"))
        .unwrap();
    assert_eq!(q["sql"], "INSERT INTO d.t VALUES (1, REPEAT('statement-logged ', 20))");
    let v: String = primary.connect().unwrap().query_first("SELECT v FROM d.t WHERE id = 1").unwrap().unwrap();
    let u = binlog.iter().find(|e| e["type"] == "Update_rows_compressed_v1").unwrap();
    assert_eq!(u["rows"][0]["after"]["@2"].as_str().unwrap(), v);
}

/// Decode a file with the library, as the prefetcher does, every row of
/// every event; returns how many events decoded. Must never panic.
fn decode_all(path: &Path, verify: bool) -> usize {
    pileup_binlog::check::decode_everything(path, verify, 100_000)
}

#[test]
fn mutated_relay_logs_never_crash_the_decoder() {
    // A relay log with every column type in it, then a few thousand
    // deterministic corruptions: flipped bytes, truncations, and garbage
    // lengths, read with checksums on (caught, resynchronised) and off (the
    // decoders themselves see the damage).
    let (primary, replica) = pair(&[("binlog_format", "ROW"), ("binlog_row_metadata", "FULL")]);
    primary
        .sql(
            "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, u BIGINT UNSIGNED, dec_ DECIMAL(20,6), vc VARCHAR(300), ch CHAR(255), dt DATETIME(6), ts TIMESTAMP(6) NULL, d DATE, tm TIME(3), e ENUM('a','b'), s SET('x','y'), b BIT(17), f FLOAT, g DOUBLE, bl LONGBLOB, j JSON, y YEAR) CHARSET utf8mb4;
             INSERT INTO d.t VALUES (1, 18446744073709551615, -12345678901234.123456, 'v', 'c', '2020-01-01 01:02:03.000004', '2021-02-03 04:05:06.7', '1999-12-31', '-838:59:59.999', 'b', 'x,y', b'10101010101010101', -1.25, 3.5, REPEAT('z', 1000), '[1, {\"a\": null}]', 1999);
             UPDATE d.t SET vc = REPEAT('w', 299), tm = '12:00:00.5' WHERE id = 1; DELETE FROM d.t WHERE id = 1;",
        )
        .unwrap();
    caught_up(&primary, &replica);
    let file = index_files(&replica, "relay_log_index").last().unwrap().clone();
    let clean = std::fs::read(&file).unwrap();
    let dir = scratch("binlog-mutate");
    let target = dir.join("relay.000001");
    std::fs::write(&target, &clean).unwrap();
    let whole = decode_all(&target, true);
    assert!(whole > 10);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..600 {
        let mut b = clean.clone();
        match round % 3 {
            0 => {
                for _ in 0..1 + rnd() % 4 {
                    let i = 4 + (rnd() as usize) % (b.len() - 4);
                    b[i] ^= 1 << (rnd() % 8);
                }
            }
            1 => b.truncate(4 + (rnd() as usize) % (b.len() - 4)),
            _ => {
                // A plausible-looking but wrong length or count somewhere.
                let i = 4 + (rnd() as usize) % (b.len() - 8);
                b[i..i + 4].copy_from_slice(&(rnd() as u32 % 70_000).to_le_bytes());
            }
        }
        std::fs::write(&target, &b).unwrap();
        decode_all(&target, true);
        decode_all(&target, false);
    }
}
