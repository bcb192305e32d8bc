-- name: spend_by_role
-- The board's cost lines: runs, cost and tokens of each role's runs claimed since
-- :week_start, and the part of them since :day_start (midnight in the fleet's zone, which
-- the caller works out: SQLite knows no time zones). Read from the hourly sums the runs add
-- themselves to when they end (migration 0010), so a run counts once it has ended and the
-- windows start at the hour; summing the runs themselves read a week of rows.
SELECT role,
       sum(runs) AS runs_week,
       sum(cost_usd) AS cost_week,
       sum(input_tokens) AS input_tokens_week,
       sum(output_tokens) AS output_tokens_week,
       coalesce(sum(CASE WHEN hour >= :day_start - 3599 THEN runs END), 0) AS runs_today,
       coalesce(sum(CASE WHEN hour >= :day_start - 3599 THEN cost_usd END), 0) AS cost_today,
       coalesce(sum(CASE WHEN hour >= :day_start - 3599 THEN input_tokens END), 0)
           AS input_tokens_today,
       coalesce(sum(CASE WHEN hour >= :day_start - 3599 THEN output_tokens END), 0)
           AS output_tokens_today
FROM spend_hours
WHERE hour >= :week_start - 3599 AND runs > 0
GROUP BY role
ORDER BY role;

-- name: task_history
-- Finished tasks, newest first, finished since :since (a role filter as list_tasks has).
SELECT * FROM tasks
WHERE finished_at IS NOT NULL AND finished_at >= :since
  AND (CAST(:role AS TEXT) IS NULL OR role = :role)
ORDER BY finished_at DESC, id DESC
LIMIT :limit;

-- name: first_run_start
SELECT min(claimed_at) AS first FROM runs;

-- name: run_totals
-- /metrics: every run ever kept, by role and outcome (NULL while it runs), with what it cost.
SELECT role, outcome, count(*) AS runs, coalesce(sum(cost_usd), 0) AS cost_usd,
       coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens
FROM runs
GROUP BY role, outcome
ORDER BY role, outcome;

-- name: spend_hours_since
-- The dashboard's cost chart: each role's hourly sums since :since (grouped into the fleet's
-- days by the caller, which knows the zone).
SELECT role, hour, runs, cost_usd FROM spend_hours
WHERE hour >= :since AND runs > 0
ORDER BY hour, role;
