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

-- name: take_merge_pool
-- The pool's turn for one merge, held outside any transaction while git works: taken when
-- free, already this task's on this node (its daemon restarted mid-merge and resumes), or
-- held since before :stale_before (its node died mid-merge). No row: another merge holds it,
-- or the task is no longer merging (cancelled since it was read). The casts tell PostgreSQL
-- the parameters' types, which a SELECT list does not.
INSERT INTO merge_pools (name, holder, node, held_at)
SELECT CAST(:pool AS TEXT), CAST(:task_id AS BIGINT), CAST(:node AS TEXT),
       CAST(:now AS DOUBLE PRECISION)
WHERE EXISTS (SELECT 1 FROM tasks WHERE id = :task_id AND state = 'merging')
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder, node = excluded.node, held_at = excluded.held_at
WHERE merge_pools.holder IS NULL
   OR (merge_pools.holder = excluded.holder AND merge_pools.node = excluded.node)
   OR merge_pools.held_at < :stale_before
RETURNING holder;

-- name: release_merge_pool
UPDATE merge_pools SET holder = NULL, node = NULL, held_at = NULL
WHERE name = :pool AND holder = :task_id;

-- name: set_worktree_state
UPDATE worktrees
SET state = :state, merged_commit = :merged_commit, conflicts = :conflicts, updated_at = :now
WHERE task_id = :task_id;

-- name: merge_due_task
-- A task that reached `completed` with a worktree to merge waits in `merging` instead, in the
-- same transaction: it is not final until its branch is in the base.
UPDATE tasks SET state = 'merging', finished_at = NULL, updated_at = :now
WHERE id = :task_id AND state = 'completed'
RETURNING *;

-- name: merges_due
-- The merging tasks with their worktrees, oldest first: the worktree service's work.
SELECT w.*, t.state AS task_state FROM worktrees AS w JOIN tasks AS t ON t.id = w.task_id
WHERE t.state = 'merging'
ORDER BY w.task_id;

-- name: complete_merged_task
UPDATE tasks SET state = 'completed', finished_at = :now, updated_at = :now
WHERE id = :task_id AND state = 'merging'
RETURNING *;

-- name: block_merging_task
-- A merge that conflicted, that git refused or that ran past merge_timeout: a person decides.
UPDATE tasks SET state = 'blocked', reason = :reason, updated_at = :now
WHERE id = :task_id AND state = 'merging'
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
