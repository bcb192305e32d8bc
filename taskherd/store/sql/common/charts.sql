-- The dashboard's charts (/charts, GET /v1/charts/NAME): aggregates over a range cut into
-- equal buckets. A bucket is numbered from the range's start, `(ms - :start_ms) / :width_ms`
-- in integers: both dialects divide integers the same way (truncating), where a float cast to
-- an integer rounds in PostgreSQL and truncates in SQLite. The caller names each bucket's time.

-- name: queue_depth_now
-- Ready and held (claimed or running) tasks by role, counted in the ready and lease sides of
-- tasks_queue (migration 0036), by its own expressions: no task row is read.
SELECT role, sum(ready) AS ready, sum(running) AS running FROM (
    SELECT role, count(*) AS ready, 0 AS running FROM tasks
    WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2
      AND state = 'ready'
    GROUP BY role
    UNION ALL
    SELECT role, 0, count(*) FROM tasks
    WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1
      AND lease_expires_at IS NOT NULL AND (state = 'claimed' OR state = 'running')
    GROUP BY role
) AS counted
GROUP BY role;

-- name: insert_queue_sample
-- The first node to sample a minute keeps it: another node's sample of it changes nothing.
INSERT INTO queue_samples (at, role, ready, running) VALUES (:at, :role, :ready, :running)
ON CONFLICT (at, role) DO NOTHING;

-- name: prune_queue_samples
DELETE FROM queue_samples WHERE at < :before;

-- name: queue_depth_buckets
-- The highest sample of each bucket by role (a peak is what an operator looks for), and how
-- many minutes were sampled in it: a bucket with none was not sampled (no daemon up), which
-- the chart leaves as a gap rather than draw as an empty queue. Read by the primary key's
-- first column, `at`.
SELECT (CAST(at * 1000 AS BIGINT) - :start_ms) / :width_ms AS bucket, role,
       max(ready) AS ready, max(running) AS running, count(*) AS samples
FROM queue_samples
WHERE at >= :since AND at < :until
GROUP BY 1, role;

-- name: finished_buckets
-- Tasks finished per bucket by final state (completed, dead: failed for good, cancelled),
-- counted in the finished side of tasks_queue alone (migration 0036; its expressions named as
-- written there, its second column the finish time): no task row is read.
SELECT (CAST(coalesce(finished_at, lease_expires_at, priority) * 1000 AS BIGINT) - :start_ms) / :width_ms
           AS bucket,
       state, count(*) AS n
FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
  AND coalesce(finished_at, lease_expires_at, priority) >= :since
  AND coalesce(finished_at, lease_expires_at, priority) < :until
GROUP BY 1, state;

-- name: run_id_range
-- Two subqueries: each is one step down the primary key, where min() and max() together in
-- one SELECT read every run (165 ms at a million).
SELECT (SELECT min(id) FROM runs) AS first, (SELECT max(id) FROM runs) AS last;

