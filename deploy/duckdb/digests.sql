-- pileup's shipped digests in DuckDB (httpfs). Each query is named by its
-- `-- name:` line. Replace:
--   $SOURCE  read_parquet('s3://BUCKET/PREFIX/dt=2026-11-30/**/*.parquet', hive_partitioning = true)
--            (a self-hosted store: CREATE SECRET (TYPE s3, KEY_ID '…', SECRET '…',
--            ENDPOINT 'HOST:PORT', URL_STYLE 'path', USE_SSL false) first)
--   $SINCE, $UNTIL  the window, as '2026-11-30 04:00:00' (UTC; $UNTIL not included)
--   $BEFORE_SINCE, $BEFORE_UNTIL  the earlier window of the comparison
-- hive_partitioning adds dt, hour and host from the path: a WHERE on them
-- skips whole files.

-- name: top_classes
SELECT
    fingerprint,
    any_value(class_id) AS class_id,
    sum(count) AS executions,
    round(sum(query_time_sum), 6) AS time_s,
    round(sum(query_time_sum) / sum(count), 6) AS mean_s,
    max(query_time_max) AS max_s,
    sum(rows_examined_sum) AS rows_examined,
    count(DISTINCT host) AS hosts
FROM $SOURCE
WHERE minute >= TIMESTAMPTZ '$SINCE+00' AND minute < TIMESTAMPTZ '$UNTIL+00'
GROUP BY fingerprint
ORDER BY time_s DESC, fingerprint
LIMIT 10;

-- name: class_hosts
SELECT fingerprint, host, executions, time_s
FROM (
    SELECT fingerprint, host, sum(count) AS executions, round(sum(query_time_sum), 6) AS time_s,
           row_number() OVER (PARTITION BY fingerprint ORDER BY sum(query_time_sum) DESC, host) AS rank
    FROM $SOURCE
    WHERE minute >= TIMESTAMPTZ '$SINCE+00' AND minute < TIMESTAMPTZ '$UNTIL+00'
    GROUP BY fingerprint, host
)
WHERE rank <= 3
ORDER BY fingerprint, time_s DESC, host;

-- name: host_top
SELECT host, any_value(labels) AS labels, sum(count) AS executions, round(sum(query_time_sum), 6) AS time_s
FROM $SOURCE
WHERE minute >= TIMESTAMPTZ '$SINCE+00' AND minute < TIMESTAMPTZ '$UNTIL+00'
GROUP BY host
ORDER BY time_s DESC, host;

-- name: p99
SELECT fingerprint, min(low) AS p99_bucket_low_s
FROM (
    SELECT fingerprint, low,
           sum(sum(n)) OVER (PARTITION BY fingerprint ORDER BY low) AS running,
           sum(sum(n)) OVER (PARTITION BY fingerprint) AS total
    FROM (
        SELECT fingerprint, unnest(query_time_bucket_low) AS low, unnest(query_time_bucket_count) AS n
        FROM $SOURCE
        WHERE minute >= TIMESTAMPTZ '$SINCE+00' AND minute < TIMESTAMPTZ '$UNTIL+00'
    )
    GROUP BY fingerprint, low
)
WHERE running >= 0.99 * total
GROUP BY fingerprint
ORDER BY fingerprint;

-- name: slower
SELECT
    fingerprint,
    sum(count) FILTER (WHERE minute >= TIMESTAMPTZ '$SINCE+00') AS executions,
    sum(count) FILTER (WHERE minute < TIMESTAMPTZ '$BEFORE_UNTIL+00') AS executions_before,
    round(sum(query_time_sum) FILTER (WHERE minute >= TIMESTAMPTZ '$SINCE+00') / executions, 6) AS mean_s,
    round(sum(query_time_sum) FILTER (WHERE minute < TIMESTAMPTZ '$BEFORE_UNTIL+00') / executions_before, 6) AS mean_before_s,
    round(mean_s / mean_before_s, 3) AS ratio
FROM $SOURCE
WHERE (minute >= TIMESTAMPTZ '$SINCE+00' AND minute < TIMESTAMPTZ '$UNTIL+00')
   OR (minute >= TIMESTAMPTZ '$BEFORE_SINCE+00' AND minute < TIMESTAMPTZ '$BEFORE_UNTIL+00')
GROUP BY fingerprint
HAVING executions > 0
ORDER BY executions_before IS NULL DESC, ratio DESC NULLS LAST, fingerprint
LIMIT 10;
