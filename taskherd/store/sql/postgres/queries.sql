-- Named statements of the PostgreSQL store: the same names, parameters and returned columns
-- as sqlite/queries.sql, which says what each is for. Each block runs as one statement; the
-- store wraps the blocks of one transition in a single transaction.
-- Parameters are named (:name), as in sqlite's files; the loader turns them into psycopg's.
-- PostgreSQL must know every parameter's type when it plans a statement, and a parameter
-- that is only tested (`:x IS NULL`) or only compared with another parameter tells it nothing:
-- such parameters carry an explicit cast (`:role::text IS NULL`), or planning fails with
-- "could not determine data type of parameter".

-- name: insert_task
-- RETURNING the whole row, unlike sqlite's: psycopg's cursor has no lastrowid to read the new
-- id from, its executemany accepts a statement that returns rows, and an enqueue answers with
-- the task as added without reading it again (a round trip fewer per enqueue).
-- The conflict target repeats the partial index's WHERE so PostgreSQL infers tasks_open_dedup
-- (a partial unique index is an arbiter only when its predicate is implied): a duplicate of an
-- open task inserts nothing and the caller returns the open one.
-- A child's root and depth are its parent's, read in the same statement (no parent: a root).
INSERT INTO tasks (role, title, prompt, priority, state, pool, dedup_key, review, max_attempts,
                   run_after, parent_id, meta, created_at, updated_at, root_id, depth, chain)
VALUES (:role, :title, :prompt, :priority, :state, :pool, :dedup_key, :review, :max_attempts,
        :run_after, :parent_id, :meta, :now, :now,
        (SELECT coalesce(parent.root_id, parent.id) FROM tasks AS parent
         WHERE parent.id = :parent_id),
        coalesce((SELECT parent.depth + 1 FROM tasks AS parent WHERE parent.id = :parent_id), 0),
        :chain)
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND finished_at IS NULL DO NOTHING
RETURNING *;

-- name: insert_tasks
-- insert_task for a whole batch in one statement: :rows is a JSON array of insert_task's
-- parameters but :now (one for the batch). One statement, not one a task: a batch of 1,000
-- sent as executemany is 1,000 statements planned and executed. Each task's id follows its
-- place in the array (ORDER BY its ordinal), so FIFO within a priority holds as one by one;
-- a dedup key twice in the batch, or an open task's, inserts the first alone, as one by one.
INSERT INTO tasks (role, title, prompt, priority, state, pool, dedup_key, review, max_attempts,
                   run_after, parent_id, meta, created_at, updated_at, root_id, depth, chain)
SELECT r.role, r.title, r.prompt, r.priority, r.state, r.pool, r.dedup_key, r.review,
       r.max_attempts, r.run_after, r.parent_id, r.meta, :now, :now,
       (SELECT coalesce(parent.root_id, parent.id) FROM tasks AS parent
        WHERE parent.id = r.parent_id),
       coalesce((SELECT parent.depth + 1 FROM tasks AS parent WHERE parent.id = r.parent_id), 0),
       r.chain
FROM ROWS FROM (jsonb_to_recordset(CAST(:rows AS jsonb)) AS (
         role text, title text, prompt text, priority integer, state text, pool text,
         dedup_key text, review integer, max_attempts integer, run_after double precision,
         parent_id bigint, meta text, chain text))
     WITH ORDINALITY AS r (role, title, prompt, priority, state, pool, dedup_key, review,
                           max_attempts, run_after, parent_id, meta, chain, ordinal)
ORDER BY r.ordinal
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND finished_at IS NULL DO NOTHING;

