-- Named SQL blocks of queries that read the same in every dialect.
-- A dialect's folder overrides a block by defining the same name, with the reason above it.
-- A parameter that is only tested for NULL is cast (`CAST(:x AS TEXT) IS NULL`): PostgreSQL
-- must know each parameter's type when it plans a statement ("could not determine data type
-- of parameter" otherwise), and SQLite reads the cast as a no-op on a text or NULL value.

-- name: open_task_by_dedup_key
SELECT * FROM tasks WHERE dedup_key = :dedup_key AND finished_at IS NULL;

-- name: get_task
SELECT * FROM tasks WHERE id = :id;

-- name: task_of_run
-- Read with end_run, in its round trip: the task of the run that just ended.
SELECT * FROM tasks WHERE id = (SELECT task_id FROM runs WHERE id = :run_id);

-- name: count_by_state_and_role
-- Nothing is counted on the claim or settle path (migration 0012): open tasks through the
-- indexes that hold them anyway (ready; leased; waiting for a person), finished ones from the
-- counters the monitor rolls up, plus the few finished since its mark, :tasks_through (read
-- by the caller: a mark read in the statement leaves PostgreSQL planning the range blind).
SELECT state, role, count(*) AS n FROM tasks WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2 AND state = 'ready'
GROUP BY state, role
UNION ALL
SELECT state, role, count(*) FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1 AND lease_expires_at IS NOT NULL
  AND state IN ('claimed', 'running')
GROUP BY state, role
UNION ALL
SELECT state, role, count(*) FROM tasks
WHERE state = 'pending' OR state = 'needs_review' OR state = 'blocked'
       OR state = 'merging'
GROUP BY state, role
UNION ALL
SELECT state, role, sum(n) FROM (
    SELECT state, role, n FROM finished_counts WHERE n > 0
    UNION ALL
    SELECT state, role, count(*) FROM tasks
    WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
      AND coalesce(finished_at, lease_expires_at, priority) >= :tasks_through
      AND state IN ('completed', 'dead', 'cancelled')
    GROUP BY state, role
) AS finished
GROUP BY state, role
ORDER BY role, state;

-- name: roll_up_finished_tasks
-- Adds the tasks finished between the mark and :through to the counters; advance_tasks_mark
-- then moves the mark, in the same transaction. `+tasks_through`:
-- a bound with the column's REAL affinity keeps SQLite from using it on tasks_queue's
-- expression, which has none, and the range became a scan of the whole history.
INSERT INTO finished_counts (state, role, n)
SELECT state, role, count(*) FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
  AND coalesce(finished_at, lease_expires_at, priority) >= (SELECT +tasks_through FROM rollup_marks)
  AND coalesce(finished_at, lease_expires_at, priority) < :through
  AND state IN ('completed', 'dead', 'cancelled')
GROUP BY state, role
ON CONFLICT (state, role) DO UPDATE SET n = finished_counts.n + excluded.n;

-- name: advance_tasks_mark
UPDATE rollup_marks SET tasks_through = :through WHERE tasks_through < :through;

-- name: rollup_marks
SELECT tasks_through, runs_through FROM rollup_marks;

-- name: runs_mark
-- How far the runs can be rolled up: to just below the oldest open run (every run up to the
-- mark has ended), and where the mark is now.
SELECT coalesce((SELECT min(id) FROM runs WHERE ended_at IS NULL),
                (SELECT coalesce(max(id), 0) + 1 FROM runs)) - 1 AS through,
       (SELECT runs_through FROM rollup_marks) AS marked;

-- name: advance_runs_mark
UPDATE rollup_marks SET runs_through = :through WHERE runs_through < :through;

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
-- The whole run as it now is: the heartbeat's answer, with no read after the write.
UPDATE runs
SET heartbeat_at = :now, progress = coalesce(:progress, progress)
WHERE id = :run_id AND ended_at IS NULL
RETURNING *;

-- name: renew_task_lease
-- Only the latest run's heartbeat holds the lease: an old agent still dying must not.
UPDATE tasks
SET lease_expires_at = :lease_until, updated_at = :now
WHERE id = :task_id AND state IN ('claimed', 'running')
  AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.task_id = :task_id AND runs.id > :run_id);

-- name: renew_node_leases
-- `(CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1` and `lease_expires_at IS NOT NULL` say nothing new of a
-- leased task, but let the lease side of tasks_queue find the node's tasks: without them,
-- each renewal scanned every task ever kept.
UPDATE tasks
SET lease_expires_at = :lease_until
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1 AND lease_expires_at IS NOT NULL AND lease_node = :node
  AND state IN ('claimed', 'running');

