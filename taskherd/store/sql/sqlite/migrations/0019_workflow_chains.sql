-- Workflows: a task's place in its chain, the follow-ups it declared, its review count.
--  * root_id: the first task of the chain (NULL for a root itself); no foreign key, so a
--    pruned root leaves its descendants' trees readable rather than rewritten.
--  * depth: 0 for a root, parent's + 1 for a child; the chain stops at [daemon] max_depth.
--  * chain: the follow-ups the task declared itself (JSON array), NULL for none; a role's
--    default chain comes from the config at settle time and is not copied here.
--  * rejections: reviewers' rejections so far; at max_reviews the task waits for a person.
ALTER TABLE tasks ADD COLUMN root_id INTEGER;
ALTER TABLE tasks ADD COLUMN depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0);
ALTER TABLE tasks ADD COLUMN chain TEXT;
ALTER TABLE tasks ADD COLUMN rejections INTEGER NOT NULL DEFAULT 0;
-- `task tree` reads a chain by its root. Partial: a task outside any chain pays nothing.
CREATE INDEX tasks_root ON tasks (root_id) WHERE root_id IS NOT NULL;

-- Quality gates: each check a role's gates ran after an agent reported success.
CREATE TABLE gate_checks (
    id         INTEGER PRIMARY KEY,
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    log_path   TEXT,
    started_at REAL    NOT NULL,
    ended_at   REAL,
    exit_code  INTEGER,
    passed     INTEGER CHECK (passed = 0 OR passed = 1),
    error      TEXT,
    CHECK ((ended_at IS NULL) = (passed IS NULL))
);
CREATE INDEX gate_checks_run ON gate_checks (run_id);