-- name: claim_next
-- The sub-select walks the ready side of tasks_queue (migration 0036) in (priority, id)
-- order, by the index's own expressions: P0 first, FIFO within a priority.
-- :roles and :full_pools are JSON arrays (NULL = no filter) so the statement stays static.
-- Unlike sqlite's (one writer at a time, BEGIN IMMEDIATE), several nodes claim at once here:
-- FOR UPDATE locks the chosen row until commit, and SKIP LOCKED passes over rows another
-- claim holds instead of waiting for it and then finding the row no longer ready. A row
-- claimed and committed meanwhile is re-checked by FOR UPDATE against `state = 'ready'` and
-- skipped, so no task is claimed twice. No INDEXED BY: PostgreSQL has none, and its planner
-- picks tasks_queue for its side and clock by itself.
UPDATE tasks
SET state = 'claimed', lease_node = :node, lease_expires_at = :lease_until, updated_at = :now
WHERE id = (
    SELECT id FROM tasks
    WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2
      AND state = 'ready' AND run_after <= :now
      AND (:roles::jsonb IS NULL OR role = 'any'
           OR role IN (SELECT jsonb_array_elements_text(:roles::jsonb)))
      AND (:full_pools::jsonb IS NULL OR pool IS NULL
           OR pool NOT IN (SELECT jsonb_array_elements_text(:full_pools::jsonb)))
    ORDER BY coalesce(finished_at, lease_expires_at, priority), id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING *;

-- name: claim_candidate
-- The next ready task as claim_next picks it, locked (FOR UPDATE SKIP LOCKED, as there) but
-- not yet claimed: a claim within limits (common/limits.sql) counts its role's and pools'
-- runs first, and the lock keeps every other node off this row meanwhile, so the claimed task
-- is this row with what the claim sets (PostgresStore reads it no more).
SELECT * FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2
  AND state = 'ready' AND run_after <= :now
  AND (:roles::jsonb IS NULL OR role = 'any'
       OR role IN (SELECT jsonb_array_elements_text(:roles::jsonb)))
  AND (:full_pools::jsonb IS NULL OR pool IS NULL
       OR pool NOT IN (SELECT jsonb_array_elements_text(:full_pools::jsonb)))
ORDER BY coalesce(finished_at, lease_expires_at, priority), id
LIMIT 1
FOR UPDATE SKIP LOCKED;

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

-- name: expired_leases
-- FOR UPDATE SKIP LOCKED: every node's monitor rescues expired leases; two of them at once
-- each take the rows the other has not locked, instead of one waiting to find the other's
-- rescue done and failing its whole pass on a run that already ended. The lease side of
-- tasks_queue (migration 0036), by its own expressions.
SELECT * FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1 AND coalesce(finished_at, lease_expires_at, priority) < :now
  AND lease_expires_at IS NOT NULL AND state IN ('claimed', 'running')
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- wal_checkpoint has no PostgreSQL block: the server checkpoints by itself.

-- name: set_cooldown
-- A later reset wins over an earlier one: two runs hitting the same limit must not shorten it.
-- A new limit ends any probe: the next one waits for the new reset.
-- greatest() is SQLite's two-argument max(); the existing row is named by its table here.
INSERT INTO cooldowns (runtime, until, reason, created_at, span, down_since)
VALUES (:runtime, :until, :reason, :now, :span, :down_since)
ON CONFLICT (runtime) DO UPDATE
SET until = greatest(cooldowns.until, excluded.until), reason = excluded.reason,
    created_at = excluded.created_at, span = excluded.span, down_since = excluded.down_since,
    probe_node = NULL, probe_run_id = NULL, probe_started_at = NULL
RETURNING *;

-- name: cost_by_day
-- As SQLite's block; the day starts are read from the JSON array with jsonb's functions.
SELECT day_start,
       count(*) AS runs,
       coalesce(sum(cost_usd), 0) AS cost_usd,
       coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       coalesce(sum(CASE WHEN ended_at IS NOT NULL THEN CASE WHEN cost_usd IS NULL AND spawned_at IS NOT NULL AND outcome <> 'rate_limited' THEN 1 ELSE 0 END END), 0)
           AS unpriced_runs
FROM (
    SELECT (SELECT max(value::double precision)
            FROM jsonb_array_elements_text(CAST(:starts AS jsonb)) AS day(value)
            WHERE value::double precision <= runs.claimed_at) AS day_start,
           cost_usd, input_tokens, output_tokens, ended_at, spawned_at, outcome
    FROM runs
    WHERE claimed_at >= :since
) AS dated
GROUP BY day_start
ORDER BY day_start;

-- name: get_node
-- FOR UPDATE: node_up reads the down mark it is about to clear; a node declaring this one
-- down at the same moment either finishes first (and the mark is read) or waits.
SELECT * FROM nodes WHERE name = :name FOR UPDATE;

-- name: silent_nodes
-- FOR UPDATE SKIP LOCKED: every node's monitor looks for silent nodes; one of them declares
-- each and rescues its runs, the others pass it by instead of waiting to find it done.
SELECT * FROM nodes
WHERE stopped_at IS NULL AND down_at IS NULL AND name <> :node
  AND last_seen < :now - coalesce(timeout, 3 * lease)
ORDER BY name
FOR UPDATE SKIP LOCKED;

-- name: open_runs_of_down_node
-- FOR UPDATE: the rescue of a node declared down while it was only slow must not end a run
-- `lost` whose agent's `taskherd done` committed after the rescue read the run: the agent
-- would be told its report was taken, and its task run again. Locked first, each run is
-- read by the rescue with its report; a report not yet made waits and finds the run ended.
-- A run the node settles meanwhile is skipped (FOR UPDATE rechecks `ended_at IS NULL`).
SELECT * FROM runs
WHERE ended_at IS NULL AND node = :node
ORDER BY id
FOR UPDATE;

-- name: lock_runs_for_rollup
-- The runs' mark follows the oldest open run the rollup can see; a run another transaction
-- is ending right now must either be seen ended by the rollup or see the moved mark (and add
-- itself), never neither. EXCLUSIVE waits for the runs' writers and holds new ones back for
-- the few milliseconds of the rollup; readers go on.
LOCK TABLE runs IN EXCLUSIVE MODE;

-- name: roll_up_runs
-- Adds the ended runs between the mark and :through to their hour's sums.
INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens, unpriced)
SELECT role, floor(claimed_at / 3600) * 3600, count(*), coalesce(sum(cost_usd), 0),
       coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
       sum(CASE WHEN cost_usd IS NULL AND spawned_at IS NOT NULL AND outcome <> 'rate_limited' THEN 1 ELSE 0 END)
