-- Named statements of the SQLite store. Each block runs as one statement; the store wraps
-- the blocks of one transition in a single BEGIN IMMEDIATE transaction.
-- Parameters are named (:name) so both dialects can share the callers.

-- name: insert_task
-- No RETURNING: executemany (batched enqueue) refuses statements that return rows.
-- The conflict target repeats the partial index's WHERE so SQLite matches tasks_open_dedup:
-- a duplicate of an open task inserts nothing and the caller returns the open one.
INSERT INTO tasks (role, title, prompt, priority, state, pool, dedup_key, review, max_attempts,
                   run_after, parent_id, meta, created_at, updated_at)
VALUES (:role, :title, :prompt, :priority, :state, :pool, :dedup_key, :review, :max_attempts,
        :run_after, :parent_id, :meta, :now, :now)
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND finished_at IS NULL DO NOTHING;

-- name: list_tasks
-- NULL filters match everything, so one statement serves every combination of CLI filters.
SELECT * FROM tasks
WHERE (:state IS NULL OR state = :state)
  AND (:role IS NULL OR role = :role)
ORDER BY CASE WHEN finished_at IS NULL THEN 0 ELSE 1 END, priority, id
LIMIT :limit;

-- name: claim_next
-- The sub-select walks tasks_ready in (priority, id) order: P0 first, FIFO within a priority.
-- :roles and :full_pools are JSON arrays (NULL = no filter) so the statement stays static.
-- INDEXED BY: without statistics the planner may pick another index and then sort every
-- ready task in a temp B-tree on each claim, O(backlog) per claim: with a 5,000-task backlog
-- claim+complete ran at 636/s instead of thousands (bench/queue.py).
UPDATE tasks
SET state = 'claimed', lease_node = :node, lease_expires_at = :lease_until, updated_at = :now
WHERE id = (
    SELECT id FROM tasks INDEXED BY tasks_ready
    WHERE state = 'ready' AND run_after <= :now
      AND (:roles IS NULL OR role = 'any' OR role IN (SELECT value FROM json_each(:roles)))
      AND (:full_pools IS NULL OR pool IS NULL
           OR pool NOT IN (SELECT value FROM json_each(:full_pools)))
    ORDER BY priority, id
    LIMIT 1
)
RETURNING *;

-- name: insert_run
INSERT INTO runs (task_id, attempt, node, role, runtime, claimed_at)
VALUES (:task_id, (SELECT count(*) + 1 FROM runs WHERE task_id = :task_id), :node, :role,
        :runtime, :now)
RETURNING *;

-- name: open_run_of_task
SELECT * FROM runs WHERE task_id = :task_id AND ended_at IS NULL ORDER BY id DESC LIMIT 1;

-- name: open_runs
SELECT * FROM runs WHERE ended_at IS NULL AND (:node IS NULL OR node = :node) ORDER BY id;

-- name: list_runs
SELECT * FROM runs
WHERE (:role IS NULL OR role = :role)
  AND (:since IS NULL OR claimed_at >= :since)
ORDER BY id DESC
LIMIT :limit;

-- name: settle_task
-- Guarded by the leased states: if a person cancelled the task meanwhile, nothing changes
-- and the caller learns it from the row count. And by the run: only the task's latest run
-- may settle it. A cancelled task requeued and claimed again while its old agent was still
-- being killed was cancelled a second time by the old run's end, its new agent killed too.
UPDATE tasks
SET state = :state, run_after = :run_after, attempts = attempts + :strike,
    rescues = rescues + :rescue, rate_limits = rate_limits + :rate_limit,
    lease_node = NULL, lease_expires_at = NULL,
    summary = coalesce(:summary, summary), last_error = coalesce(:last_error, last_error),
    error_tail = coalesce(:error_tail, error_tail), reason = :reason,
    updated_at = :now,
    finished_at = CASE WHEN :state = 'completed' OR :state = 'dead' OR :state = 'cancelled' THEN :now END
WHERE id = :task_id AND (state = 'claimed' OR state = 'running')
  AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.task_id = :task_id AND runs.id > :run_id)
RETURNING *;

-- name: expired_leases
SELECT * FROM tasks
WHERE lease_expires_at IS NOT NULL AND lease_expires_at < :now
  AND state IN ('claimed', 'running')
ORDER BY id;

-- name: move_task
-- A person's transition (approve, reject, block, unblock, cancel, requeue), guarded by the
-- state the caller read in the same transaction.
UPDATE tasks
SET state = :state, reason = :reason, updated_at = :now,
    run_after = CASE WHEN :state = 'ready' THEN :now ELSE run_after END,
    lease_node = NULL, lease_expires_at = NULL,
    attempts = CASE WHEN :reset_counts THEN 0 ELSE attempts END,
    rescues = CASE WHEN :reset_counts THEN 0 ELSE rescues END,
    rate_limits = CASE WHEN :reset_counts THEN 0 ELSE rate_limits END,
    finished_at = CASE WHEN :state = 'completed' OR :state = 'dead' OR :state = 'cancelled' THEN :now END
WHERE id = :task_id AND state = :from_state
RETURNING *;

-- name: prune_finished_tasks
DELETE FROM tasks WHERE finished_at IS NOT NULL AND finished_at < :before;

-- name: wal_checkpoint
-- PASSIVE: copies what it can without waiting for or blocking any reader or writer; once all
-- of the WAL is copied, the next writer starts it over, so it does not grow without bound.
PRAGMA wal_checkpoint(PASSIVE);

-- name: set_cooldown
-- A later reset wins over an earlier one: two runs hitting the same limit must not shorten it.
INSERT INTO cooldowns (runtime, until, reason, created_at, span)
VALUES (:runtime, :until, :reason, :now, :span)
ON CONFLICT (runtime) DO UPDATE
SET until = max(until, excluded.until), reason = excluded.reason, created_at = excluded.created_at, span = excluded.span
RETURNING *;
