"""Run one named query of a SQL file (`-- name: NAME` opens each) with chDB,
ClickHouse's engine embedded, and print its rows as JSON lines.

usage: chdb_query.py FILE NAME KEY=VALUE...   ($KEY in the query becomes VALUE)
"""
import sys

import chdb


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
    # Longest names first: $BEFORE_SINCE before $SINCE.
    pairs = sorted((kv.split("=", 1) for kv in subs), key=lambda p: -len(p[0]))
    for key, value in pairs:
        query = query.replace("$" + key, value)
    sys.stdout.write(str(chdb.query(query, "JSONEachRow")))


main()
