#!/usr/bin/env python3
"""Server CPU per key of the lookup shapes `pileup prefetch` could send, on a
fully cached table (no I/O): SQL overhead alone.

  pileup sandbox start --set innodb_buffer_pool_size=1G qcpu
  mariadb -S SOCK -uroot -e 'CREATE DATABASE sbtest'
  sysbench oltp_update_index --mysql-socket=SOCK --mysql-user=root --tables=1 --table-size=1000000 prepare
  python3 bench/diag/lookup_cost.py SANDBOX_DIR      (e.g. /tmp/pileup-sandboxes/qcpu)
"""
import random
import subprocess
import sys
import time

from common import Replica, cpu_seconds

r = Replica(sys.argv[1])
pairs = [tuple(map(int, l.split())) for l in r.q("SELECT id, k FROM sbtest.sbtest1").splitlines()]
random.seed(1)
N, B = 2000, 16
T = "sbtest.sbtest1"


def statements(shape):
    out = []
    for _ in range(N):
        ks = random.sample(pairs, B)
        if shape == "pk_in":
            out.append(f"SELECT id FROM {T} FORCE INDEX (PRIMARY) WHERE id IN ({','.join(str(i) for i, _ in ks)});")
        elif shape == "pk_single":
            out.extend(f"SELECT id FROM {T} WHERE id = {i};" for i, _ in ks)
        elif shape == "sec_or":
            out.append(f"SELECT k, id FROM {T} FORCE INDEX (k_1) WHERE " + " OR ".join(f"(k = {k} AND id = {i})" for i, k in ks) + ";")
        elif shape == "sec_row_in":
            out.append(f"SELECT k, id FROM {T} FORCE INDEX (k_1) WHERE (k, id) IN (" + ",".join(f"({k},{i})" for i, k in ks) + ");")
        elif shape == "sec_single":
            out.extend(f"SELECT k, id FROM {T} FORCE INDEX (k_1) WHERE k = {k} AND id = {i};" for i, k in ks)
    return "\n".join(out)


def cpu():
    return cpu_seconds(f"/proc/{r.pid()}/stat")


pre = "SET SESSION eq_range_index_dive_limit = 1; SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;\n"
for rep in range(2):
    for shape in ["pk_in", "pk_single", "sec_or", "sec_row_in", "sec_single"]:
        sql = pre + statements(shape)
        c0, t0 = cpu(), time.time()
        subprocess.run(["mariadb", "-S", r.sock, "-uroot", "-N", "-B"], input=sql, text=True, stdout=subprocess.DEVNULL, check=True)
        c = cpu() - c0
        print(f"{shape:12} server CPU {c:6.2f} s = {1e6 * c / (N * B):6.1f} µs/key; wall {time.time() - t0:5.2f} s")
