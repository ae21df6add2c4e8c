use std::io::Write;

use super::*;
use crate::attr::{self, A, N_ATTRS};
use crate::class::Hist;
use crate::{digest, Input, Options, Quiet};

/// A MariaDB slow log of `n` statements of six shapes over three minutes
/// from `t0`, their values drawn from `seed`.
fn log(seed: u64, n: usize, t0: i64) -> String {
    let mut s = seed;
    let mut rnd = move || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        s >> 33
    };
    let mut out = String::new();
    for k in 0..n {
        let ts = t0 + (k * 180 / n) as i64;
        let q = match rnd() % 6 {
            0 => format!("SELECT * FROM orders WHERE id = {k}"),
            1 => format!("UPDATE stock SET n = n - 1 WHERE sku = 'x{k}'"),
            2 => format!("SELECT c FROM t WHERE k BETWEEN {} AND {}", k, k + 10),
            3 => format!("INSERT INTO log VALUES ({k}, 'x')"),
            4 => format!("DELETE FROM sess WHERE id = {k}"),
            _ => format!("SELECT COUNT(*) FROM users WHERE email = 'u{k}@example.com'"),
        };
        let qt = (1 + rnd() % 50_000) as f64 * 1e-6;
        let (sent, examined, full) = (rnd() % 20, rnd() % 5000, if rnd() % 4 == 0 { "Yes" } else { "No" });
        // A fifth of the statements log neither their bytes nor their
        // plan's flags: those attributes' and flags' counts are not the
        // class's.
        let more = if rnd() % 5 == 0 {
            String::new()
        } else {
            format!(
                "# Rows_affected: 0  Bytes_sent: {}\n# Full_scan: {full}  Full_join: No  Tmp_table: No  Tmp_table_on_disk: No\n\
                 # Filesort: No  Filesort_on_disk: No  Merge_passes: 0  Priority_queue: No\n",
                100 + sent * 40
            )
        };
        out += &format!(
            "# User@Host: app[app] @ web{h} [10.0.0.{h}]\n# Thread_id: {k}  Schema: shop  QC_hit: No\n\
             # Query_time: {qt:.6}  Lock_time: 0.000010  Rows_sent: {sent}  Rows_examined: {examined}\n\
             {more}SET timestamp={ts};\n{q};\n",
            h = rnd() % 3,
        );
    }
    out
}

fn digest_of(logs: &[&str]) -> crate::Digest {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<Input> = logs
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let p = dir.path().join(format!("slow{i}.log"));
            std::fs::File::create(&p).unwrap().write_all(l.as_bytes()).unwrap();
            Input::File(p)
        })
        .collect();
    let o = Options { jobs: 2, block_size: 4096, by_minute: true, ..Options::default() };
    digest(&inputs, &o, &mut Quiet).unwrap()
}

/// Two classes hold the same statements: counts, every attribute's count,
/// sum (to rounding: summed in another order), extremes, the statement
/// time's histogram, flags and times.
fn assert_same(a: &Class, b: &Class) {
    let fp = String::from_utf8_lossy(&a.fingerprint);
    assert_eq!((a.count, a.first, a.last, a.flags), (b.count, b.first, b.last, b.flags), "{fp}");
    for i in 0..N_ATTRS {
        let (x, y) = (a.stat(attr::from_index(i)), b.stat(attr::from_index(i)));
        let (Some(x), Some(y)) = (x, y) else {
            assert!(a.stat(attr::from_index(i)).is_none() && b.stat(attr::from_index(i)).is_none(), "{fp} attr {i}");
            continue;
        };
        // Extremes unknown (NaN) on both sides are the same.
        let same = |a: f64, b: f64| a == b || a.is_nan() && b.is_nan();
        assert!(x.n == y.n && same(x.min, y.min) && same(x.max, y.max), "{fp} attr {i}: {x:?} {y:?}");
        assert!((x.sum - y.sum).abs() <= 1e-9 * x.sum.abs().max(1.0), "{fp} attr {i}: {} {}", x.sum, y.sum);
    }
    let (qa, qb) = (a.stat(A::QueryTime).unwrap(), b.stat(A::QueryTime).unwrap());
    assert_eq!(qa.hist.buckets().collect::<Vec<_>>(), qb.hist.buckets().collect::<Vec<_>>(), "{fp}");
    for q in [0.5, 0.95, 0.99] {
        assert_eq!(qa.quantile(q, false), qb.quantile(q, false), "{fp} p{q}");
    }
}

