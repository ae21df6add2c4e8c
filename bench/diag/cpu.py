#!/usr/bin/env python3
"""The replica's CPU by thread during each catch-up.

Run beside `bench/prefetch --reuse DIR ...`: python3 bench/diag/cpu.py DIR/replica ROUNDS
utime+stime of /proc/PID/task/TID/stat before and after, named from
performance_schema.threads (reader connections are sql/one_connection).
"""
import collections
import os
import sys
import time

from common import Replica, cpu_seconds, prefetching


def cpu(pid):
    d = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            d[tid] = cpu_seconds(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
    return d


r = Replica(sys.argv[1])
for n in range(int(sys.argv[2])):
    r.wait_lagging()
    pid, mode = r.pid(), "prefetch" if prefetching() else "none"
    c0, ts, names = cpu(pid), time.time(), {}
    while r.lagging():
        names.update(r.thread_names())  # threads come and go: remember every name seen
        time.sleep(0.5)
    c1 = cpu(pid)
    names.update(r.thread_names())
    agg = collections.Counter()
    for t, v in c1.items():
        agg[names.get(t, "?")] += v - c0.get(t, 0)
    print(f"catch-up {n + 1} ({mode}, {time.time() - ts:.1f} s): {sum(agg.values()):.2f} CPU-s in mariadbd", flush=True)
    for k, v in agg.most_common(12):
        if v > 0.05:
            print(f"   {k:40} {v:6.2f} s")
