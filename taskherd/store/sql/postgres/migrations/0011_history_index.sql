-- `task list --history` reads finished tasks newest first, and pruning finds the old ones:
-- both by finished_at, which no index held (a scan of the whole history each time).
CREATE INDEX tasks_finished ON tasks (finished_at) WHERE finished_at IS NOT NULL;
