#!/usr/bin/env bash
# The fleet demo: two MariaDB sandboxes under sysbench load, each with
# `pileup watch` (shipping its captures to an S3 store) and mysqld_exporter;
# a Prometheus scraping all four with pileup's rules and consoles; a
# VersityGW store. A row-lock convoy is provoked on one host. The demo
# ends when the stall alert fires in Prometheus, the capture is in the
# store and a screenshot of the fleet console shows the stall; it fails
# (exit 1) if the alert takes more than 30 s.
#
#   bash scripts/demo-fleet.sh [OUT]     (PILEUP=path/to/pileup to choose the binary)
set -euo pipefail
out=$(mkdir -p "${1:-./pileup-demo-fleet}" && cd "${1:-./pileup-demo-fleet}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
pileup=${PILEUP:-$root/target/release/pileup}
work=$(mktemp -d /tmp/pileup-demo-fleet.XXXXXX)
export PILEUP_SANDBOX_DIR=$work/sandboxes
versitygw=$(command -v versitygw || echo "$(go env GOPATH)/bin/versitygw")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for h in a b; do "$pileup" sandbox stop "fleet-$h" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
json() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.2; done; echo "nothing listens on $1" >&2; return 1; }

echo "== an S3 store (VersityGW)"
s3_port=$(free_port)
mkdir -p "$work/s3/captures"
ROOT_ACCESS_KEY=demo ROOT_SECRET_KEY=demo-secret-123 "$versitygw" --port "127.0.0.1:$s3_port" posix "$work/s3" \
  > "$work/versitygw.log" 2>&1 &
pids+=($!)
wait_port "$s3_port"
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo-secret-123 AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$s3_port

targets_pileup=""
targets_mysql=""
for h in a b; do
  echo "== host $h: a sandbox under sysbench load, pileup watch, mysqld_exporter"
  "$pileup" sandbox start "fleet-$h" --json > "$work/$h.json"
  sock=$(json "$work/$h.json" socket); pid=$(json "$work/$h.json" pid); port=$(json "$work/$h.json" port)
  mariadb -S "$sock" -u root -e "CREATE DATABASE sbtest"
  sb=(sysbench oltp_read_write --db-driver=mysql --mysql-socket="$sock" --mysql-user=root --tables=2 --table-size=10000)
  "${sb[@]}" prepare > /dev/null
  "${sb[@]}" --threads=2 --time=600 --rate=50 run > "$work/sysbench-$h.txt" 2>&1 &
  pids+=($!)
  wp=$(free_port)
  "$pileup" watch -S "$sock" -u root --pid "$pid" --data-dir "$work/watch-$h" --listen "127.0.0.1:$wp" \
    --ship s3://captures/demo --ship-host "host-$h" > "$work/watch-$h.log" 2>&1 &
  pids+=($!)
  ep=$(free_port)
  DATA_SOURCE_NAME="root@unix($sock)/" prometheus-mysqld-exporter --web.listen-address="127.0.0.1:$ep" \
    > "$work/exporter-$h.log" 2>&1 &
  pids+=($!)
  wait_port "$wp"; wait_port "$ep"
  targets_pileup+="      - targets: ['127.0.0.1:$wp']"$'\n'"        labels: {instance: 'host-$h:$port'}"$'\n'
  targets_mysql+="      - targets: ['127.0.0.1:$ep']"$'\n'"        labels: {instance: 'host-$h:$port'}"$'\n'
done
sock_a=$(json "$work/a.json" socket); port_a=$(json "$work/a.json" port)

echo "== Prometheus: scraping the four, pileup's rules loaded, consoles served"
prom_port=$(free_port)
cat > "$work/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
  evaluation_interval: 2s
rule_files:
  - $root/deploy/prometheus/pileup.rules.yml
scrape_configs:
  - job_name: pileup
    static_configs:
$targets_pileup
  - job_name: mysql
    # mysqld_exporter runs dozens of queries per scrape: give it time on a
    # busy machine.
    scrape_interval: 5s
    scrape_timeout: 5s
    static_configs:
$targets_mysql
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" \
  --web.console.templates="$root/deploy/prometheus/consoles" \
  --web.console.libraries="$root/deploy/prometheus/console_libraries" > "$work/prometheus.log" 2>&1 &