fn by_fp(classes: &[Class]) -> std::collections::BTreeMap<Vec<u8>, &Class> {
    classes.iter().map(|c| (c.fingerprint.to_vec(), c)).collect()
}

#[test]
fn two_hosts_stored_and_merged_are_one_digest_of_both_logs() {
    let t0 = 1_796_011_200;
    let (a, b) = (log(1, 3000, t0), log(2, 2000, t0 + 30));
    let labels = vec![("env".to_string(), "prod".to_string())];
    let mut stored = vec![];
    for (host, l) in [("db-a", &a), ("db-b", &b)] {
        let d = digest_of(&[l]);
        let rows = rows_of(d.minutes.unwrap().by_minute, host, &labels);
        let bytes = file::write(&rows, Samples::Redacted).unwrap();
        let back = file::read(bytes.into(), None).unwrap();
        assert_eq!(back.len(), rows.len());
        assert!(back.iter().all(|r| r.host == host && r.labels == labels));
        stored.extend(back);
    }
    // Some attributes and flags were not logged by every statement.
    let some = |r: &Row| r.class.stat(A::BytesSent).is_some_and(|s| u64::from(s.n) < r.class.count);
    assert!(stored.iter().any(some), "a row whose bytes_sent not every statement logged");
    assert!(stored.iter().any(|r| u64::from(r.class.flags[1].0) < r.class.count));
    let both = digest_of(&[&a, &b]);
    // Per minute: the two hosts' rows of a minute are that minute of both.
    let minutes = both.minutes.as_ref().unwrap();
    assert_eq!(minutes.untimed, 0);
    assert_eq!(minutes.by_minute.len(), 4, "three minutes and the half of a fourth");
    for (m, classes) in &minutes.by_minute {
        let merged = merge_by_class(stored.iter().filter(|r| r.minute == *m).cloned());
        assert_eq!(merged.len(), classes.len(), "minute {m}");
        for c in &merged {
            assert_same(c, &classes[&c.fingerprint]);
        }
    }
    // Over the whole time: the classes of one digest of both logs.
    let merged = merge_by_class(stored.clone());
    let (want, got) = (by_fp(&both.classes), by_fp(&merged));
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>());
    for (fp, c) in &want {
        assert_same(c, got[fp]);
    }
    // Merged as `--from` merges (column by column, on two threads
    // joined): the same classes, samples and hosts.
    let q = merge::Question { since: 0, until: i64::MAX, hosts: None };
    let (mut m, mut other) = (merge::Merge::default(), merge::Merge::default());
    let half = stored.len() / 2;
    m.add(stored[..half].to_vec(), &q).unwrap();
    other.add(stored[half..].to_vec(), &q).unwrap();
    m.join(other);
    let columnar = m.finish(vec![], 0);
    assert_eq!(columnar.digest.events, both.classes.iter().map(|c| c.count).sum::<u64>());
    let got = by_fp(&columnar.digest.classes);
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>());
    for (fp, c) in &want {
        assert_same(c, got[fp]);
        let row_merged = by_fp(&merged)[fp];
        assert_eq!(got[fp].sample.query, row_merged.sample.query);
        assert_eq!(got[fp].sample.query_time, row_merged.sample.query_time);
        assert_eq!(got[fp].dbs.sorted(), row_merged.dbs.sorted());
        assert_eq!(got[fp].series.points, row_merged.series.points);
    }
    let hosts = &columnar.hosts.hosts;
    assert_eq!(hosts.keys().collect::<Vec<_>>(), ["db-a", "db-b"]);
    for (name, h) in hosts {
        let theirs: Vec<&Row> = stored.iter().filter(|r| r.host == *name).collect();
        assert_eq!(h.total.count, theirs.iter().map(|r| r.class.count).sum::<u64>(), "{name}");
        assert_eq!(h.labels, labels);
        let minutes: std::collections::BTreeSet<i64> = theirs.iter().map(|r| r.minute).collect();
        assert_eq!(h.minutes, minutes, "{name}");
    }
    // A question of one host and two minutes reads only those rows.
    let glob = globset::Glob::new("db-b").unwrap().compile_matcher();
    let q = merge::Question { since: t0 + 60, until: t0 + 180, hosts: Some(glob) };
    let mut m = merge::Merge::default();
    m.add(stored.clone(), &q).unwrap();
    let want: u64 = stored
        .iter()
        .filter(|r| r.host == "db-b" && (t0 + 60..t0 + 180).contains(&r.minute))
        .map(|r| r.class.count)
        .sum();
    assert_eq!(m.finish(vec![], 0).digest.events, want);
    // Samples are redacted: no literal of the log is stored.
    let samples: Vec<&[u8]> = stored.iter().map(|r| &*r.class.sample.query).collect();
    assert!(samples.iter().all(|s| !s.is_empty() && !s.windows(12).any(|w| w == b"@example.com")), "{samples:?}");
    assert!(samples.iter().any(|s| s.starts_with(b"SELECT COUNT(*) FROM users WHERE email = ?")));
}