-- name: renew_due_leases
-- The node's leases that were renewed longest ago, before :renew_before, a batch at a time:
-- the monitor renews a little each pass instead of every lease at once (a thousand rows in
-- one write held the daemon's event loop). Found and ordered by tasks_queue's expressions.
UPDATE tasks
SET lease_expires_at = :lease_until
WHERE id IN (
    SELECT id FROM tasks
    WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1
      AND coalesce(finished_at, lease_expires_at, priority) < :renew_before
      AND lease_expires_at IS NOT NULL AND lease_node = :node
      AND state IN ('claimed', 'running')
    ORDER BY coalesce(finished_at, lease_expires_at, priority)
    LIMIT :batch);

-- name: end_run
-- Usage the agent reported (`taskherd done --cost-usd`) stays unless the runtime measured its own.
UPDATE runs
SET ended_at = :now, outcome = :outcome, exit_code = :exit_code, summary = :summary,
    error = :error, cost_usd = coalesce(:cost_usd, cost_usd),
    input_tokens = coalesce(:input_tokens, input_tokens),
    output_tokens = coalesce(:output_tokens, output_tokens), turns = :turns, session_id = :session_id
WHERE id = :run_id AND ended_at IS NULL
RETURNING *;

-- name: recent_rate_limits
SELECT count(*) AS n FROM runs
WHERE task_id = :task_id AND outcome = 'rate_limited' AND ended_at >= :since;

-- name: report_run
-- The first report stands: a run already reported is left as it is (`SqlStore.report`).
UPDATE runs
SET report = :report, report_summary = :summary, heartbeat_at = :now
WHERE id = :run_id AND ended_at IS NULL AND report IS NULL
RETURNING *;

-- name: active_cooldowns
SELECT * FROM cooldowns WHERE until > :now ORDER BY runtime;

-- name: cooldown_of
-- Also a cooldown that has lifted: how long it was tells how long the next guess is.
SELECT * FROM cooldowns WHERE runtime = :runtime;

-- name: clear_cooldown
DELETE FROM cooldowns WHERE runtime = :runtime;

-- name: all_cooldowns
-- Paused ones (until > now) and lifted ones whose probe has not yet shown the limit gone.
SELECT * FROM cooldowns ORDER BY runtime;

-- name: take_probe
-- Compare-and-set: of every node that sees the cooldown lifted, one takes the probe.
UPDATE cooldowns SET probe_node = :node, probe_started_at = :now, probe_run_id = NULL
WHERE runtime = :runtime AND until <= :now AND probe_node IS NULL;

-- name: attach_probe
UPDATE cooldowns SET probe_run_id = :run_id
WHERE runtime = :runtime AND probe_node = :node AND until <= :now;

-- name: release_probe
-- The probe ended without telling (no run claimed, crashed, lost): another one may go.
UPDATE cooldowns SET probe_node = NULL, probe_run_id = NULL, probe_started_at = NULL
WHERE runtime = :runtime AND probe_node IS NOT NULL
  AND (CAST(:run_id AS BIGINT) IS NULL OR probe_run_id = :run_id);

-- name: probe_passed
-- The probe got past the provider: the limit is gone and the whole runtime may start again.
-- The row is returned: an outage's end is told to delivery targets with its start.
DELETE FROM cooldowns WHERE runtime = :runtime AND probe_run_id = :run_id AND until <= :now
RETURNING *;

-- name: set_liveness
-- The supervisor's verdict on a running agent, written only when it changes.
UPDATE runs SET liveness = :liveness, liveness_since = :since, liveness_note = :note
WHERE id = :run_id AND ended_at IS NULL;

-- name: heartbeats_since
-- Only the runs whose agent called in since the last look: the supervisor watches a thousand
-- agents without reading a thousand rows a second.
SELECT id, heartbeat_at FROM runs
WHERE node = :node AND ended_at IS NULL AND heartbeat_at >= :since;

-- name: open_run_ids
SELECT id, spawned_at FROM runs WHERE ended_at IS NULL AND node = :node;

-- name: unspawned_run_ids
-- Claimed on the node and not spawned yet: read from runs_open's entries, not the rows.
SELECT id FROM runs WHERE node = :node AND ended_at IS NULL AND spawned_at IS NULL;

-- name: open_runs_of_final_tasks
-- Runs whose task a person cancelled (or that otherwise finished) while the agent still works,
-- and runs a newer run of their task superseded (cancelled, requeued and claimed again
-- before the old agent was stopped): two agents must not work on one task.
SELECT runs.* FROM runs JOIN tasks ON tasks.id = runs.task_id
WHERE runs.ended_at IS NULL AND runs.node = :node
  AND (tasks.state NOT IN ('claimed', 'running')
       OR EXISTS (SELECT 1 FROM runs AS newer
                  WHERE newer.task_id = runs.task_id AND newer.id > runs.id));

-- name: insert_run
-- The attempt number counts the task's runs; the task row is locked by its claim in the same
-- transaction, so two runs of one task cannot count at the same time. :credential_sha256 is
-- the digest of the secret of the run's credential when the claim brings one (the token,
-- `<run_id>.<secret>`, is made once the id is known): written with the row, not by an UPDATE
-- of it after.
INSERT INTO runs (task_id, attempt, node, role, runtime, claimed_at, pool, credential_sha256)
VALUES (:task_id, (SELECT count(*) + 1 FROM runs WHERE task_id = :task_id), :node, :role,
        :runtime, :now, :pool, :credential_sha256)
