-- What an agent said about its own run (`taskherd done|fail|block`), kept until the
-- supervisor settles the run when the process exits: the agent's word beats its exit code.
ALTER TABLE runs ADD COLUMN report text CHECK (report IN ('done', 'fail', 'block'));
ALTER TABLE runs ADD COLUMN report_summary text;

-- A runtime paused by a rate limit: no spawn of it until `until` (unix seconds).
CREATE TABLE cooldowns (
    runtime    text             PRIMARY KEY,
    until      double precision NOT NULL,
    reason     text             NOT NULL,
    created_at double precision NOT NULL
);
