-- What an agent said about its own run (`taskherd done|fail|block`), kept until the
-- supervisor settles the run when the process exits: the agent's word beats its exit code.
ALTER TABLE runs ADD COLUMN report TEXT CHECK (report IN ('done', 'fail', 'block'));
ALTER TABLE runs ADD COLUMN report_summary TEXT;

-- A runtime paused by a rate limit: no spawn of it until `until` (unix seconds).
CREATE TABLE cooldowns (
    runtime    TEXT PRIMARY KEY,
    until      REAL NOT NULL,
    reason     TEXT NOT NULL,
    created_at REAL NOT NULL
);
