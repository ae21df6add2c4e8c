#!/usr/bin/env bash
# The demo: a throwaway MariaDB sandbox under sysbench load, its stacks
# captured by pileup into a text report, a flame graph and a call graph,
# and its lock contention profiled beside them.
set -euo pipefail
out=${1:-./pileup-demo}
root=$(cd "$(dirname "$0")/.." && pwd)
pileup=$root/target/release/pileup
mkdir -p "$out"
export PILEUP_SANDBOX_DIR=${PILEUP_SANDBOX_DIR:-$(mktemp -d /tmp/pileup-demo.XXXXXX)}
name=demo
cleanup() {
  [ -n "${sb_pid:-}" ] && kill "$sb_pid" 2>/dev/null || true
  "$pileup" sandbox stop "$name" >/dev/null 2>&1 || true
  rm -rf "$PILEUP_SANDBOX_DIR"
}
trap cleanup EXIT

echo "== starting a throwaway MariaDB sandbox"
"$pileup" sandbox start "$name" --json > "$out/sandbox.json"
sock=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["socket"])' "$out/sandbox.json")
pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$out/sandbox.json")
mariadb -S "$sock" -u root -e "CREATE DATABASE sbtest"
sb=(sysbench oltp_read_write --db-driver=mysql --mysql-socket="$sock" --mysql-user=root --tables=4 --table-size=20000)
echo "== loading sysbench data"
"${sb[@]}" prepare >/dev/null
echo "== running sysbench with 32 connections for 30 s"
"${sb[@]}" --threads=32 --time=30 --report-interval=5 run > "$out/sysbench.txt" &
sb_pid=$!
sleep 4
echo "== capturing: 40 samples, 100 ms apart"
"$pileup" stacks --pid "$pid" -S "$sock" -u root --samples 40 --interval-ms 100 --format json -o "$out/stacks.json"
p() { "$pileup" stacks --pid "$pid" -S "$sock" -u root "$@"; }
p --samples 20 --interval-ms 100 --stats -o "$out/report.txt" 2> "$out/capture-stats.txt"
p --samples 20 --interval-ms 100 --format svg --thread-root -o "$out/flamegraph.svg"
p --samples 20 --interval-ms 100 --format dot -o "$out/callgraph.dot"
dot -Tsvg "$out/callgraph.dot" -o "$out/callgraph.svg"
p --focus accept --samples 20 --interval-ms 50 --format folded -o "$out/accept-thread.folded"
echo "== lock profile: 5 s of contended waits (eBPF), and a flame graph of the time waited"
if "$pileup" locks --pid "$pid" -S "$sock" -u root --duration 5s -o "$out/locks.txt" 2> "$out/locks-error.txt"; then
  "$pileup" locks --pid "$pid" -S "$sock" -u root --duration 3s -o "$out/locks.svg"
  rm -f "$out/locks-error.txt"
else
  echo "   skipped: $(cat "$out/locks-error.txt")"
fi
wait "$sb_pid" || true
sb_pid=
echo "== done; results in $out (files are mode 0600: they hold query text)"
ls -l "$out"
echo
head -n 12 "$out/report.txt"
grep '^# ' "$out/report.txt" | head -n 8
if [ -f "$out/locks.txt" ]; then echo; head -n 14 "$out/locks.txt"; fi