pids+=($!)
wait_port "$prom_port"
prom=http://127.0.0.1:$prom_port
q() { curl -sG "$prom/api/v1/query" --data-urlencode "query=$1"; }
echo "   waiting for all four targets to be up"
count() { q "$1" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)'; }
# A target is up when one of its scrapes in the last 10 s answered: on a
# busy machine a single scrape can miss its 2 s timeout.
upped() { count "sum(max_over_time(up{job='$1'}[10s]))"; }
for _ in $(seq 90); do
  [ "$(upped pileup)" = 2 ] && [ "$(upped mysql)" = 2 ] && break
  sleep 1
done
# The demo needs both watchers; an exporter slow to answer is said, not fatal.
[ "$(upped pileup)" = 2 ] || {
  echo "the watchers are not both up: $(q 'up')" >&2
  tail -n 5 "$work"/watch-*.log >&2
  exit 1
}
[ "$(upped mysql)" = 2 ] || echo "   note: not every mysqld_exporter answers its scrapes in time: $(q "up{job='mysql'} == 0")"
echo "   the watchers learn their servers' usual (20 s)"
sleep 20

echo "== the stall: a transaction holds a row, 20 writers queue behind it (host a)"
mariadb -S "$sock_a" -u root sbtest -e "BEGIN; UPDATE sbtest1 SET k = k + 1 WHERE id = 1; SELECT SLEEP(40); ROLLBACK" &
pids+=($!)
sleep 0.5
began=$(date +%s.%N)
for _ in $(seq 20); do
  mariadb -S "$sock_a" -u root sbtest -e "SET innodb_lock_wait_timeout = 50; UPDATE sbtest1 SET k = k + 1 WHERE id = 1" \
    > /dev/null 2>&1 &
  pids+=($!)
done

echo "== waiting for MySQLStallCaptured to fire on host a for the convoy"
# (Other captures, e.g. a poll that timed out on a busy machine, fire it
# too, each with its own class: the demo waits for the one it provoked.)
fired=""
for _ in $(seq 120); do
  r=$(q "ALERTS{alertname='MySQLStallCaptured', alertstate='firing', instance='host-a:$port_a', class='row_lock_convoy'}")
  if echo "$r" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'; then
    fired=$(date +%s.%N); break
  fi
  sleep 0.5
done
[ -n "$fired" ] || {
  echo "the alert did not fire in 60 s for the convoy; firing: $(q "ALERTS{alertstate='firing'}")" >&2
  tail -5 "$work/watch-a.log" >&2
  exit 1
}
secs=$(python3 -c "print(f'{$fired - $began:.1f}')")
# The alert names its class; its description, where the capture is.
curl -s "$prom/api/v1/alerts" | python3 -c 'import json,sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    l = a["labels"]
    if l.get("alertname") == "MySQLStallCaptured" and l.get("instance") == sys.argv[1] and l.get("class") == "row_lock_convoy":
        print("   firing on %s: %s. %s" % (l["instance"], l["class"], a["annotations"]["description"]))' "host-a:$port_a"
echo "   fired ${secs} s after the stall began"
echo "$secs" > "$out/alert-seconds.txt"

echo "== the capture in the store"
for _ in $(seq 60); do
  "$pileup" captures --from s3://captures/demo --json > "$out/store.json" 2>/dev/null || true
  [ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["captures"]))' "$out/store.json" 2>/dev/null || echo 0)" -gt 0 ] && break
  sleep 1
done
"$pileup" captures --from s3://captures/demo | tee "$out/store.txt"
grep -q "row lock convoy" "$out/store.txt" || { echo "no row-lock convoy capture in the store" >&2; exit 1; }

echo "== the fleet console, in headless Chromium"
chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
  --window-size=1400,1200 --virtual-time-budget=5000 --user-data-dir="$work/chromium" \
  --screenshot="$out/fleet-console.png" "$prom/consoles/pileup-fleet.html" > /dev/null 2>&1
curl -s "$prom/consoles/pileup-fleet.html" > "$out/fleet-console.html"
grep -q "row lock convoy" "$out/fleet-console.html" || { echo "the console does not show the stall" >&2; exit 1; }
ls -l "$out"
python3 -c "import sys; sys.exit(0 if $secs <= 30 else 1)" || { echo "the alert took ${secs} s (more than 30)" >&2; exit 1; }
echo "== done: alert in ${secs} s, capture in the store, console screenshot in $out/fleet-console.png"