#[test]
fn a_projection_reads_only_the_columns_asked_for_and_samples_can_be_left_out() {
    let d = digest_of(&[&log(3, 500, 1_796_011_200)]);
    let rows = rows_of(d.minutes.unwrap().by_minute, "db-c", &[]);
    let bytes = bytes::Bytes::from(file::write(&rows, Samples::None).unwrap());
    let all = file::read(bytes.clone(), None).unwrap();
    assert!(all.iter().all(|r| r.class.sample.query.is_empty()), "no sample stored");
    let some = file::read(bytes, Some(&["query_time_n", "query_time_sum"])).unwrap();
    for (s, a) in some.iter().zip(&all) {
        assert_eq!((s.minute, s.class.count), (a.minute, a.class.count));
        assert_eq!(s.class.sum(A::QueryTime), a.class.sum(A::QueryTime));
        assert!(s.class.stat(A::RowsExamined).is_none(), "a column not asked for is not read");
    }
}

#[test]
fn a_file_of_another_fingerprint_version_is_refused_by_name() {
    let d = digest_of(&[&log(4, 50, 1_796_011_200)]);
    let rows = rows_of(d.minutes.unwrap().by_minute, "db-d", &[]);
    let batch = rows::to_batch(&rows, Samples::Full).unwrap();
    let i = batch.schema().index_of("fingerprint_version").unwrap();
    let mut cols = batch.columns().to_vec();
    cols[i] = std::sync::Arc::new(arrow_array::UInt16Array::from(vec![99u16; batch.num_rows()]));
    let other = arrow_array::RecordBatch::try_new(batch.schema(), cols).unwrap();
    let e = rows::from_batch(&other).unwrap_err().to_string();
    assert!(e.contains("fingerprint version 99"), "{e}");
    // Through a file read for a few columns too.
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, other.schema(), None).unwrap();
    w.write(&other).unwrap();
    w.close().unwrap();
    let e = file::read(buf.into(), Some(&["query_time_sum"])).unwrap_err().to_string();
    assert!(e.contains("fingerprint version 99"), "{e}");
}

/// The stored histogram's percentiles against the exact values of the
/// statements stored, over times spread as a log's are (a few microseconds
/// to seconds): a bucket is 1/16 of a power of two wide and a percentile
/// is its bucket's middle, so the error is at most half a bucket: 1/32,
/// 3.125%, for a value at the low edge of a power of two's first bucket;
/// the same after any merge, since merging adds counts bucket by bucket.
#[test]
fn stored_percentiles_are_within_half_a_bucket_of_the_exact_values() {
    let mut seed = 11u64;
    let mut rnd = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut worst: f64 = 0.0;
    for round in 0..20 {
        // Log-uniform from 10 µs to 10 s, a different spread each round.
        let span = 2.0 + round as f64 * 0.2;
        let mut v: Vec<f64> = (0..5000).map(|_| 1e-5 * 10f64.powf(rnd() * span)).collect();
        let mut h = Hist::default();
        for x in &v {
            h.add(*x, 1);
        }
        let stored = Hist::from_buckets(h.buckets());
        v.sort_by(f64::total_cmp);
        for q in [0.5, 0.9, 0.95, 0.99, 0.999] {
            let exact = v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
            let got = stored.quantile(q, false);
            worst = worst.max((got - exact).abs() / exact);
        }
    }
    assert!(worst <= 1.0 / 32.0 + 1e-12, "worst relative error {worst}");
    eprintln!("worst relative error of p50–p99.9 over 20 spreads: {:.2}%", worst * 100.0);
    assert!(worst > 0.01, "the bound is met, not vacuous: {worst}");
}

#[test]
fn minutes_put_classes_past_max_classes_in_other_as_the_whole_digest_does() {
    let l = log(5, 3000, 1_796_011_200);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("slow.log");
    std::fs::write(&p, &l).unwrap();
    // Four threads, each free to keep its own four classes of the six.
    let o = Options { jobs: 4, block_size: 4096, by_minute: true, max_classes: 4, windows: None };
    let d = digest(&[Input::File(p)], &o, &mut Quiet).unwrap();
    assert_eq!(d.classes.len(), 4);
    let other = d.other.as_ref().expect("two classes went to other");
    let rows = rows_of(d.minutes.unwrap().by_minute, "db-e", &[]);
    let merged = merge_by_class(rows);
    let (want, got) = (by_fp(&d.classes), by_fp(&merged));
    assert_eq!(got.len(), 5, "the four classes and other");
    for (fp, c) in &want {
        assert_same(c, got[fp]);
    }
    assert_eq!(got[crate::aggregate::OTHER].count, other.count);
}

