-- Named statements of the PostgreSQL store: the same names, parameters and returned columns
-- as sqlite/queries.sql, which says what each is for. Each block runs as one statement; the
-- store wraps the blocks of one transition in a single transaction.
-- Parameters are named (:name), as in sqlite's files; the loader turns them into psycopg's.
-- PostgreSQL must know every parameter's type when it plans a statement, and a parameter
-- that is only tested (`:x IS NULL`) or only compared with another parameter tells it nothing:
-- such parameters carry an explicit cast (`:role::text IS NULL`), or planning fails with
-- "could not determine data type of parameter".

-- name: insert_task
-- RETURNING id, unlike sqlite's: psycopg's cursor has no lastrowid to read the new id from,
-- and its executemany (batched enqueue) accepts a statement that returns rows.
-- The conflict target repeats the partial index's WHERE so PostgreSQL infers tasks_open_dedup
-- (a partial unique index is an arbiter only when its predicate is implied): a duplicate of an
-- open task inserts nothing and the caller returns the open one.
INSERT INTO tasks (role, title, prompt, priority, state, pool, dedup_key, review, max_attempts,
                   run_after, parent_id, meta, created_at, updated_at)
VALUES (:role, :title, :prompt, :priority, :state, :pool, :dedup_key, :review, :max_attempts,
        :run_after, :parent_id, :meta, :now, :now)
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND finished_at IS NULL DO NOTHING
RETURNING id;

-- name: list_tasks
-- NULL filters match everything, so one statement serves every combination of CLI filters.
SELECT * FROM tasks
WHERE (:state::text IS NULL OR state = :state)
  AND (:role::text IS NULL OR role = :role)
ORDER BY CASE WHEN finished_at IS NULL THEN 0 ELSE 1 END, priority, id
LIMIT :limit;

-- name: claim_next
-- The sub-select walks tasks_ready in (priority, id) order: P0 first, FIFO within a priority.
-- :roles and :full_pools are JSON arrays (NULL = no filter) so the statement stays static.
-- Unlike sqlite's (one writer at a time, BEGIN IMMEDIATE), several nodes claim at once here:
-- FOR UPDATE locks the chosen row until commit, and SKIP LOCKED passes over rows another
-- claim holds instead of waiting for it and then finding the row no longer ready. A row
-- claimed and committed meanwhile is re-checked by FOR UPDATE against `state = 'ready'` and
-- skipped, so no task is claimed twice. No INDEXED BY: PostgreSQL has none, and its planner
-- picks the partial index for `state = 'ready' ORDER BY priority, id` by itself.
UPDATE tasks
SET state = 'claimed', lease_node = :node, lease_expires_at = :lease_until, updated_at = :now
WHERE id = (
    SELECT id FROM tasks
    WHERE state = 'ready' AND run_after <= :now
      AND (:roles::jsonb IS NULL OR role = 'any'
           OR role IN (SELECT jsonb_array_elements_text(:roles::jsonb)))
      AND (:full_pools::jsonb IS NULL OR pool IS NULL
           OR pool NOT IN (SELECT jsonb_array_elements_text(:full_pools::jsonb)))
    ORDER BY priority, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING *;

-- name: insert_run
-- The attempt number counts the task's runs; the task row is locked by its claim in the same
-- transaction, so two runs of one task cannot count at the same time.
INSERT INTO runs (task_id, attempt, node, role, runtime, claimed_at)
VALUES (:task_id, (SELECT count(*) + 1 FROM runs WHERE task_id = :task_id), :node, :role,
        :runtime, :now)
RETURNING *;

-- name: open_run_of_task
-- The rescue's second step, after expired_leases locked the task. FOR UPDATE SKIP LOCKED,
-- unlike sqlite's (one writer at a time): a node settling this run right now (late, not dead)
-- has locked the run and waits for the task, as every transition takes a run before its
-- task. Waiting for the run here was a deadlock, and when the server aborted the settlement
-- the agent's success was lost; no row instead leaves the run to its node, whose settlement
-- goes on when the rescue commits. `id = (max)` rather than ORDER BY … LIMIT 1: SKIP LOCKED
-- must not pass over the latest open run to an older one.
SELECT * FROM runs
WHERE id = (SELECT max(id) FROM runs WHERE task_id = :task_id AND ended_at IS NULL)
  AND ended_at IS NULL
FOR UPDATE SKIP LOCKED;

-- name: open_runs
SELECT * FROM runs WHERE ended_at IS NULL AND (:node::text IS NULL OR node = :node) ORDER BY id;

-- name: list_runs
SELECT * FROM runs
WHERE (:role::text IS NULL OR role = :role)
  AND (:since::double precision IS NULL OR claimed_at >= :since)
ORDER BY id DESC
LIMIT :limit;

-- name: settle_task
-- Guarded by the leased states: if a person cancelled the task meanwhile, nothing changes
-- and the caller learns it from the row count. And by the run: only the task's latest run
-- may settle it. A cancelled task requeued and claimed again while its old agent was still
-- being killed was cancelled a second time by the old run's end, its new agent killed too.
-- :state::text: compared with literals before it is assigned, and an untyped parameter
-- compared with an untyped literal leaves PostgreSQL without a type to plan with.
UPDATE tasks
SET state = :state::text, run_after = :run_after, attempts = attempts + :strike,
    rescues = rescues + :rescue, rate_limits = rate_limits + :rate_limit,
    lease_node = NULL, lease_expires_at = NULL,
    summary = coalesce(:summary, summary), last_error = coalesce(:last_error, last_error),
    error_tail = coalesce(:error_tail, error_tail), reason = :reason,
    updated_at = :now,
    finished_at = CASE WHEN :state::text IN ('completed', 'dead', 'cancelled') THEN :now END
WHERE id = :task_id AND state IN ('claimed', 'running')
  AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.task_id = :task_id AND runs.id > :run_id)
