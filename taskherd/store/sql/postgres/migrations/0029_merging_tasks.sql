-- A completed task's merge runs after its settle, off the daemon's loop: the settle leaves the
-- task `merging` (open, waiting for the worktree service) instead of merging inside its
-- transaction, where a slow git hook held the merge pool's row lock (and the task's) for minutes.
ALTER TABLE tasks DROP CONSTRAINT tasks_state_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_state_check CHECK (state IN ('pending', 'ready', 'claimed',
    'running', 'completed', 'needs_review', 'merging', 'blocked', 'dead', 'cancelled'));

-- Merging tasks are counted and listed through the index of the tasks that wait.
DROP INDEX tasks_waiting;
CREATE INDEX tasks_waiting ON tasks (state, role)
WHERE state IN ('pending', 'needs_review', 'blocked', 'merging');

-- A pool is held while git merges, outside any transaction: by the merging task on a node. A
-- node's restarted daemon resumes its own merge at once; another node waits for it.
ALTER TABLE merge_pools ADD COLUMN node TEXT;