/// Windows handed over as a digest goes, and when.
#[derive(Default)]
struct Windows(Vec<window::Window>, Vec<std::time::Instant>);

impl crate::Sink for Windows {
    fn window(&mut self, w: window::Window) {
        self.0.push(w);
        self.1.push(std::time::Instant::now());
    }
}

#[test]
fn a_followed_log_hands_over_each_window_once_the_clock_passes_it_and_the_rest_at_the_end() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("slow.log");
    // Three minutes an hour ago, then two more while followed.
    let t0 = (chrono::Utc::now().timestamp() / 60) * 60 - 3600;
    std::fs::write(&p, log(7, 300, t0)).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (p2, s2) = (p.clone(), stop.clone());
    let stopped = std::sync::Arc::new(std::sync::Mutex::new(None));
    let at = stopped.clone();
    let later = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(2500));
        let mut f = std::fs::OpenOptions::new().append(true).open(&p2).unwrap();
        f.write_all(log(8, 100, t0 + 600).as_bytes()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2500));
        *at.lock().unwrap() = Some(std::time::Instant::now());
        s2.store(true, Ordering::Relaxed);
    });
    let o = Options {
        jobs: 2,
        block_size: 4096,
        windows: Some(crate::WindowOptions { minutes: 5, grace_s: 60 }),
        ..Options::default()
    };
    let mut sink = Windows::default();
    let d = digest(&[Input::Follow(p, stop)], &o, &mut sink).unwrap();
    later.join().unwrap();
    // Every statement is in exactly one window, each window once.
    let in_windows: u64 =
        sink.0.iter().flat_map(|w| w.minutes.values()).flat_map(|c| c.values()).map(|c| c.count).sum();
    assert_eq!((d.events, in_windows), (400, 400));
    let starts: Vec<(i64, u32)> = sink.0.iter().map(|w| (w.start - t0, w.part)).collect();
    let mut sorted = starts.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), starts.len(), "{starts:?}");
    assert!(sink.0.iter().all(|w| w.part == 0), "{starts:?}");
    // The first log's windows went while the file was followed, before the stop.
    let stopped = stopped.lock().unwrap().unwrap();
    assert!(sink.1.iter().filter(|t| **t < stopped).count() >= 1, "{starts:?}");
    assert!(d.minutes.is_some_and(|m| m.by_minute.is_empty()));
}

#[test]
fn an_hours_histograms_kept_on_each_classs_first_row_merge_to_the_same_classes() {
    let t0 = 1_796_011_200;
    let mut rows = vec![];
    for (host, seed) in [("db-a", 5), ("db-b", 6)] {
        let d = digest_of(&[&log(seed, 2000, t0 + 60)]);
        rows.extend(rows_of(d.minutes.unwrap().by_minute, host, &[]));
    }
    let before = merge_by_class(rows.clone());
    // Stored and read back as a compacted hour is.
    rows.reverse();
    hourly_histograms(&mut rows);
    let bytes = file::write(&rows, Samples::Redacted).unwrap();
    let back = file::read(bytes.into(), None).unwrap();
    let with_hist = |r: &&Row| r.class.stat(A::QueryTime).is_some_and(|s| s.hist.buckets().next().is_some());
    let mut firsts = std::collections::BTreeMap::new();
    for r in &back {
        let e = firsts.entry((r.host.clone(), r.class.fingerprint.clone())).or_insert(r.minute);
        *e = (*e).min(r.minute);
    }
    let kept: Vec<&Row> = back.iter().filter(with_hist).collect();
    assert_eq!(kept.len(), firsts.len(), "one row per host and class keeps a distribution");
    assert!(kept.iter().all(|r| firsts[&(r.host.clone(), r.class.fingerprint.clone())] == r.minute), "its first");
    assert!(back.len() > 2 * kept.len());
    // Merged as `--from` merges a compacted file, whose rows come by host,
    // class and minute: a run of rows per class and host.
    let mut sorted = back.clone();
    sorted.sort_by(|a, b| (&a.host, &a.class.fingerprint, a.minute).cmp(&(&b.host, &b.class.fingerprint, b.minute)));
    let q = merge::Question { since: 0, until: i64::MAX, hosts: None };
    let mut m = merge::Merge::default();
    m.add(sorted, &q).unwrap();
    let columnar = m.finish(vec![], 0).digest.classes;
    let after = merge_by_class(back);
    let want = by_fp(&before);
    for got in [by_fp(&after), by_fp(&columnar)] {
        assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>());
        for (fp, c) in &want {
            assert_same(c, got[fp]);
            assert_eq!(c.dbs.sorted(), got[fp].dbs.sorted());
            assert_eq!(c.sample.query_time, got[fp].sample.query_time);
        }
    }
    // A row's minute is its series' point: both merges make the same.
    let (rows_merged, runs_merged) = (by_fp(&after), by_fp(&columnar));
    for (fp, c) in &rows_merged {
        assert_eq!(c.series.points, runs_merged[fp].series.points);
        assert_eq!((c.first, c.last), (runs_merged[fp].first, runs_merged[fp].last));
    }
}