FROM runs
WHERE id > (SELECT runs_through FROM rollup_marks) AND id <= :through AND ended_at IS NOT NULL
GROUP BY 1, 2
ON CONFLICT (role, hour) DO UPDATE
SET runs = spend_hours.runs + excluded.runs, cost_usd = spend_hours.cost_usd + excluded.cost_usd,
    input_tokens = spend_hours.input_tokens + excluded.input_tokens,
    output_tokens = spend_hours.output_tokens + excluded.output_tokens,
    unpriced = spend_hours.unpriced + excluded.unpriced;

-- name: lock_spawning_task
-- Two additions of one run at once (an agent's parallel calls) are counted one after the
-- other: the second waits for the first's commit, then counts its child too.
SELECT id FROM tasks WHERE id = :task_id FOR UPDATE;

-- name: tasks_to_prune
-- As the common block, locked: here the monitors of several nodes prune at once. Without the
-- lock two prunes would both count a task's runs into pruned_run_totals (each reading before
-- the other's DELETE committed) while only one deletes them, and /metrics would count them
-- twice. Locked, the second waits, re-checks the row and finds it gone (or revived: a task
-- requeued meanwhile no longer matches), so it counts only what it deletes; the DELETE that
-- follows in the transaction finds the rows it locked.
SELECT id FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
  AND coalesce(finished_at, lease_expires_at, priority) < :before
FOR UPDATE;

-- name: live_admin_tokens
-- FOR UPDATE: two revokes of the last two admin tokens at once would each count two and
-- leave none; the second waits here, and counts again once the first has committed.
SELECT name FROM api_tokens
WHERE scope = 'admin' AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > :now)
ORDER BY id
FOR UPDATE;
