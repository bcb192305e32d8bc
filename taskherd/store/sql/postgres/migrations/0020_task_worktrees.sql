-- A git worktree per coding task: the PostgreSQL port of sqlite's 0014. The merge_pools row
-- is updated by the merge's transaction, which holds its row lock until commit: one merge at
-- a time per pool across every node.
CREATE TABLE worktrees (
    task_id       bigint           PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    repo          text             NOT NULL,
    base          text             NOT NULL,
    branch        text             NOT NULL,
    path          text             NOT NULL,
    merge_mode    text             NOT NULL CHECK (merge_mode IN ('merge-commit', 'fast-forward')),
    pool          text             NOT NULL,
    state         text             NOT NULL CHECK (state IN ('active', 'merged', 'conflict', 'removed')),
    merged_commit text,
    conflicts     text,
    created_at    double precision NOT NULL,
    updated_at    double precision NOT NULL
);
CREATE INDEX worktrees_kept ON worktrees (state) WHERE state <> 'removed';

CREATE TABLE merge_pools (
    name    text PRIMARY KEY,
    holder  bigint,
    held_at double precision
);