#[test]
fn a_large_file_is_read_a_row_group_at_a_time_to_the_same_rows() {
    let d = digest_of(&[&log(7, 200, 1_796_011_200)]);
    let base = rows_of(d.minutes.unwrap().by_minute, "db-a", &[]);
    let rows: Vec<Row> = (0..file::ROW_GROUP_ROWS + 100)
        .map(|i| {
            let mut r = base[i % base.len()].clone();
            r.host = format!("db-{}", i / base.len());
            r
        })
        .collect();
    let f = file::Opened::open(file::write(&rows, Samples::None).unwrap().into()).unwrap();
    assert_eq!(f.row_groups(), 2);
    let (mut all, mut groups) = (0, vec![0; 2]);
    f.read(None, None, |r| all += r.len()).unwrap();
    for (g, n) in groups.iter_mut().enumerate() {
        f.read(Some(&[]), Some(g), |r| *n += r.len()).unwrap();
    }
    assert_eq!((all, groups), (rows.len(), vec![file::ROW_GROUP_ROWS, 100]));
}

/// A stored row keeps no distribution but the statement time's: an
/// attribute zero in one row and not in another has no percentile after
/// the merge (not one read from the zeros alone); one whose every value is
/// the same has that value as every percentile.
#[test]
fn percentiles_of_attributes_stored_without_a_distribution_are_unknown_unless_every_value_is_one() {
    let row = |minute: i64, count: u64, examined: (f64, f64, f64)| {
        let mut class = Class::new(Box::from(&b"select c from t where id = ?"[..]));
        class.count = count;
        let n = count as u32;
        let mut qt = Hist::default();
        qt.add(0.001, n);
        class.add_stat(
            A::QueryTime as usize,
            &crate::class::Stat { n, sum: 0.001 * count as f64, min: 0.001, max: 0.001, hist: qt },
        );
        let (sum, min, max) = examined;
        class.add_stat(A::RowsExamined as usize, &crate::class::Stat { n, sum, min, max, hist: Hist::Empty });
        class
            .add_stat(A::RowsSent as usize, &crate::class::Stat { n, sum: 0.0, min: 0.0, max: 0.0, hist: Hist::Empty });
        Row { minute, host: "db-a".into(), labels: vec![], class }
    };
    let rows = vec![row(1_796_011_200, 3, (0.0, 0.0, 0.0)), row(1_796_011_260, 2, (10.0, 5.0, 5.0))];
    let back = file::read(file::write(&rows, Samples::None).unwrap().into(), None).unwrap();
    let q = merge::Question { since: 0, until: i64::MAX, hosts: None };
    let mut m = merge::Merge::default();
    m.add(back.clone(), &q).unwrap();
    let columnar = m.finish(vec![], 0).digest.classes;
    for c in [&merge_by_class(back)[0], &columnar[0]] {
        let ex = c.stat(A::RowsExamined).unwrap();
        assert_eq!((ex.n, ex.sum, ex.min, ex.max), (5, 10.0, 0.0, 5.0));
        assert!(ex.quantile(0.95, true).is_nan(), "{ex:?}");
        let sent = c.stat(A::RowsSent).unwrap();
        assert_eq!((sent.n, sent.quantile(0.95, true)), (5, 0.0));
        let qt = c.stat(A::QueryTime).unwrap();
        assert_eq!(qt.hist.buckets().map(|b| b.1).sum::<u32>(), 5);
    }
}

