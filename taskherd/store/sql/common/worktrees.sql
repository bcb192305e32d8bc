-- name: record_worktree
-- The task's worktree, as the supervisor made (or found) it for a run; a later run of the
-- same task finds the same row, active again if a conflict had blocked it.
INSERT INTO worktrees (task_id, repo, base, branch, path, merge_mode, pool, state, created_at,
                       updated_at)
VALUES (:task_id, :repo, :base, :branch, :path, :merge_mode, :pool, 'active', :now, :now)
ON CONFLICT (task_id) DO UPDATE
SET repo = excluded.repo, base = excluded.base, path = excluded.path,
    merge_mode = excluded.merge_mode, pool = excluded.pool, state = 'active',
    updated_at = excluded.updated_at;

-- name: worktree_of
SELECT * FROM worktrees WHERE task_id = :task_id;

-- name: hold_merge_pool
-- Taken by the transaction that merges: in PostgreSQL the row stays locked until it commits,
-- so a second merge through the same pool waits; SQLite's write lock already serializes.
INSERT INTO merge_pools (name, holder, held_at) VALUES (:pool, :task_id, :now)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, held_at = excluded.held_at;

-- name: set_worktree_state
UPDATE worktrees
SET state = :state, merged_commit = :merged_commit, conflicts = :conflicts, updated_at = :now
WHERE task_id = :task_id;

-- name: block_completed_task
-- A completed task whose merge conflicted is blocked instead, in the same transaction: it
-- never was final.
UPDATE tasks SET state = 'blocked', reason = :reason, finished_at = NULL, updated_at = :now
WHERE id = :task_id AND state = 'completed'
RETURNING *;

-- name: worktrees_to_remove
-- Worktrees whose task was merged, or is dead or cancelled since before :before: no run will
-- use them again.
SELECT w.* FROM worktrees AS w JOIN tasks AS t ON t.id = w.task_id
WHERE w.state <> 'removed'
  AND (w.state = 'merged'
       OR (t.state IN ('dead', 'cancelled') AND t.finished_at < :before));

-- name: kept_worktrees
SELECT w.*, t.state AS task_state FROM worktrees AS w JOIN tasks AS t ON t.id = w.task_id
WHERE w.state <> 'removed'
ORDER BY w.task_id;