RETURNING *;

-- name: tasks_to_prune
-- The finished tasks that pruning deletes, finished before :before: the history side of
-- tasks_queue (migration 0036), by its own expressions.
SELECT id FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
  AND coalesce(finished_at, lease_expires_at, priority) < :before;

-- name: fold_pruned_runs
-- In the prune's transaction, before they go: the ended runs of the tasks it deletes are
-- added to pruned_run_totals (migration 0027), so /metrics' counters lose nothing. A run
-- still open (an agent stopping on a task cancelled long ago) was never counted, so it is
-- not added either.
INSERT INTO pruned_run_totals (role, outcome, runs, cost_usd, input_tokens, output_tokens,
                               unpriced)
SELECT role, outcome, count(*), coalesce(sum(cost_usd), 0), coalesce(sum(input_tokens), 0),
       coalesce(sum(output_tokens), 0), sum(CASE WHEN cost_usd IS NULL AND spawned_at IS NOT NULL AND outcome <> 'rate_limited' THEN 1 ELSE 0 END)
FROM runs
WHERE ended_at IS NOT NULL AND task_id IN ({tasks_to_prune})
GROUP BY role, outcome
ON CONFLICT (role, outcome) DO UPDATE
SET runs = pruned_run_totals.runs + excluded.runs,
    cost_usd = pruned_run_totals.cost_usd + excluded.cost_usd,
    input_tokens = pruned_run_totals.input_tokens + excluded.input_tokens,
    output_tokens = pruned_run_totals.output_tokens + excluded.output_tokens,
    unpriced = pruned_run_totals.unpriced + excluded.unpriced;

-- name: prune_finished_tasks
-- Their runs go with them (ON DELETE CASCADE), after fold_pruned_runs counted them.
DELETE FROM tasks WHERE id IN ({tasks_to_prune});

-- name: list_tasks
-- NULL filters match everything, so one statement serves every combination of CLI filters.
SELECT * FROM tasks
WHERE (CAST(:state AS TEXT) IS NULL OR state = :state)
  AND (CAST(:role AS TEXT) IS NULL OR role = :role)
ORDER BY CASE WHEN finished_at IS NULL THEN 0 ELSE 1 END, priority, id
LIMIT :limit;