/// A compacted file's columns carry their null counts: a reader leaves out
/// the columns no row of a group holds (the attributes the log lacks), and
/// reads the same rows as from a window's file.
#[test]
fn a_compacted_files_empty_columns_are_not_read_and_its_rows_are_the_same() {
    let d = digest_of(&[&log(8, 500, 1_796_011_200)]);
    let rows = rows_of(d.minutes.unwrap().by_minute, "db-a", &[("env".into(), "prod".into())]);
    let mut w = file::Writer::new(Samples::Redacted, vec![], file::Codec::Zstd).unwrap();
    w.write(&rows).unwrap();
    let compacted = file::Opened::open(w.finish().unwrap().into()).unwrap();
    let window = file::Opened::open(file::write(&rows, Samples::Redacted).unwrap().into()).unwrap();
    let names = |f: &file::Opened| {
        let mut cols = vec![];
        f.batches(None, None, |b| {
            cols = b.schema().fields().iter().map(|f| f.name().clone()).collect();
            Ok(())
        })
        .unwrap();
        cols
    };
    let (all, kept) = (names(&window), names(&compacted));
    // Every column but `class_id` (for engines: pileup names a class from
    // its fingerprint).
    assert_eq!(all.len(), rows::schema().fields().len() - 1);
    assert!(!all.contains(&"class_id".to_string()));
    assert!(kept.contains(&"query_time_sum".to_string()) && kept.contains(&"labels".to_string()), "{kept:?}");
    assert!(!kept.contains(&"pages_read_sum".to_string()), "a column the log never logged: {kept:?}");
    let (mut a, mut b) = (vec![], vec![]);
    window.read(None, None, |r| a.extend(r)).unwrap();
    compacted.read(None, None, |r| b.extend(r)).unwrap();
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((x.minute, &x.host, &x.labels), (y.minute, &y.host, &y.labels));
        assert_same(&x.class, &y.class);
        assert_eq!(x.class.sample.query, y.class.sample.query);
    }
}

