-- Named SQL of workflows: chains, reviews, cascading cancels, trees and quality gates.

-- name: reject_task
-- A reviewer's (or a person's) rejection: back to ready with the reason the next attempt's
-- prompt carries, or to blocked once max_reviews is reached; counted either way.
UPDATE tasks
SET state = CAST(:state AS TEXT), reason = :reason, rejections = rejections + 1,
    run_after = :now, updated_at = :now
WHERE id = :task_id AND state = 'needs_review'
RETURNING *;

-- name: fail_review_run
-- A review run that ended "successfully" without a verdict: recorded as the failure it is.
UPDATE runs SET outcome = 'failed', error = :error WHERE id = :run_id
RETURNING *;

-- name: note_task_reason
-- Why a settled task's chain stopped short (the depth limit), kept on the task.
UPDATE tasks SET reason = :reason, updated_at = :now WHERE id = :task_id;

-- name: open_children
SELECT * FROM tasks WHERE parent_id = :task_id AND finished_at IS NULL ORDER BY id;

-- name: open_descendants
-- Every open task below :task_id, children first; the walk goes through finished ones too
-- (a completed QA task's open follow-up is still part of the chain a cancel stops).
WITH RECURSIVE below (id) AS (
    SELECT id FROM tasks WHERE parent_id = :task_id
    UNION ALL
    SELECT tasks.id FROM tasks JOIN below ON tasks.parent_id = below.id
)
SELECT tasks.* FROM tasks JOIN below ON tasks.id = below.id
WHERE tasks.finished_at IS NULL
ORDER BY tasks.id;

-- name: tree_of_root
-- A whole chain: its root and every task created below it.
SELECT * FROM tasks WHERE id = :root_id OR root_id = :root_id ORDER BY id;

-- name: last_runs_of_root
-- The latest run of each task in a chain, for its outcome and log.
SELECT runs.* FROM runs
WHERE runs.id IN (SELECT max(r.id) FROM runs AS r JOIN tasks ON tasks.id = r.task_id
                  WHERE tasks.id = :root_id OR tasks.root_id = :root_id
                  GROUP BY r.task_id)
ORDER BY runs.task_id;

-- name: last_log_of_task
SELECT log_path FROM runs WHERE task_id = :task_id AND log_path IS NOT NULL
ORDER BY id DESC LIMIT 1;

-- name: children_since
-- What a run added below its task (created after its claim), counted against max_spawn:
-- its child tasks, and the jobs its spawn messages made.
SELECT (SELECT count(*) FROM tasks WHERE parent_id = :task_id AND created_at >= :since)
     + (SELECT count(*) FROM spawned_jobs WHERE task_id = :task_id AND created_at >= :since)
       AS n;

-- name: lock_spawning_task
-- Before counting what a run added (children_since): SQLite's write transaction holds the
-- whole database already; PostgreSQL locks the task's row (see its file).
SELECT id FROM tasks WHERE id = :task_id;

-- name: insert_spawned_job
INSERT INTO spawned_jobs (job_id, task_id, created_at) VALUES (:job_id, :task_id, :now);

-- name: insert_gate_check
INSERT INTO gate_checks (run_id, name, log_path, started_at, pid, pid_started_at)
VALUES (:run_id, :name, :log_path, :now, :pid, :pid_started_at)
RETURNING id;

-- name: end_gate_check
UPDATE gate_checks
SET ended_at = :now, exit_code = :exit_code, passed = :passed, error = :error
WHERE id = :gate_id AND ended_at IS NULL;

-- name: gate_checks_of_run
-- A run's gate progress, read when its gates start: after a restart, which passed already.
SELECT * FROM gate_checks WHERE run_id = :run_id ORDER BY id;

-- name: gate_checks_of_task
SELECT gate_checks.* FROM gate_checks JOIN runs ON runs.id = gate_checks.run_id
WHERE runs.task_id = :task_id
ORDER BY gate_checks.id;

-- name: open_task_of_role
-- Whether a task of :role is open (the planner runs one at a time). Open tasks are found
-- through the indexes the queue keeps anyway: ready and leased ones (those sides of
-- tasks_queue, by its own expressions) and those waiting for a person
-- (tasks_waiting); each WHERE repeats its index's, so no scan of the history is needed.
SELECT id FROM tasks WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2 AND state = 'ready' AND role = :role
UNION ALL
SELECT id FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 1 AND lease_expires_at IS NOT NULL
  AND role = :role
UNION ALL
SELECT id FROM tasks
WHERE (state = 'pending' OR state = 'needs_review' OR state = 'blocked'
       OR state = 'merging') AND role = :role
LIMIT 1;

-- name: last_task_of_role
-- When :role last had a task created: the planner runs at most once per planner_every.
-- Newest first by id, which stops at the first match (the planner's tasks are recent ones);
-- asked only when the queue runs low.
SELECT created_at AS at FROM tasks WHERE role = :role ORDER BY id DESC LIMIT 1;

-- name: ready_count
-- The ready side of tasks_queue, by its own expression: its entries alone are counted.
SELECT count(*) AS n FROM tasks WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2 AND state = 'ready';

-- name: recent_dead
-- The history side of tasks_queue, by its own expressions (as task_history reads it).
SELECT * FROM tasks
WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
  AND coalesce(finished_at, lease_expires_at, priority) >= :since AND state = 'dead'
ORDER BY coalesce(finished_at, lease_expires_at, priority) DESC, id DESC
LIMIT :limit;

-- name: next_run_after
-- When the earliest waiting ready task becomes claimable: the dispatcher wakes then, so a
-- delayed child does not wait for the next poll. The ready side of tasks_queue holds them.
SELECT min(run_after) AS at FROM tasks WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2 AND state = 'ready' AND run_after > :now;