-- name: open_tasks_in_state
-- The open tasks in :state (of :role, or any), for list_tasks and page_tasks: a filter of
-- NULL-or-equal can use no index, and read the whole history for a state of a few rows. Each
-- open state has an index that holds it only: ready and leased tasks their sides of
-- tasks_queue, waiting ones tasks_waiting (the range on the leased side's clock
-- steers SQLite's planner, which has no statistics, to the index). A part whose state is not
-- asked reads nothing.
SELECT * FROM tasks WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2 AND state = 'ready'
  AND CAST(:state AS TEXT) = 'ready'
  AND (CAST(:role AS TEXT) IS NULL OR role = :role)
UNION ALL
SELECT * FROM tasks
WHERE state = :state AND (state = 'pending' OR state = 'needs_review' OR state = 'blocked'
       OR state = 'merging')
  AND (CAST(:role AS TEXT) IS NULL OR role = :role)
UNION ALL
SELECT * FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1
  AND coalesce(finished_at, lease_expires_at, priority) > 0 AND lease_expires_at IS NOT NULL
  AND (state = 'claimed' OR state = 'running') AND state = :state
  AND (CAST(:role AS TEXT) IS NULL OR role = :role);

-- name: list_open_tasks_in_state
SELECT * FROM ({open_tasks_in_state}) AS open_tasks
ORDER BY priority, id
LIMIT :limit;

-- name: list_finished_tasks_in_state
-- list_tasks for completed, dead or cancelled: the most recently finished first, read down
-- tasks_queue (migration 0036) by its own expressions. The index holds the state, so the
-- read stops after :limit rows of it rather than sorting a million.
SELECT * FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
  AND state = :state AND (CAST(:role AS TEXT) IS NULL OR role = :role)
ORDER BY coalesce(finished_at, lease_expires_at, priority) DESC
LIMIT :limit;

-- name: waiting_at_priority
-- The tasks of one priority not yet running: the ready ones (in claim order), then the ones
-- pending approval, oldest first, at most :limit of each. Each half reads an index the queue
-- keeps anyway: tasks_queue's ready side is (priority, id), so the first half reads
-- exactly the rows it returns; tasks_waiting holds the pending tasks, whose priority is then
-- checked row by row (a fleet's pending tasks wait for a person: 50,000 of them cost 9 ms).
-- list_tasks' NULL-or-equal filters cannot use an index: the board and the dispatcher's P0
-- warning scanned the whole history through it.
SELECT * FROM (
    SELECT * FROM tasks
    WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2 AND state = 'ready'
      AND coalesce(finished_at, lease_expires_at, priority) = :priority
    ORDER BY id LIMIT :limit
) AS ready
UNION ALL
SELECT * FROM (
    SELECT * FROM tasks WHERE state = 'pending' AND priority = :priority
    ORDER BY id LIMIT :limit
) AS pending;

-- name: open_runs
SELECT * FROM runs WHERE ended_at IS NULL AND (CAST(:node AS TEXT) IS NULL OR node = :node) ORDER BY id;

-- name: list_runs
SELECT * FROM runs
WHERE (CAST(:role AS TEXT) IS NULL OR role = :role)
  AND (CAST(:since AS DOUBLE PRECISION) IS NULL OR claimed_at >= :since)
ORDER BY id DESC
LIMIT :limit;

-- name: move_task
-- A person's transition (approve, reject, block, unblock, cancel, requeue), guarded by the
-- state the caller read in the same transaction.
-- :reset_counts must be a Python bool (psycopg sends it as boolean): a 0/1 int, which SQLite
-- takes as a condition, arrives as smallint, which PostgreSQL refuses as one.
UPDATE tasks
SET state = CAST(:state AS TEXT), reason = :reason, updated_at = :now,
    run_after = CASE WHEN CAST(:state AS TEXT) = 'ready' THEN :now ELSE run_after END,
    lease_node = NULL, lease_expires_at = NULL,
    attempts = CASE WHEN :reset_counts THEN 0 ELSE attempts END,
    rescues = CASE WHEN :reset_counts THEN 0 ELSE rescues END,
    rate_limits = CASE WHEN :reset_counts THEN 0 ELSE rate_limits END,
    finished_at = CASE WHEN CAST(:state AS TEXT) IN ('completed', 'dead', 'cancelled') THEN :now END
WHERE id = :task_id AND state = :from_state
RETURNING *;

-- name: settle_task
-- Guarded by the leased states: if a person cancelled the task meanwhile, nothing changes
-- and the caller learns it from the row count. And by the run: only the task's latest run
-- may settle it. A cancelled task requeued and claimed again while its old agent was still
-- being killed was cancelled a second time by the old run's end, its new agent killed too.
-- CAST(:state AS TEXT): compared with literals before it is assigned, and an untyped parameter
-- compared with an untyped literal leaves PostgreSQL without a type to plan with. OR chains,
-- not IN lists: SQLite builds a temporary table for each IN list at every execution, 2.5 %
-- of claim+complete for this one statement.
UPDATE tasks
SET state = CAST(:state AS TEXT), run_after = :run_after, attempts = attempts + :strike,
    rescues = rescues + :rescue, rate_limits = rate_limits + :rate_limit,
    lease_node = NULL, lease_expires_at = NULL,
    summary = coalesce(:summary, summary), last_error = coalesce(:last_error, last_error),
    error_tail = coalesce(:error_tail, error_tail), reason = :reason,
    updated_at = :now,
    finished_at = CASE WHEN CAST(:state AS TEXT) = 'completed' OR CAST(:state AS TEXT) = 'dead'
                            OR CAST(:state AS TEXT) = 'cancelled' THEN :now END
WHERE id = :task_id AND (state = 'claimed' OR state = 'running')
  AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.task_id = :task_id AND runs.id > :run_id)
RETURNING *;

-- name: page_tasks
-- Newest first, a page at a time: the cursor is the last id seen, so a page stays right
-- while tasks are added (they come before it) and walks the primary key, not a sort.
SELECT * FROM tasks
WHERE (CAST(:state AS TEXT) IS NULL OR state = :state)
  AND (CAST(:role AS TEXT) IS NULL OR role = :role)
  AND (CAST(:before_id AS BIGINT) IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: page_open_tasks_in_state
-- Walking the primary key down found a state's few open tasks only past the whole history.
SELECT * FROM ({open_tasks_in_state}) AS open_tasks
WHERE CAST(:before_id AS BIGINT) IS NULL OR id < :before_id
ORDER BY id + 0 DESC  -- sorted once merged (few rows): each part then reads its index
LIMIT :limit;

-- name: children_of
-- A task's children (its agent's follow-ups, a chain's next steps), through tasks_parent.
SELECT * FROM tasks WHERE parent_id = :task_id ORDER BY id LIMIT :limit;