/// Rows as a compacted hour holds them (by host, class and minute, in two
/// row groups), of which some know a sum only, some name another database
/// within a run, an attribute held in one row group only, and a host whose
/// first row has no labels; read a row group at a time as `--from` reads
/// them, each into its own merge, joined: what merging each row's class
/// gives, with each host's cost per class and the rows kept for a
/// comparison.
#[test]
fn a_compacted_hour_read_a_row_group_at_a_time_merges_as_its_rows() {
    use crate::class::{Few, Name, Sample, Stat};
    let (hosts, minutes, t0) = (400usize, 60i64, 1_796_011_200i64);
    let mut rows = vec![];
    for h in 0..hosts {
        for j in 0..3u32 {
            for m in 0..minutes {
                let count = 1 + (h as u64 + u64::from(j) + m as u64) % 5;
                let n = count as u32;
                let mut class = Class::new(format!("select c from t{j} where id = ?").into_bytes().into());
                class.count = count;
                let v = 0.001 * f64::from(1 + j) * (1.0 + (m % 7) as f64 / 10.0);
                let mut hist = Hist::default();
                if m == 0 {
                    hist.add(v, n);
                }
                class.add_stat(A::QueryTime as usize, &Stat { n, sum: v * count as f64, min: v, max: v, hist });
                // Sums only (as performance_schema gives them).
                let lock = Stat { n, sum: 1e-5 * count as f64, min: f64::NAN, max: f64::NAN, hist: Hist::Empty };
                class.add_stat(A::LockTime as usize, &lock);
                if h >= 370 {
                    let sent = Stat { n, sum: 3.0 * count as f64, min: 1.0, max: 5.0, hist: Hist::Empty };
                    class.add_stat(A::RowsSent as usize, &sent);
                }
                let db: Name = Name::from(format!("shop{}", m / 20).as_bytes());
                class.dbs = Few { values: smallvec::smallvec![(db.clone(), count)], others: 0 };
                class.sample = Sample {
                    query: format!("select c from t{j} where id = {m}").into_bytes().into(),
                    db: Some(db),
                    query_time: v * (1.0 + (m % 13) as f64 / 100.0),
                    ..Sample::default()
                };
                class.first = Some(t0 + m * 60 + 1);
                class.last = Some(t0 + m * 60 + 59);
                class.series.add(t0 + m * 60, n, (v * count as f64) as f32);
                let labels = if h == 0 && m == 0 { vec![] } else { vec![("env".to_string(), "prod".to_string())] };
                rows.push(Row { minute: t0 + m * 60, host: format!("db-{h:03}"), labels, class });
            }
        }
    }
    let mut w = file::Writer::new(Samples::Full, vec![], file::Codec::Zstd).unwrap();
    w.write(&rows).unwrap();
    let bytes: bytes::Bytes = w.finish().unwrap().into();
    let f = file::Opened::open(bytes.clone()).unwrap();
    assert_eq!(f.row_groups(), 2);
    let back = file::read(bytes, None).unwrap();
    let q = merge::Question { since: t0, until: t0 + 3600, hosts: None };
    let mut all = merge::Merge::keeping_samples();
    for g in 0..2 {
        let mut m = merge::Merge::keeping_samples();
        f.batches(None, Some(g), |b| m.add_batch(b, &q)).unwrap();
        all.join(m);
    }
    let merged = all.finish(vec![], 0);
    let want = merge_by_class(back.clone());
    let got = by_fp(&merged.digest.classes);
    assert_eq!(want.len(), got.len());
    for c in &want {
        let g = got[&c.fingerprint.to_vec()];
        assert_same(c, g);
        let lock = g.stat(A::LockTime).unwrap();
        assert!(lock.min.is_nan() && (lock.sum - c.sum(A::LockTime)).abs() < 1e-9, "sums only: {lock:?}");
        assert_eq!(g.stat(A::RowsSent).map(|s| s.n), c.stat(A::RowsSent).map(|s| s.n));
        assert_eq!(c.dbs.sorted(), g.dbs.sorted());
        assert_eq!((&c.sample.query, c.sample.query_time), (&g.sample.query, g.sample.query_time));
        // Points of the same slices and counts; their f32 times summed in
        // another order.
        assert_eq!(c.series.points.len(), g.series.points.len());
        for (a, b) in c.series.points.iter().zip(&g.series.points) {
            assert!(a.0 == b.0 && a.1 == b.1 && (a.2 - b.2).abs() <= 1e-5 * a.2.abs().max(1.0), "{a:?} {b:?}");
        }
        // Each host's share of the class, and the rows kept to compare.
        let fp = &c.fingerprint;
        let mut costs: std::collections::BTreeMap<&str, (u64, f64)> = Default::default();
        let mut kept: Vec<(u64, f64)> = vec![];
        for r in back.iter().filter(|r| &r.class.fingerprint == fp) {
            let e = costs.entry(&r.host).or_default();
            e.0 += r.class.count;
            e.1 += r.class.sum(A::QueryTime);
            kept.push((r.class.count, r.class.sum(A::QueryTime)));
        }
        let by_host = &merged.hosts.by_class[fp];
        assert_eq!(by_host.len(), hosts);
        for (host, cost) in by_host {
            let (count, time) = costs[host.as_str()];
            assert_eq!(cost.count, count, "{host}");
            assert!((cost.time - time).abs() < 1e-9, "{host}");
        }
        let mut rows_kept = merged.samples.as_ref().unwrap()[fp].clone();
        let order = |v: &mut Vec<(u64, f64)>| v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        order(&mut rows_kept);
        order(&mut kept);
        assert_eq!(rows_kept, kept);
    }
    let h0 = &merged.hosts.hosts["db-000"];
    assert_eq!(h0.labels, vec![("env".to_string(), "prod".to_string())], "labels from the first row that has some");
    assert_eq!(h0.minutes.len(), minutes as usize);
}

