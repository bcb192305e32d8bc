-- name: spend_by_role
-- The board's cost lines, summed by the database: runs, cost and tokens of each role since
-- :week_start, and the part of them since :day_start (midnight in the fleet's zone, which
-- the caller works out: SQLite knows no time zones). Summing in Python read every run of
-- the week into memory first.
SELECT role,
       count(*) AS runs_week,
       coalesce(sum(cost_usd), 0) AS cost_week,
       coalesce(sum(input_tokens), 0) AS input_tokens_week,
       coalesce(sum(output_tokens), 0) AS output_tokens_week,
       coalesce(sum(CASE WHEN claimed_at >= :day_start THEN 1 ELSE 0 END), 0) AS runs_today,
       coalesce(sum(CASE WHEN claimed_at >= :day_start THEN cost_usd END), 0) AS cost_today,
       coalesce(sum(CASE WHEN claimed_at >= :day_start THEN input_tokens END), 0)
           AS input_tokens_today,
       coalesce(sum(CASE WHEN claimed_at >= :day_start THEN output_tokens END), 0)
           AS output_tokens_today
FROM runs
WHERE claimed_at >= :week_start
GROUP BY role
ORDER BY role;
