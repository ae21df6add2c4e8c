"""Time named queries of a SQL file (`-- name: NAME` opens each) in chDB,
warm: each query runs once untimed, then once timed; prints the timed
runs' wall and CPU seconds summed (this process's, every thread of it),
the first query's rows and each query's rows by name, as one JSON object.
The interpreter's start and chDB's import are not timed.

usage: chdb-time.py FILE NAME[,NAME...] KEY=VALUE...   ($KEY in the queries becomes VALUE)
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
    names = name.split(",")
    texts = []
    for n in names:
        query = "".join(queries[n])
        for key, value in sorted((kv.split("=", 1) for kv in subs), key=lambda p: -len(p[0])):
            query = query.replace("$" + key, value)
        texts.append(query)
    for query in texts:
        chdb.query(query, "JSONEachRow")
    wall, spent, results = 0.0, 0.0, {}
    for n, query in zip(names, texts):
        c0, t0 = cpu(), time.monotonic()
        rows = str(chdb.query(query, "JSONEachRow"))
        wall, spent = wall + time.monotonic() - t0, spent + cpu() - c0
        results[n] = [json.loads(l) for l in rows.splitlines() if l]
    print(json.dumps({"wall": wall, "cpu": spent, "rows": results[names[0]], "results": results}))

main()
