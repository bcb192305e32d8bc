-- Named SQL blocks of queries that read the same in every dialect.
-- A dialect's folder overrides a block by defining the same name, with the reason above it.

-- name: open_task_by_dedup_key
SELECT * FROM tasks WHERE dedup_key = :dedup_key AND finished_at IS NULL;

-- name: get_task
SELECT * FROM tasks WHERE id = :id;

-- name: count_by_state_and_role
SELECT state, role, count(*) AS n FROM tasks GROUP BY state, role ORDER BY role, state;

-- name: get_run
SELECT * FROM runs WHERE id = :id;

-- name: runs_of_task
SELECT * FROM runs WHERE task_id = :task_id ORDER BY id;

-- name: mark_run_spawned
UPDATE runs
SET pid = :pid, pid_started_at = :pid_started_at, log_path = :log_path,
    spawned_at = :now, heartbeat_at = :now
WHERE id = :run_id AND ended_at IS NULL AND spawned_at IS NULL
RETURNING task_id;

-- name: mark_task_running
UPDATE tasks
SET state = 'running', lease_expires_at = :lease_until, updated_at = :now
WHERE id = :task_id AND state = 'claimed' AND lease_node = :node;

-- name: touch_run
UPDATE runs
SET heartbeat_at = :now, progress = coalesce(:progress, progress)
WHERE id = :run_id AND ended_at IS NULL
RETURNING task_id, node;

-- name: renew_task_lease
-- Only the latest run's heartbeat holds the lease: an old agent still dying must not.
UPDATE tasks
SET lease_expires_at = :lease_until, updated_at = :now
WHERE id = :task_id AND state IN ('claimed', 'running')
  AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.task_id = :task_id AND runs.id > :run_id);

-- name: renew_node_leases
UPDATE tasks
SET lease_expires_at = :lease_until
WHERE lease_node = :node AND state IN ('claimed', 'running');

-- name: end_run
UPDATE runs
SET ended_at = :now, outcome = :outcome, exit_code = :exit_code, summary = :summary,
    error = :error, cost_usd = :cost_usd, input_tokens = :input_tokens,
    output_tokens = :output_tokens, turns = :turns, session_id = :session_id
WHERE id = :run_id AND ended_at IS NULL
RETURNING *;

-- name: recent_rate_limits
SELECT count(*) AS n FROM runs
WHERE task_id = :task_id AND outcome = 'rate_limited' AND ended_at >= :since;

-- name: report_run
UPDATE runs
SET report = :report, report_summary = :summary, heartbeat_at = :now
WHERE id = :run_id AND ended_at IS NULL
RETURNING *;

-- name: active_cooldowns
SELECT * FROM cooldowns WHERE until > :now ORDER BY runtime;

-- name: cooldown_of
-- Also a cooldown that has lifted: how long it was tells how long the next guess is.
SELECT * FROM cooldowns WHERE runtime = :runtime;

-- name: clear_cooldown
DELETE FROM cooldowns WHERE runtime = :runtime;

-- name: open_runs_of_final_tasks
-- Runs whose task a person cancelled (or that otherwise finished) while the agent still works,
-- and runs a newer run of their task superseded (cancelled, requeued and claimed again
-- before the old agent was stopped): two agents must not work on one task.
SELECT runs.* FROM runs JOIN tasks ON tasks.id = runs.task_id
WHERE runs.ended_at IS NULL AND runs.node = :node
  AND (tasks.state NOT IN ('claimed', 'running')
       OR EXISTS (SELECT 1 FROM runs AS newer
                  WHERE newer.task_id = runs.task_id AND newer.id > runs.id));
