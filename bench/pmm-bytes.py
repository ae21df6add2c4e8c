"""The bytes PMM's Query Analytics would keep for the same rows: its
per-minute buckets table (one row per class, server, schema, user, client
host and minute; every metric a Float32 count, sum, min, max and p99), built
in chDB as PMM's migrations leave it (MergeTree, a partition a day, ordered
by query id, service, database, schema, user, client host and minute),
filled from pileup's shipped files and merged; prints the table's bytes on
disk and rows as JSON.

usage: pmm-bytes.py SOURCE DIR   (SOURCE: an s3(...) table expression; DIR: chDB's data)
"""
import json
import sys

from chdb import session

# PMM QAN's metrics: five columns each (cnt, sum, min, max, p99) ...
FIVE = ["query_time", "lock_time", "rows_sent", "rows_examined", "rows_affected", "rows_read", "merge_passes",
        "innodb_io_r_ops", "innodb_io_r_bytes", "innodb_io_r_wait", "innodb_rec_lock_wait", "innodb_queue_wait",
        "innodb_pages_distinct", "query_length", "bytes_sent", "tmp_tables", "tmp_disk_tables", "tmp_table_sizes",
        "docs_returned", "response_length", "docs_scanned", "docs_examined", "keys_examined",
        "locks_database_time_acquiring_micros_read_shared", "storage_bytes_read", "storage_time_reading_micros"]
# ... two (cnt, sum) ...
TWO = ["qc_hit", "full_scan", "full_join", "tmp_table", "tmp_table_on_disk", "filesort", "filesort_on_disk",
       "select_full_range_join", "select_range", "select_range_check", "sort_range", "sort_rows", "sort_scan",
       "no_index_used", "no_good_index_used"] + \
      [f"{s}_blks_{k}" for s in ("shared", "local") for k in ("hit", "read", "dirtied", "written")] + \
      ["temp_blks_read", "temp_blks_written", "shared_blk_read_time", "shared_blk_write_time",
       "local_blk_read_time", "local_blk_write_time", "cpu_user_time", "cpu_sys_time", "plans_calls",
       "wal_records", "wal_fpi", "wal_bytes", "wal_buffers_full", "parallel_workers_to_launch",
       "parallel_workers_launched", "locks_global_acquire_count_read_shared",
       "locks_global_acquire_count_write_shared", "locks_database_acquire_count_read_shared",
       "locks_database_acquire_wait_count_read_shared", "locks_collection_acquire_count_read_shared"]
# ... and one metric with four (cnt, sum, min, max).
FOUR = ["plan_time"]

DIMS = ["queryid", "service_name", "database", "schema", "username", "client_host", "replication_set", "cluster",
        "service_type", "service_id", "environment", "az", "region", "node_model", "node_id", "node_name",
        "node_type", "machine_id", "container_name", "container_id", "agent_id", "fingerprint", "top_queryid",
        "application_name", "planid", "cmd_type", "top_query", "query_plan", "plan_summary"]

# pileup's attribute for PMM's metric, where the slow log has it.
FROM_PILEUP = {"query_time": "query_time", "lock_time": "lock_time", "rows_sent": "rows_sent",
               "rows_examined": "rows_examined", "rows_affected": "rows_affected", "merge_passes": "merge_passes",
               "bytes_sent": "bytes_sent", "tmp_tables": "tmp_tables", "tmp_disk_tables": "tmp_disk_tables",
               "tmp_table_sizes": "tmp_table_sizes"}
FLAGS = ["qc_hit", "full_scan", "full_join", "tmp_table", "tmp_table_on_disk", "filesort", "filesort_on_disk"]


