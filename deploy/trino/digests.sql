-- pileup's shipped digests as a Trino (or Spark SQL, with its own DDL)
-- table over the store, through the Hive connector. The partition columns
-- come from the path (dt=…/hour=…/host=…) and are the table's last
-- columns; new partitions are found with sync_partition_metadata (run it
-- on a schedule, or use a metastore that discovers them).
-- Replace BUCKET/PREFIX. One attribute's four columns are shown; every
-- attribute of docs/fleet.md's schema table follows the same pattern.

CREATE TABLE hive.pileup.digests (
    minute timestamp(3),
    labels map(varchar, varchar),
    class_id varchar,
    fingerprint_version smallint,
    fingerprint varchar,
    db varchar,
    count bigint,
    first_seen timestamp(3),
    last_seen timestamp(3),
    query_time_n integer,
    query_time_sum double,
    query_time_min double,
    query_time_max double,
    rows_examined_n integer,
    rows_examined_sum double,
    rows_examined_min double,
    rows_examined_max double,
    query_time_bucket_low array(double),
    query_time_bucket_count array(integer),
    sample varchar,
    sample_query_time double,
    dt varchar,
    hour varchar,
    host varchar
)
WITH (
    external_location = 's3://BUCKET/PREFIX/',
    format = 'PARQUET',
    partitioned_by = ARRAY['dt', 'hour', 'host']
);

CALL hive.system.sync_partition_metadata('pileup', 'digests', 'ADD');

-- name: top_classes
SELECT
    fingerprint,
    arbitrary(class_id) AS class_id,
    sum(count) AS executions,
    round(sum(query_time_sum), 6) AS time_s,
    round(sum(query_time_sum) / sum(count), 6) AS mean_s,
    max(query_time_max) AS max_s,
    count(DISTINCT host) AS hosts
FROM hive.pileup.digests
WHERE dt = '2026-11-30' AND hour = '04'
GROUP BY fingerprint
ORDER BY time_s DESC, fingerprint
LIMIT 10;

-- name: class_hosts
SELECT fingerprint, host, executions, time_s
FROM (
    SELECT fingerprint, host, sum(count) AS executions, round(sum(query_time_sum), 6) AS time_s,
           row_number() OVER (PARTITION BY fingerprint ORDER BY sum(query_time_sum) DESC, host) AS rank
    FROM hive.pileup.digests
    WHERE dt = '2026-11-30' AND hour = '04'
    GROUP BY fingerprint, host
)
WHERE rank <= 3
ORDER BY fingerprint, time_s DESC, host;
