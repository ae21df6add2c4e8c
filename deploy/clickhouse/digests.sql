-- pileup's shipped digests, queried where they are, with ClickHouse's s3()
-- table function (or chDB). Each query is named by its `-- name:` line.
-- Replace:
--   $SOURCE  the files, e.g.
--            s3('https://BUCKET.s3.amazonaws.com/PREFIX/dt=2026-11-30/**.parquet', 'Parquet')
--            (a self-hosted store: s3('http://HOST:PORT/BUCKET/PREFIX/dt=…/**.parquet', 'KEY', 'SECRET', 'Parquet'));
--            name only the dt= (and hour=) partitions the window needs: ClickHouse reads no other file
--   $SINCE, $UNTIL  the window, as '2026-11-30 04:00:00' (UTC; $UNTIL not included)
--   $BEFORE_SINCE, $BEFORE_UNTIL  the earlier window of the comparison
-- Rows are per class, host and minute; counts and sums add up across
-- minutes and hosts, minimums and maximums take min() and max(), and the
-- statement-time histogram's buckets add up bucket by bucket.

-- name: top_classes
-- Which classes cost the fleet most in the window.
SELECT
    fingerprint,
    any(class_id) AS class_id,
    sum(count) AS executions,
    round(sum(query_time_sum), 6) AS time_s,
    round(sum(query_time_sum) / sum(count), 6) AS mean_s,
    max(query_time_max) AS max_s,
    sum(rows_examined_sum) AS rows_examined,
    uniqExact(host) AS hosts
FROM $SOURCE
WHERE minute >= toDateTime64('$SINCE', 3, 'UTC') AND minute < toDateTime64('$UNTIL', 3, 'UTC')
GROUP BY fingerprint
ORDER BY time_s DESC, fingerprint
LIMIT 10;

-- name: class_hosts
-- On which hosts each of the top classes costs most.
SELECT
    fingerprint,
    host,
    sum(count) AS executions,
    round(sum(query_time_sum), 6) AS time_s
FROM $SOURCE
WHERE minute >= toDateTime64('$SINCE', 3, 'UTC') AND minute < toDateTime64('$UNTIL', 3, 'UTC')
GROUP BY fingerprint, host
ORDER BY fingerprint, time_s DESC, host
LIMIT 3 BY fingerprint;

-- name: host_top
-- Each host's time and its top class.
SELECT
    host,
    any(labels) AS labels,
    sum(count) AS executions,
    round(sum(query_time_sum), 6) AS time_s
FROM $SOURCE
WHERE minute >= toDateTime64('$SINCE', 3, 'UTC') AND minute < toDateTime64('$UNTIL', 3, 'UTC')
GROUP BY host
ORDER BY time_s DESC, host;

-- name: p99
-- Each class's 99th percentile of statement time across every host and
-- minute, from the merged histogram: the lower bound of the bucket where
-- the running count passes 99% (each bucket is a sixteenth of its power of two: 3.1% to 6.25% of its values).
SELECT fingerprint, min(low) AS p99_bucket_low_s
FROM (
    SELECT
        fingerprint,
        low,
        sum(sum(n)) OVER (PARTITION BY fingerprint ORDER BY low) AS running,
        sum(sum(n)) OVER (PARTITION BY fingerprint) AS total
    FROM $SOURCE
    ARRAY JOIN query_time_bucket_low AS low, query_time_bucket_count AS n
    WHERE minute >= toDateTime64('$SINCE', 3, 'UTC') AND minute < toDateTime64('$UNTIL', 3, 'UTC')
    GROUP BY fingerprint, low
)
WHERE running >= 0.99 * total
GROUP BY fingerprint
ORDER BY fingerprint;

-- name: slower
-- What got slower: time per execution in the window against the earlier
-- one, classes new in the window first.
SELECT
    fingerprint,
    sumIf(count, minute >= toDateTime64('$SINCE', 3, 'UTC')) AS executions,
    sumIf(count, minute < toDateTime64('$BEFORE_UNTIL', 3, 'UTC')) AS executions_before,
    round(sumIf(query_time_sum, minute >= toDateTime64('$SINCE', 3, 'UTC')) / nullIf(executions, 0), 6) AS mean_s,
    round(sumIf(query_time_sum, minute < toDateTime64('$BEFORE_UNTIL', 3, 'UTC')) / nullIf(executions_before, 0), 6) AS mean_before_s,
    round(mean_s / mean_before_s, 3) AS ratio
FROM $SOURCE
WHERE (minute >= toDateTime64('$SINCE', 3, 'UTC') AND minute < toDateTime64('$UNTIL', 3, 'UTC'))
   OR (minute >= toDateTime64('$BEFORE_SINCE', 3, 'UTC') AND minute < toDateTime64('$BEFORE_UNTIL', 3, 'UTC'))
GROUP BY fingerprint
HAVING executions > 0
ORDER BY executions_before = 0 DESC, ratio DESC, fingerprint
LIMIT 10;
