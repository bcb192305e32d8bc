-- Named statements of the SQLite store. Each block runs as one statement; the store wraps
-- the blocks of one transition in a single BEGIN IMMEDIATE transaction.
-- Parameters are named (:name) so both dialects can share the callers.

-- name: insert_task
-- No RETURNING: executemany (batched enqueue) refuses statements that return rows.
-- The conflict target repeats the partial index's WHERE so SQLite matches tasks_open_dedup:
-- a duplicate of an open task inserts nothing and the caller returns the open one.
-- A child's root and depth are its parent's, read in the same statement (no parent: a root).
INSERT INTO tasks (role, title, prompt, priority, state, pool, dedup_key, review, max_attempts,
                   run_after, parent_id, meta, created_at, updated_at, root_id, depth, chain)
VALUES (:role, :title, :prompt, :priority, :state, :pool, :dedup_key, :review, :max_attempts,
        :run_after, :parent_id, :meta, :now, :now,
        (SELECT coalesce(parent.root_id, parent.id) FROM tasks AS parent
         WHERE parent.id = :parent_id),
        coalesce((SELECT parent.depth + 1 FROM tasks AS parent WHERE parent.id = :parent_id), 0),
        :chain)
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND finished_at IS NULL DO NOTHING;

-- name: insert_tasks
-- insert_task for a whole batch in one statement: :rows is a JSON array of insert_task's
-- parameters but :now (one for the batch). Each task's id follows its place in the array
-- (json_each's key), so FIFO within a priority holds as one by one; a dedup key twice in the
-- batch, or an open task's, inserts the first alone, as one by one. WHERE true: without it
-- SQLite would read the ON of ON CONFLICT as a join's. The SQLite store runs insert_task by
-- executemany instead (faster here, where a statement costs no round trip); this block is
-- what PostgreSQL's, which its store runs, is checked against (test_postgres_sql.py).
INSERT INTO tasks (role, title, prompt, priority, state, pool, dedup_key, review, max_attempts,
                   run_after, parent_id, meta, created_at, updated_at, root_id, depth, chain)
SELECT value ->> '$.role', value ->> '$.title', value ->> '$.prompt', value ->> '$.priority',
       value ->> '$.state', value ->> '$.pool', value ->> '$.dedup_key', value ->> '$.review',
       value ->> '$.max_attempts', value ->> '$.run_after', value ->> '$.parent_id',
       value ->> '$.meta', :now, :now,
       (SELECT coalesce(parent.root_id, parent.id) FROM tasks AS parent
        WHERE parent.id = value ->> '$.parent_id'),
       coalesce((SELECT parent.depth + 1 FROM tasks AS parent
                 WHERE parent.id = value ->> '$.parent_id'), 0),
       value ->> '$.chain'
FROM json_each(:rows) WHERE true
ORDER BY key
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND finished_at IS NULL DO NOTHING;

-- name: claim_next
-- The sub-select walks the ready side of tasks_queue (migration 0036) in (priority, id)
-- order, by the index's own expressions: P0 first, FIFO within a priority.
-- :roles and :full_pools are JSON arrays (NULL = no filter) so the statement stays static.
-- INDEXED BY: without statistics the planner may pick another index and then sort every
-- ready task in a temp B-tree on each claim, O(backlog) per claim: with a 5,000-task backlog
-- claim+complete ran at 636/s instead of thousands (bench/queue.py).
UPDATE tasks
SET state = 'claimed', lease_node = :node, lease_expires_at = :lease_until, updated_at = :now
WHERE id = (
    SELECT id FROM tasks INDEXED BY tasks_queue
    WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2
      AND state = 'ready' AND run_after <= :now
      AND (:roles IS NULL OR role = 'any' OR role IN (SELECT value FROM json_each(:roles)))
      AND (:full_pools IS NULL OR pool IS NULL
           OR pool NOT IN (SELECT value FROM json_each(:full_pools)))
    ORDER BY coalesce(finished_at, lease_expires_at, priority), id
    LIMIT 1
)
RETURNING *;

-- name: claim_candidate
-- The next ready task as claim_next picks it (and INDEXED BY for the same reason), but not yet
-- claimed: a claim within limits (common/limits.sql) counts its role's and pools' runs first.
-- Every column, as PostgreSQL's, whose claim makes the claimed task of it.
SELECT * FROM tasks INDEXED BY tasks_queue
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2
  AND state = 'ready' AND run_after <= :now
  AND (:roles IS NULL OR role = 'any' OR role IN (SELECT value FROM json_each(:roles)))
  AND (:full_pools IS NULL OR pool IS NULL
       OR pool NOT IN (SELECT value FROM json_each(:full_pools)))
ORDER BY coalesce(finished_at, lease_expires_at, priority), id
LIMIT 1;

-- name: open_run_of_task
SELECT * FROM runs WHERE task_id = :task_id AND ended_at IS NULL ORDER BY id DESC LIMIT 1;

-- name: expired_leases
-- The lease side of tasks_queue (migration 0036), by its own expressions.
SELECT * FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1 AND coalesce(finished_at, lease_expires_at, priority) < :now
  AND lease_expires_at IS NOT NULL AND state IN ('claimed', 'running')
ORDER BY id;

-- name: wal_checkpoint
-- PASSIVE: copies what it can without waiting for or blocking any reader or writer; once all
-- of the WAL is copied, the next writer starts it over, so it does not grow without bound.
PRAGMA wal_checkpoint(PASSIVE);

-- name: set_cooldown
-- A later reset wins over an earlier one: two runs hitting the same limit must not shorten it.
-- A new limit ends any probe: the next one waits for the new reset. :down_since is the
-- outage's start (the caller keeps an outage's first), NULL for a rate limit.
INSERT INTO cooldowns (runtime, until, reason, created_at, span, down_since)
VALUES (:runtime, :until, :reason, :now, :span, :down_since)
ON CONFLICT (runtime) DO UPDATE
SET until = max(until, excluded.until), reason = excluded.reason, created_at = excluded.created_at, span = excluded.span,
    down_since = excluded.down_since,
    probe_node = NULL, probe_run_id = NULL, probe_started_at = NULL