-- name: run_at_or_after
-- The first run kept from id :id on, and when it was claimed: a step of the search for the
-- first run of a range (runs take their ids in claim order; no index on a run's times).
SELECT id, claimed_at FROM runs WHERE id >= :id ORDER BY id LIMIT 1;

-- name: latency_histogram
-- Ready → exec per bucket (of the agent's start), as a histogram: how many first runs of a
-- task waited at most `le` seconds from the task being added to their agent starting (le
-- NULL: longer than the last bound). First runs only: a task's ready time is not kept once
-- it settles (run_after then holds its settle or its backoff's end), while its creation is,
-- and a first run (attempt 1) was ready from it. A task added to start later counts its delay.
-- Runs are read by id from :first_id (the range's first claim), their tasks by key.
SELECT bucket, le, count(*) AS n FROM (
    SELECT (CAST(spawned_at * 1000 AS BIGINT) - :start_ms) / :width_ms AS bucket,
           -- A float in both dialects (PostgreSQL reads these literals as numeric).
           CAST(CASE WHEN waited <= 0.005 THEN 0.005 WHEN waited <= 0.01 THEN 0.01
                WHEN waited <= 0.025 THEN 0.025 WHEN waited <= 0.05 THEN 0.05
                WHEN waited <= 0.1 THEN 0.1 WHEN waited <= 0.25 THEN 0.25
                WHEN waited <= 0.5 THEN 0.5 WHEN waited <= 1 THEN 1 WHEN waited <= 2.5 THEN 2.5
                WHEN waited <= 5 THEN 5 WHEN waited <= 10 THEN 10 WHEN waited <= 30 THEN 30
                WHEN waited <= 60 THEN 60 WHEN waited <= 120 THEN 120
                WHEN waited <= 300 THEN 300 WHEN waited <= 600 THEN 600
                WHEN waited <= 1800 THEN 1800 WHEN waited <= 3600 THEN 3600 END
                AS DOUBLE PRECISION) AS le
    FROM (
        SELECT runs.spawned_at, runs.spawned_at - tasks.created_at AS waited
        FROM runs JOIN tasks ON tasks.id = runs.task_id
        WHERE runs.id >= :first_id AND runs.spawned_at >= :since AND runs.spawned_at < :until
          AND runs.attempt = 1
    ) AS first_runs
) AS waits
GROUP BY bucket, le;

-- name: cost_buckets
-- Ended runs per bucket (of their claim, as every cost sum counts them) by role and outcome:
-- their count, the dollars known, and how many have no known cost (the budget's "unknown":
-- ended with no cost after spawning, not stopped by a rate limit), never summed as $0.
SELECT (CAST(claimed_at * 1000 AS BIGINT) - :start_ms) / :width_ms AS bucket, role, outcome,
       count(*) AS runs, coalesce(sum(cost_usd), 0) AS cost_usd,
       sum(CASE WHEN cost_usd IS NULL AND spawned_at IS NOT NULL AND outcome <> 'rate_limited'
                THEN 1 ELSE 0 END) AS unpriced
FROM runs
WHERE id >= :first_id AND claimed_at >= :since AND claimed_at < :until
  AND ended_at IS NOT NULL
GROUP BY 1, role, outcome;

-- name: chart_sums_mark
SELECT sums_through FROM chart_marks WHERE id = 1;

-- name: set_chart_sums_mark
INSERT INTO chart_marks (id, sums_through) VALUES (1, :through)
ON CONFLICT (id) DO UPDATE SET sums_through = excluded.sums_through;

-- name: forget_chart_sums
-- The quarter hours about to be summed again, and those older than the week kept.
DELETE FROM chart_sums WHERE (at >= :since AND at < :until) OR at < :before;

-- name: insert_chart_sum
-- Another node summing the same quarters at once writes the same sums: the last one stays.
INSERT INTO chart_sums (at, chart, role, label, n, cost_usd, unpriced)
VALUES (:at, :chart, :role, :label, :n, :cost_usd, :unpriced)
ON CONFLICT (at, chart, role, label) DO UPDATE
SET n = excluded.n, cost_usd = excluded.cost_usd, unpriced = excluded.unpriced;

-- name: chart_sums_of
-- One chart's quarter hours kept in [:since, :until), by the primary key's first column,
-- gathered into the range's buckets (the sums added up).
SELECT (CAST(at * 1000 AS BIGINT) - :start_ms) / :width_ms AS bucket, role, label,
       sum(n) AS n, sum(cost_usd) AS cost_usd, sum(unpriced) AS unpriced
FROM chart_sums
WHERE at >= :since AND at < :until AND chart = :chart
GROUP BY 1, role, label;

-- name: depth_sums_of
-- As chart_sums_of for the depth: per bucket and role, the highest of its quarters' ready and
-- running tasks and the minutes sampled in them, one row each.
SELECT (CAST(at * 1000 AS BIGINT) - :start_ms) / :width_ms AS bucket, role,
       max(CASE WHEN label = 'ready' THEN n ELSE 0 END) AS ready,
       max(CASE WHEN label = 'running' THEN n ELSE 0 END) AS running,
       sum(CASE WHEN label = 'samples' THEN n ELSE 0 END) AS samples
FROM chart_sums
WHERE at >= :since AND at < :until AND chart = :chart
GROUP BY 1, role;
