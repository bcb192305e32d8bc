-- name: spend_by_role
-- The board's cost lines: runs, cost and tokens of each role's runs claimed since :week_from,
-- and the part of them since :day_from (both the start of an hour: the hour holding the
-- week's start, and the one holding midnight in the fleet's zone, which the caller works out:
-- SQLite knows no time zones). Read from the hourly sums the monitor rolls ended runs up into
-- (migration 0012), plus the ended runs past the mark one by one: the mark follows the
-- oldest open run, so those are few; summing every run read a week of rows. The caller reads
-- the mark, :runs_through: one read in the statement leaves PostgreSQL planning the range blind.
-- `unpriced_*` counts the runs whose cost is unknown (migration 0032): not in the dollars.
WITH spend AS (
    SELECT role, hour AS at, runs, cost_usd, input_tokens, output_tokens, unpriced
    FROM spend_hours
    WHERE hour >= :week_from AND runs > 0
    UNION ALL
    SELECT role, claimed_at, 1, coalesce(cost_usd, 0), coalesce(input_tokens, 0),
           coalesce(output_tokens, 0),
           CASE WHEN cost_usd IS NULL AND spawned_at IS NOT NULL AND outcome <> 'rate_limited'
                THEN 1 ELSE 0 END
    FROM runs
    WHERE id > :runs_through AND ended_at IS NOT NULL
      AND claimed_at >= :week_from
)
SELECT role,
       sum(runs) AS runs_week,
       sum(cost_usd) AS cost_week,
       sum(input_tokens) AS input_tokens_week,
       sum(output_tokens) AS output_tokens_week,
       sum(unpriced) AS unpriced_week,
       coalesce(sum(CASE WHEN at >= :day_from THEN runs END), 0) AS runs_today,
       coalesce(sum(CASE WHEN at >= :day_from THEN cost_usd END), 0) AS cost_today,
       coalesce(sum(CASE WHEN at >= :day_from THEN input_tokens END), 0) AS input_tokens_today,
       coalesce(sum(CASE WHEN at >= :day_from THEN output_tokens END), 0)
           AS output_tokens_today,
       coalesce(sum(CASE WHEN at >= :day_from THEN unpriced END), 0) AS unpriced_today
FROM spend
GROUP BY role
ORDER BY role;

-- name: task_history
-- Finished tasks, newest first, finished since :since (a role filter as list_tasks has).
-- The history side of tasks_queue (migration 0036), by its own expressions: there,
-- coalesce(finished_at, lease_expires_at, priority) is finished_at.
SELECT * FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
  AND coalesce(finished_at, lease_expires_at, priority) >= :since
  AND (CAST(:role AS TEXT) IS NULL OR role = :role)
ORDER BY coalesce(finished_at, lease_expires_at, priority) DESC, id DESC
LIMIT :limit;

-- name: first_run_start
SELECT min(claimed_at) AS first FROM runs;

-- name: run_timing
-- What /metrics observes of a run as it starts and ends, its task's ready time beside: one
-- row read by the primary keys, not the run and its task as records.
SELECT runs.role, runs.claimed_at, runs.spawned_at, runs.ended_at, runs.outcome,
       tasks.run_after
FROM runs LEFT JOIN tasks ON tasks.id = runs.task_id
WHERE runs.id = :id;

-- name: run_totals
-- /metrics: by role and outcome, every run that ever ended (those pruned, from
-- pruned_run_totals, and those kept) with what it cost; and the runs open now (outcome NULL).
-- One statement, so a prune committing meanwhile is seen whole or not at all: its runs are
-- counted once, from the table or from the runs, and a counter never goes down.
-- `unpriced` counts the ended runs whose cost is unknown (migration 0032).
SELECT role, outcome, sum(runs) AS runs, sum(cost_usd) AS cost_usd,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
       sum(unpriced) AS unpriced
FROM (
    SELECT role, outcome, runs, cost_usd, input_tokens, output_tokens, unpriced
    FROM pruned_run_totals
    UNION ALL
    SELECT role, outcome, count(*), coalesce(sum(cost_usd), 0),
           coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
           coalesce(sum(CASE WHEN cost_usd IS NULL AND spawned_at IS NOT NULL
                              AND outcome <> 'rate_limited' THEN 1 ELSE 0 END), 0)
    FROM runs
    GROUP BY role, outcome
) AS every_run
GROUP BY role, outcome
ORDER BY role, outcome;

-- name: spend_hours_since
-- The dashboard's cost chart: each role's spend since :since, grouped into the fleet's days
-- by the caller (which knows the zone): the hours the monitor rolled up (`at` is the hour's
-- start), plus the ended runs past its mark, one by one (`at` is the claim; they are few).
SELECT role, hour AS at, runs, cost_usd, unpriced FROM spend_hours
WHERE hour >= :since AND runs > 0
UNION ALL
SELECT role, claimed_at, 1, coalesce(cost_usd, 0),
       CASE WHEN cost_usd IS NULL AND spawned_at IS NOT NULL AND outcome <> 'rate_limited'
                THEN 1 ELSE 0 END
FROM runs
WHERE id > (SELECT runs_through FROM rollup_marks) AND ended_at IS NOT NULL
  AND claimed_at >= :since
ORDER BY 2, 1;

-- name: budget_spend
-- What each role spent this month and today (both starts in the fleet's zone, worked out by
-- the caller): the known cost, the runs whose cost is unknown (they spawned, ended without a
-- cost and were not stopped by a rate limit before any work), the runs still open (their cost
-- is not in yet) and the tokens; `priced_month` counts the runs with a known cost, for the
-- mean a next run is expected to cost. Runs count in the period they were claimed in.
-- :role NULL reads every role (the fleet's budget, `budget status`); a claim of a role whose
-- only budget is its own reads that role's rows alone.
SELECT role,
       coalesce(sum(CASE WHEN claimed_at >= :day_start THEN cost_usd END), 0) AS cost_day,
       coalesce(sum(CASE WHEN claimed_at >= :day_start AND ended_at IS NOT NULL
                          AND cost_usd IS NULL AND spawned_at IS NOT NULL
                          AND outcome <> 'rate_limited' THEN 1 END), 0) AS unknown_day,
       coalesce(sum(CASE WHEN claimed_at >= :day_start AND ended_at IS NULL THEN 1 END), 0)
           AS open_day,
       coalesce(sum(CASE WHEN claimed_at >= :day_start
                         THEN coalesce(input_tokens, 0) + coalesce(output_tokens, 0) END), 0)
           AS tokens_day,
       coalesce(sum(cost_usd), 0) AS cost_month,
       coalesce(sum(CASE WHEN ended_at IS NOT NULL AND cost_usd IS NULL
                          AND spawned_at IS NOT NULL AND outcome <> 'rate_limited'
                          THEN 1 END), 0) AS unknown_month,
       coalesce(sum(CASE WHEN ended_at IS NULL THEN 1 END), 0) AS open_month,
       coalesce(sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)), 0) AS tokens_month,
       count(cost_usd) AS priced_month
FROM runs
WHERE claimed_at >= :month_start AND (CAST(:role AS TEXT) IS NULL OR role = :role)
GROUP BY role
ORDER BY role;