/// The profile alone (`--profile-only`) of two hosts' stored minutes, read
/// for its columns only: each class's count, statement time (sum and
/// extremes), rows examined and what the ranking scores by are the whole
/// read's; nothing else is kept (no percentiles, flags not read, series,
/// databases or samples), and the text shows the profile with each class's
/// hosts, without a class in detail or a missing attribute it did not read.
#[test]
fn the_profile_alone_reads_its_columns_and_gives_the_whole_reads_figures() {
    use crate::rank::Rank;
    use crate::report::View;
    let t0 = 1_796_011_200;
    let mut rows = vec![];
    for (host, seed) in [("db-a", 11), ("db-b", 12)] {
        let d = digest_of(&[&log(seed, 2000, t0)]);
        rows.extend(rows_of(d.minutes.unwrap().by_minute, host, &[]));
    }
    rows.sort_by(|a, b| (&a.host, &a.class.fingerprint, a.minute).cmp(&(&b.host, &b.class.fingerprint, b.minute)));
    let f = file::Opened::open(file::write(&rows, Samples::Full).unwrap().into()).unwrap();
    let q = merge::Question { since: t0, until: t0 + 3600, hosts: None };
    let read = |columns: Option<&[&str]>, m: merge::Merge| {
        let mut m = m;
        f.batches(columns, None, |b| m.add_batch(b, &q)).unwrap();
        m.finish(vec!["s3://b/p".into()], 0)
    };
    let whole = read(None, merge::Merge::default());
    for rank in [Rank::Time, Rank::Examined, Rank::Optimizer, Rank::Spill] {
        let cols = file::profile_columns(rank);
        let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
        assert!(!cols.contains(&"bytes_sent_sum") && !cols.contains(&"sample"), "{cols:?}");
        let narrow = read(Some(&cols), merge::Merge::default().keeping(file::profile_keep(rank)));
        let got = by_fp(&narrow.digest.classes);
        assert_eq!(whole.digest.classes.len(), got.len());
        let (shown, flags) = crate::report::profile_attributes(rank);
        for c in &whole.digest.classes {
            let g = got[&c.fingerprint.to_vec()];
            assert_eq!(c.count, g.count);
            for a in &shown {
                let (x, y) = (c.stat(*a), g.stat(*a));
                let (x, y) = (x.as_deref(), y.as_deref());
                assert_eq!(x.map(|s| (s.n, s.min, s.max)), y.map(|s| (s.n, s.min, s.max)), "{a:?}");
                assert!((x.map_or(0.0, |s| s.sum) - y.map_or(0.0, |s| s.sum)).abs() < 1e-9, "{a:?}");
            }
            assert_eq!(crate::rank::score(c, rank), crate::rank::score(g, rank), "{rank:?}");
            assert!(g.stat(A::BytesSent).is_none() && c.stat(A::BytesSent).is_some());
            let qt = g.stat(A::QueryTime).unwrap();
            assert!(qt.quantile(0.95, false).is_nan() || qt.min == qt.max, "no histogram read");
            for (i, (w, n)) in c.flags.iter().zip(&g.flags).enumerate() {
                assert_eq!(*n, if flags.contains(&i) { *w } else { (0, 0) }, "flag {i}");
            }
            assert!(g.series.points.is_empty() && g.dbs.sorted().is_empty() && g.sample.query.is_empty());
            assert_eq!(whole.hosts.by_class[&c.fingerprint], narrow.hosts.by_class[&c.fingerprint]);
        }
    }
    let narrow = {
        let cols = file::profile_columns(Rank::Time);
        let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
        read(Some(&cols), merge::Merge::default().keeping(file::profile_keep(Rank::Time)))
    };
    let view = View { rank: Rank::Time, limit: 3, profile_only: true };
    let text = crate::report::text::render(&narrow.digest, &view, Some(&narrow.hosts));
    assert!(text.contains("Max  Exam/call  Hosts  Statement"), "{text}");
    let top = &narrow.digest.classes[0];
    let line = text.lines().find(|l| l.contains(&crate::report::id(&top.fingerprint))).unwrap();
    let max = top.stat(A::QueryTime).unwrap().max;
    assert!(line.contains(&format!("{:.2}ms", max * 1e3)), "the maximum in place of the p95: {line}");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let hosts_at = text.lines().find(|l| l.contains("Hosts")).unwrap().split_whitespace().position(|w| w == "Hosts");
    assert_eq!(fields.get(hosts_at.unwrap()), Some(&"2"), "two hosts: {line}");
    assert!(!text.contains("# Class 1:") && !text.contains("no pages"), "{text}");
    // JSON: no signal but the ranking's, and the hosts' labels unknown
    // (not read), not empty.
    fn report<'a>(d: &'a crate::Digest, h: &'a merge::Hosts, view: View) -> crate::output::DigestReport<'a> {
        crate::output::DigestReport { digest: d, view, advice: None, indexes: None, hosts: Some(h), changes: None }
    }
    let json = serde_json::to_value(report(&narrow.digest, &narrow.hosts, view.clone())).unwrap();
    assert_eq!(json["profile_only"], true);
    assert_eq!(json["classes"][0]["signals"], serde_json::json!({}), "{}", json["classes"][0]);
    assert!(json["fleet"]["hosts"][0]["labels"].is_null());
    let whole_json =
        serde_json::to_value(report(&whole.digest, &whole.hosts, View { profile_only: false, ..view.clone() }));
    let whole_json = whole_json.unwrap();
    assert!(
        whole_json["classes"][0]["signals"]["spills"].is_number()
            && whole_json["fleet"]["hosts"][0]["labels"].is_object()
    );
    let whole_text = crate::report::text::render(&whole.digest, &View { profile_only: false, ..view }, None);
    assert!(whole_text.contains("# Class 1:") && whole_text.contains("no pages"), "{whole_text}");
}