RETURNING *;

-- name: cost_by_day
-- Runs, cost and tokens per day of the fleet's zone, summed by the database. SQLite knows no
-- time zones, so the caller passes the days' starts (:starts, a JSON array of unix seconds,
-- ascending: midnights in the zone, daylight saving included) and each run falls in the last
-- day that starts at or before it. PostgreSQL's block reads the same array as jsonb.
SELECT day_start,
       count(*) AS runs,
       coalesce(sum(cost_usd), 0) AS cost_usd,
       coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       coalesce(sum(CASE WHEN ended_at IS NOT NULL THEN CASE WHEN cost_usd IS NULL AND spawned_at IS NOT NULL AND outcome <> 'rate_limited' THEN 1 ELSE 0 END END), 0)
           AS unpriced_runs
FROM (
    SELECT (SELECT max(value) FROM json_each(:starts) WHERE value <= runs.claimed_at) AS day_start,
           cost_usd, input_tokens, output_tokens, ended_at, spawned_at, outcome
    FROM runs
    WHERE claimed_at >= :since
)
GROUP BY day_start
ORDER BY day_start;


-- name: open_runs
-- INDEXED BY: for ORDER BY id the planner prefers walking every run ever kept in id order
-- over the partial index of the open ones and a sort of those few (128 ms a call with a
-- million runs kept; the supervisor asks every second). PostgreSQL plans this itself.
SELECT * FROM runs INDEXED BY runs_open
WHERE ended_at IS NULL AND (CAST(:node AS TEXT) IS NULL OR node = :node)
ORDER BY id;

-- name: open_runs_of_down_node
-- The runs of a node being declared down, for its rescue to end: SQLite's one writer at a
-- time already keeps an agent's report from landing between the rescue's read and its end.
SELECT * FROM runs INDEXED BY runs_open
WHERE ended_at IS NULL AND node = :node
ORDER BY id;

-- name: count_by_state_and_role
-- As the common block, with the indexes named: without statistics the planner would rather
-- scan the table than look up the rows of a partial index.
SELECT state, role, count(*) AS n FROM tasks INDEXED BY tasks_queue
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2 AND state = 'ready'
GROUP BY state, role
UNION ALL
SELECT state, role, count(*) FROM tasks INDEXED BY tasks_queue
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1 AND lease_expires_at IS NOT NULL
  AND state IN ('claimed', 'running')
GROUP BY state, role
UNION ALL
SELECT state, role, count(*) FROM tasks INDEXED BY tasks_waiting
WHERE state = 'pending' OR state = 'needs_review' OR state = 'blocked'
       OR state = 'merging'
GROUP BY state, role
UNION ALL
SELECT state, role, sum(n) FROM (
    SELECT state, role, n FROM finished_counts WHERE n > 0
    UNION ALL
    SELECT state, role, count(*) FROM tasks INDEXED BY tasks_queue
    WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
      AND coalesce(finished_at, lease_expires_at, priority) >= :tasks_through
      AND state IN ('completed', 'dead', 'cancelled')
    GROUP BY state, role
)
GROUP BY state, role
ORDER BY role, state;

-- name: runs_mark
-- As the common block; INDEXED BY, or min(id) walks the ended runs from the first.
SELECT coalesce((SELECT min(id) FROM runs INDEXED BY runs_open WHERE ended_at IS NULL),
                (SELECT coalesce(max(id), 0) + 1 FROM runs)) - 1 AS through,
       (SELECT runs_through FROM rollup_marks) AS marked;

-- name: lock_runs_for_rollup
-- PostgreSQL takes a lock here (see its file); SQLite's write transaction already holds the
-- whole database. (A statement returning no row: one left unread would hold up the COMMIT.)
SELECT 1 WHERE 0;

-- name: roll_up_runs
-- Adds the ended runs between the mark and :through to their hour's sums.
INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens, unpriced)
SELECT role, CAST(claimed_at / 3600 AS INTEGER) * 3600.0, count(*), coalesce(sum(cost_usd), 0),
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
