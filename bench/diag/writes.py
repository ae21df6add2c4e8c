#!/usr/bin/env python3
"""What a replica writes during each catch-up, by file and by thread.

Run beside `bench/prefetch --reuse DIR ...`: python3 bench/diag/writes.py DIR/replica ROUNDS
Per catch-up: performance_schema file_summary_by_instance writes (sbtest
files folded together) and each thread's write_bytes from
/proc/PID/task/TID/io, named from performance_schema.threads.
"""
import collections
import os
import re
import sys
import time

from common import Replica, prefetching


def files(r):
    d = collections.Counter()
    for l in r.q("SELECT FILE_NAME, EVENT_NAME, COUNT_WRITE, SUM_NUMBER_OF_BYTES_WRITE FROM performance_schema.file_summary_by_instance WHERE COUNT_WRITE > 0").splitlines():
        f = l.split("\t")
        name = re.sub(r"sbtest\d+", "sbtestN", re.sub(r".*/data/", "", f[0]))
        d[(name, "n")] += int(f[2])
        d[(name, "b")] += int(f[3])
    return d


def thread_writes(r, pid):
    names, d = r.thread_names(), collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            io = open(f"/proc/{pid}/task/{tid}/io").read()
        except OSError:
            continue
        d[names.get(tid, "?")] += int(re.search(r"write_bytes: (\d+)", io).group(1))
    return d


r = Replica(sys.argv[1])
for n in range(int(sys.argv[2])):
    r.wait_lagging()
    pid, mode = r.pid(), "prefetch" if prefetching() else "none"
    f0, t0, ts = files(r), thread_writes(r, pid), time.time()
    while r.lagging():
        time.sleep(0.2)
    f1, t1 = files(r), thread_writes(r, pid)
    print(f"catch-up {n + 1} ({mode}, {time.time() - ts:.1f} s)", flush=True)
    for name in sorted({k[0] for k in f1}):
        w = f1[(name, "n")] - f0[(name, "n")]
        if w:
            print(f"   file   {name:36} {w:9} writes {(f1[(name, 'b')] - f0[(name, 'b')]) / 1e6:9.1f} MB")
    for k in sorted(t1, key=lambda k: t0.get(k, 0) - t1[k]):
        if t1[k] - t0.get(k, 0) > 0:
            print(f"   thread {k:36} {(t1[k] - t0.get(k, 0)) / 1e6:9.1f} MB written")
