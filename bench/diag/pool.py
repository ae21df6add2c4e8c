#!/usr/bin/env python3
"""The replica's buffer pool over time, every 200 ms: pool reads and pages
flushed per second, free and dirty pages, purge's history list length.

Run beside `bench/prefetch --reuse DIR ...`: python3 bench/diag/pool.py DIR/replica SECONDS
(it keeps polling across the bench's replica restarts; rows with no reads
are left out).
"""
import sys
import time

from common import Replica

NAMES = ["INNODB_BUFFER_POOL_READS", "INNODB_BUFFER_POOL_PAGES_FLUSHED", "INNODB_BUFFER_POOL_PAGES_FREE", "INNODB_BUFFER_POOL_PAGES_DIRTY", "INNODB_HISTORY_LIST_LENGTH"]
r = Replica(sys.argv[1])
q = "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('" + "','".join(NAMES) + "')"
t0, prev = time.time(), None
while time.time() - t0 < float(sys.argv[2]):
    d = {k: int(v) for k, v in (l.split("\t") for l in r.q(q).splitlines() if "\t" in l)}
    t = time.time() - t0
    if len(d) == len(NAMES) and prev and d[NAMES[0]] >= prev[1][NAMES[0]]:
        dt = t - prev[0]
        reads = (d[NAMES[0]] - prev[1][NAMES[0]]) / dt
        flushed = (d[NAMES[1]] - prev[1][NAMES[1]]) / dt
        if reads > 50:
            print(f"{t:6.1f} s  reads/s {reads:6.0f}  flushed/s {flushed:6.0f}  free {d[NAMES[2]]:5d}  dirty {d[NAMES[3]]:5d}  history {d[NAMES[4]]:6d}", flush=True)
    prev = (t, d) if len(d) == len(NAMES) else None
    time.sleep(0.2)
