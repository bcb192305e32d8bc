-- A completed task's merge runs after its settle, off the daemon's loop: the settle leaves the
-- task `merging` (open, waiting for the worktree service) instead of merging inside its
-- transaction, where a slow git hook held the database's write lock for minutes.
--
-- SQLite cannot alter a CHECK constraint, and rebuilding `tasks` would drop it while the
-- foreign keys of runs and every other table cascade from it. Widening a CHECK through
-- writable_schema is the procedure SQLite documents for this (every existing row satisfies
-- the wider constraint); RESET reloads this connection's schema, and the index rebuilt below
-- changes the schema cookie, so every other connection reloads it too.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, 'OR state = ''needs_review''', 'OR state = ''needs_review'' OR state = ''merging''')
WHERE type = 'table' AND name = 'tasks';
PRAGMA writable_schema = RESET;

-- Merging tasks are counted and listed through the index of the tasks that wait.
DROP INDEX tasks_waiting;
CREATE INDEX tasks_waiting ON tasks (state, role)
WHERE state = 'pending' OR state = 'needs_review' OR state = 'blocked' OR state = 'merging';

-- A pool is held while git merges, outside any transaction: by the merging task on a node. A
-- node's restarted daemon resumes its own merge at once; another node waits for it.
ALTER TABLE merge_pools ADD COLUMN node TEXT;