def table():
    cols = [f"`{d}` LowCardinality(String)" for d in DIMS]
    cols += ["`labels.key` Array(LowCardinality(String))", "`labels.value` Array(LowCardinality(String))",
             "agent_type Enum8('qan-agent-type-invalid'=0, 'qan-mysql-perfschema-agent'=1, 'qan-mysql-slowlog-agent'=2)",
             "period_start DateTime", "period_length UInt32", "example String",
             "example_type Enum8('EXAMPLE_TYPE_INVALID'=0, 'RANDOM'=1, 'SLOWEST'=2, 'FASTEST'=3, 'WITH_ERROR'=4)",
             "is_truncated UInt8", "example_metrics String", "explain_fingerprint String",
             "placeholders_count UInt32", "tables Array(String)", "histogram_items Array(String)",
             "num_queries_with_warnings Float32", "`warnings.code` Array(UInt32)", "`warnings.count` Array(Float32)",
             "num_queries_with_errors Float32", "`errors.code` Array(UInt64)", "`errors.count` Array(UInt64)",
             "num_queries Float32"]
    for m in FIVE:
        cols += [f"m_{m}_{a} Float32" for a in ("cnt", "sum", "min", "max", "p99")]
    for m in TWO:
        cols += [f"m_{m}_{a} Float32" for a in ("cnt", "sum")]
    for m in FOUR:
        cols += [f"m_{m}_{a} Float32" for a in ("cnt", "sum", "min", "max")]
    return ("CREATE TABLE pmm.metrics (" + ", ".join(cols) + ") ENGINE = MergeTree "
            "PARTITION BY toYYYYMMDD(period_start) "
            "ORDER BY (queryid, service_name, database, schema, username, client_host, period_start) "
            "SETTINGS index_granularity = 8192")


def fill(source):
    sel = ["class_id AS queryid", "host AS service_name", "db AS database", "db AS schema",
           "'app' AS username", "'' AS client_host", "labels['cluster'] AS cluster",
           "labels['env'] AS environment", "'mysql' AS service_type", "host AS node_name",
           "fingerprint AS fingerprint", "mapKeys(labels) AS `labels.key`", "mapValues(labels) AS `labels.value`",
           "'qan-mysql-slowlog-agent' AS agent_type", "toDateTime(minute) AS period_start",
           "60 AS period_length", "ifNull(sample, '') AS example", "'SLOWEST' AS example_type",
           "count AS num_queries"]
    for pmm, ours in FROM_PILEUP.items():
        # PMM's p99 of a minute: for the statement time, the lower bound
        # of the row's histogram bucket that holds its 99th percentile;
        # for the other metrics (no histogram shipped) the maximum stands
        # in, a Float32 of the same range.
        p99 = (f"ifNull({ours}_max, 0)" if ours != "query_time" else
               "if(empty(query_time_bucket_count), 0, arrayElement(query_time_bucket_low, arrayFirstIndex("
               "x -> x >= 0.99 * arraySum(query_time_bucket_count), arrayCumSum(query_time_bucket_count))))")
        # A null _n: every statement logged it.
        sel += [f"if(isNull({ours}_sum), 0, ifNull({ours}_n, count)) AS m_{pmm}_cnt",
                f"ifNull({ours}_sum, 0) AS m_{pmm}_sum",
                f"ifNull({ours}_min, 0) AS m_{pmm}_min", f"ifNull({ours}_max, 0) AS m_{pmm}_max",
                f"{p99} AS m_{pmm}_p99"]
    for f in FLAGS:
        sel += [f"ifNull({f}_seen, count) AS m_{f}_cnt", f"{f}_yes AS m_{f}_sum"]
    return f"INSERT INTO pmm.metrics ({', '.join(s.rsplit(' AS ', 1)[1] for s in sel)}) SELECT {', '.join(s.rsplit(' AS ', 1)[0] for s in sel)} FROM {source}"


def main():
    source, path = sys.argv[1:]
    s = session.Session(path)
    s.query("CREATE DATABASE IF NOT EXISTS pmm")
    s.query("DROP TABLE IF EXISTS pmm.metrics")
    s.query(table())
    s.query(fill(source))
    s.query("OPTIMIZE TABLE pmm.metrics FINAL")
    r = json.loads(str(s.query("SELECT sum(bytes_on_disk) AS bytes, sum(rows) AS rows FROM system.parts "
                               "WHERE database = 'pmm' AND table = 'metrics' AND active", "JSON")))["data"][0]
    print(json.dumps({"bytes": int(r["bytes"]), "rows": int(r["rows"])}))


main()
