"""Time one named query of a SQL file (`-- name: NAME` opens each) in chDB,
warm: the query runs once untimed, then once timed; prints the timed run's
wall and CPU seconds (this process's, every thread of it) and its rows as
one JSON object. The interpreter's start and chDB's import are not timed.

usage: chdb-time.py FILE NAME KEY=VALUE...   ($KEY in the query becomes VALUE)
"""
import json
import resource
import sys
import time

import chdb


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    path, name, *subs = sys.argv[1:]
    queries, current = {}, None
    for line in open(path, encoding="utf-8"):
        if line.startswith("-- name:"):
            current = line.split(":", 1)[1].strip()
            queries[current] = []
        elif current is not None:
            queries[current].append(line)
    query = "".join(queries[name])
    for key, value in sorted((kv.split("=", 1) for kv in subs), key=lambda p: -len(p[0])):
        query = query.replace("$" + key, value)
    chdb.query(query, "JSONEachRow")
    c0, t0 = cpu(), time.monotonic()
    rows = str(chdb.query(query, "JSONEachRow"))
    wall, spent = time.monotonic() - t0, cpu() - c0
    print(json.dumps({"wall": wall, "cpu": spent, "rows": [json.loads(l) for l in rows.splitlines() if l]}))


main()
