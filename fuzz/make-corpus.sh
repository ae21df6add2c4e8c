#!/usr/bin/env bash
# Cut fuzz corpus inputs from relay logs a real MariaDB replica writes: every column
# type in ROW format (full row metadata), STATEMENT and MIXED statements,
# compressed events (log_bin_compress). Each input is the file's magic and
# format description followed by a window of consecutive events.
# Usage: fuzz/make-corpus.sh [path/to/pileup]   (run from the repository root)
set -euo pipefail
PILEUP=${1:-./target/release/pileup}
OUT=fuzz/corpus/decode
export PILEUP_SANDBOX_DIR=$(mktemp -d /tmp/pileup-corpus.XXXX)
trap '$PILEUP sandbox stop --all >/dev/null 2>&1 || true; rm -rf "$PILEUP_SANDBOX_DIR"' EXIT
$PILEUP sandbox start seedp --binlog --set binlog_row_metadata=FULL --set log_bin_compress=ON --set log_bin_compress_min_len=10 >/dev/null
$PILEUP sandbox start seedr --replica-of seedp --set relay_log_purge=OFF >/dev/null
sql() { mariadb --socket="$PILEUP_SANDBOX_DIR/$1/mysql.sock" -uroot -e "$2"; }
sql seedp "CREATE DATABASE d;
 CREATE TABLE d.types (id INT PRIMARY KEY, u INT UNSIGNED, big BIGINT, dec_ DECIMAL(12,3), vc VARCHAR(300), ch CHAR(10), dt DATETIME(6), ts TIMESTAMP(3) NULL, d DATE, tm TIME(2), e ENUM('x','y','z'), s SET('p','q','r'), b BIT(10), f FLOAT, g DOUBLE, txt TEXT, bl BLOB, j JSON, ti TINYINT, y YEAR, KEY (big), UNIQUE KEY (vc(20))) CHARSET utf8mb4;
 SET SESSION binlog_format='ROW';
 INSERT INTO d.types VALUES (1, 4294967295, -9223372036854775808, -123456789.125, 'héllo wörld', 'ch', '2024-02-29 13:45:07.123456', '2024-01-01 00:00:01.5', '2023-12-31', '-01:02:03.25', 'y', 'p,r', b'1010101010', 1.5, -2.25, 'text', 'blob', '{\"a\": [1, 2]}', -3, 2024);
 INSERT INTO d.types (id) VALUES (2), (3), (4);
 UPDATE d.types SET vc = CONCAT(id, REPEAT('x', 280)), big = big + 1, j = '[true, null]' WHERE id IN (1, 2);
 DELETE FROM d.types WHERE id = 3;
 SET SESSION binlog_format='STATEMENT';
 UPDATE d.types SET ti = ti + 1 WHERE id = 4;
 INSERT INTO d.types (id, vc) VALUES (10, 'stmt'), (11, _latin1'x''y');
 SET SESSION binlog_format='MIXED';
 INSERT INTO d.types (id, vc) VALUES (12, UUID());
 DELETE FROM d.types WHERE id = 10;
 ALTER TABLE d.types ADD COLUMN extra INT;
 INSERT INTO d.types (id, extra) VALUES (20, 7);"
sleep 2
sql seedr "FLUSH RELAY LOGS"
python3 - "$PILEUP_SANDBOX_DIR/seedr/data" "$OUT" <<'PY'
import glob, os, struct, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
n = 0
for f in sorted(glob.glob(os.path.join(src, "relay.0*"))):
    b = open(f, "rb").read()
    if b[:4] != b"\xfebin":
        continue
    events, off = [], 4
    while off + 19 <= len(b):
        ln = struct.unpack_from("<I", b, off + 9)[0]
        if ln < 19 or off + ln > len(b):
            break
        events.append(b[off:off + ln]); off += ln
    if len(events) < 2:
        continue
    fde = events[0]
    for i in range(1, len(events), 2):
        seed = b"\xfebin" + fde + b"".join(events[i:i + 6])
        open(os.path.join(out, f"seed-{os.path.basename(f)}-{i:04d}"), "wb").write(seed)
        n += 1
print(f"{n} inputs in {out}")
PY
