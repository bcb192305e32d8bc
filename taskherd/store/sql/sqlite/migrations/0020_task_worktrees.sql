-- A git worktree per coding task: where it is, which branch of which repository, and how far
-- its merge into the base went. The settle step that completes a task merges its branch
-- (one merge at a time per pool: the merge_pools row is held for the merge's transaction).
CREATE TABLE worktrees (
    task_id       INTEGER PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    repo          TEXT    NOT NULL,
    base          TEXT    NOT NULL,
    branch        TEXT    NOT NULL,
    path          TEXT    NOT NULL,
    merge_mode    TEXT    NOT NULL CHECK (merge_mode = 'merge-commit' OR merge_mode = 'fast-forward'),
    pool          TEXT    NOT NULL,
    state         TEXT    NOT NULL CHECK (state = 'active' OR state = 'merged' OR state = 'conflict'
                              OR state = 'removed'),
    merged_commit TEXT,
    conflicts     TEXT,  -- JSON list of the files a merge conflicted in
    created_at    REAL    NOT NULL,
    updated_at    REAL    NOT NULL
);
CREATE INDEX worktrees_kept ON worktrees (state) WHERE state <> 'removed';

CREATE TABLE merge_pools (
    name    TEXT NOT NULL PRIMARY KEY,
    holder  INTEGER,  -- the task whose merge holds it
    held_at REAL
);
