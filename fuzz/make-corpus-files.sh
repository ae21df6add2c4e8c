#!/usr/bin/env bash
# Seed the fuzz corpora of the files users feed pileup, from what a real
# MariaDB, pileup and mydumper write: slow logs (every log_slow_verbosity,
# plain, gzip and zstd; windows of them), a pileup dump's manifest and
# mydumper's files, and a watch capture's evidence. Option files are kept
# by hand (corpus/mycnf). Usage: fuzz/make-corpus-files.sh [path/to/pileup]
# (run from the repository root).
set -euo pipefail
PILEUP=${1:-./target/release/pileup}
export PILEUP_SANDBOX_DIR=$(mktemp -d /tmp/pileup-corpus.XXXX)
work=$(mktemp -d /tmp/pileup-corpus-work.XXXX)
trap '$PILEUP sandbox stop --all >/dev/null 2>&1 || true; rm -rf "$PILEUP_SANDBOX_DIR" "$work"' EXIT
$PILEUP sandbox start seed --set slow_query_log=ON --set long_query_time=0 \
  --set log_slow_verbosity=query_plan,explain,innodb,engine --set "slow_query_log_file=$work/slow.log" >/dev/null
sock="$PILEUP_SANDBOX_DIR/seed/mysql.sock"
sql() { mariadb --socket="$sock" -uroot "$@"; }
sql -e "CREATE DATABASE d; USE d;
 CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(40), c BLOB, KEY (a));
 INSERT INTO t SELECT seq, seq % 10, CONCAT('row ', seq, ' é\"\\\\'), UNHEX(HEX(seq)) FROM seq_1_to_2000;
 SELECT COUNT(*) FROM t WHERE a IN (1,2,3) AND b LIKE 'row 1%';
 SELECT a, COUNT(*) FROM t GROUP BY a ORDER BY 2 DESC;
 UPDATE t SET b = 'x' WHERE id = 5; DELETE FROM t WHERE id = 6;
 SELECT * FROM t t1 JOIN t t2 ON t1.a = t2.id WHERE t1.id < 50;
 SELECT /* comment */ 'a;b', \`b\` FROM t WHERE id = 7;
 CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.a = NEW.a + 1;
 CREATE VIEW v AS SELECT id, a FROM t;"
sql -e "SET GLOBAL log_slow_verbosity = ''; SELECT SLEEP(0.01); SELECT id FROM d.t WHERE id = 9;"
out=fuzz/corpus/slowlog; mkdir -p $out
cp "$work/slow.log" $out/seed-full
head -c 4096 "$work/slow.log" > $out/seed-head
tail -c 6000 "$work/slow.log" > $out/seed-tail
gzip -c "$work/slow.log" > $out/seed-gzip
zstd -q -c "$work/slow.log" > $out/seed-zstd
# A dump in pileup's layout and in mydumper's, as each writes it.
$PILEUP dump -S "$sock" -u root --databases d -o "$work/p" --compress none >/dev/null
$PILEUP dump -S "$sock" -u root --databases d -o "$work/m" --layout mydumper --compress none >/dev/null
mydumper -S "$sock" -u root -B d -o "$work/my" >/dev/null 2>&1 || true
out=fuzz/corpus/dumpfiles; mkdir -p $out
cp "$work/p/pileup-dump.json" $out/seed-manifest
# mydumper writes what pileup's mydumper layout writes but for its views.
for f in "$work"/m/*.sql "$work"/my/*-schema-view.sql; do [ -f "$f" ] && head -c 16384 "$f" > "$out/seed-$(basename "$(dirname "$f")")-$(basename "$f")"; done
# A capture: a trigger that holds from the start.
$PILEUP watch -S "$sock" -u root --pid auto --data-dir "$work/w" --interval 200ms --duration 6s \
  --trigger 'poll_ok > 0 for 1s' >/dev/null 2>&1 || true
out=fuzz/corpus/capture; mkdir -p $out
for d in "$work"/w/captures/*/; do
  cp "$d/evidence.json" "$out/seed-evidence"; cp "$d/metrics.json" "$out/seed-metrics" 2>/dev/null || true; break
done
ls fuzz/corpus/*/ | wc -l