RETURNING *;

-- name: expired_leases
-- FOR UPDATE SKIP LOCKED: every node's monitor rescues expired leases; two of them at once
-- each take the rows the other has not locked, instead of one waiting to find the other's
-- rescue done and failing its whole pass on a run that already ended.
SELECT * FROM tasks
WHERE lease_expires_at IS NOT NULL AND lease_expires_at < :now
  AND state IN ('claimed', 'running')
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- name: move_task
-- A person's transition (approve, reject, block, unblock, cancel, requeue), guarded by the
-- state the caller read in the same transaction.
-- :reset_counts must be a Python bool (psycopg sends it as boolean): a 0/1 int, which SQLite
-- takes as a condition, arrives as smallint, which PostgreSQL refuses as one.
UPDATE tasks
SET state = :state::text, reason = :reason, updated_at = :now,
    run_after = CASE WHEN :state::text = 'ready' THEN :now ELSE run_after END,
    lease_node = NULL, lease_expires_at = NULL,
    attempts = CASE WHEN :reset_counts THEN 0 ELSE attempts END,
    rescues = CASE WHEN :reset_counts THEN 0 ELSE rescues END,
    rate_limits = CASE WHEN :reset_counts THEN 0 ELSE rate_limits END,
    finished_at = CASE WHEN :state::text IN ('completed', 'dead', 'cancelled') THEN :now END
WHERE id = :task_id AND state = :from_state
RETURNING *;

-- name: prune_finished_tasks
DELETE FROM tasks WHERE finished_at IS NOT NULL AND finished_at < :before;

-- wal_checkpoint has no PostgreSQL block: the server checkpoints by itself.

-- name: set_cooldown
-- A later reset wins over an earlier one: two runs hitting the same limit must not shorten it.
-- greatest() is SQLite's two-argument max(); the existing row is named by its table here.
INSERT INTO cooldowns (runtime, until, reason, created_at, span)
VALUES (:runtime, :until, :reason, :now, :span)
ON CONFLICT (runtime) DO UPDATE
SET until = greatest(cooldowns.until, excluded.until), reason = excluded.reason,
    created_at = excluded.created_at, span = excluded.span
RETURNING *;
