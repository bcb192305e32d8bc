-- Two outcomes for agents that are alive but not working: `needs_input` (waiting at a
-- question; the task is blocked, no strike) and `looping` (output repeating without progress; a
-- strike). SQLite cannot change a column's CHECK in place, so the runs table is rebuilt: its
-- rows are copied, the run credentials that the drop cascades away are kept aside and put
-- back, and its indexes and triggers are made again as they were.
CREATE TABLE runs_rebuilt (
    id             INTEGER PRIMARY KEY,
    task_id        INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt        INTEGER NOT NULL,
    node           TEXT    NOT NULL,
    role           TEXT    NOT NULL,
    runtime        TEXT,
    pid            INTEGER,
    pid_started_at REAL,
    log_path       TEXT,
    claimed_at     REAL    NOT NULL,
    spawned_at     REAL,
    heartbeat_at   REAL,
    progress       TEXT,
    ended_at       REAL,
    exit_code      INTEGER,
    -- OR chains, not IN lists, as in 0001: an IN list costs SQLite a temporary table per
    -- row written.
    outcome        TEXT CHECK (outcome = 'succeeded' OR outcome = 'failed'
                       OR outcome = 'rate_limited' OR outcome = 'timed_out'
                       OR outcome = 'stalled' OR outcome = 'crashed' OR outcome = 'cancelled'
                       OR outcome = 'lost' OR outcome = 'blocked' OR outcome = 'needs_input'
                       OR outcome = 'looping'),
    summary        TEXT,
    error          TEXT,
    cost_usd       REAL,
    input_tokens   INTEGER,
    output_tokens  INTEGER,
    turns          INTEGER,
    session_id     TEXT,
    report         TEXT CHECK (report IN ('done', 'fail', 'block')),
    report_summary TEXT,
    -- The supervisor's verdict on a running agent, written when it changes (not each check):
    -- active, quiet (since liveness_since), waiting_input (liveness_note: the question) or
    -- looping. The last one stays after the run ends; NULL for runs older than this column.
    liveness       TEXT CHECK (liveness = 'active' OR liveness = 'quiet'
                       OR liveness = 'waiting_input' OR liveness = 'looping'),
    liveness_since REAL,
    liveness_note  TEXT,
    CHECK ((outcome IS NULL) = (ended_at IS NULL))
);

INSERT INTO runs_rebuilt (id, task_id, attempt, node, role, runtime, pid, pid_started_at,
                          log_path, claimed_at, spawned_at, heartbeat_at, progress, ended_at,
                          exit_code, outcome, summary, error, cost_usd, input_tokens,
                          output_tokens, turns, session_id, report, report_summary)
SELECT id, task_id, attempt, node, role, runtime, pid, pid_started_at, log_path, claimed_at,
       spawned_at, heartbeat_at, progress, ended_at, exit_code, outcome, summary, error,
       cost_usd, input_tokens, output_tokens, turns, session_id, report, report_summary
FROM runs;

CREATE TABLE run_credentials_kept AS SELECT * FROM run_credentials;

DROP TABLE runs;

ALTER TABLE runs_rebuilt RENAME TO runs;

INSERT INTO run_credentials SELECT * FROM run_credentials_kept;

DROP TABLE run_credentials_kept;

CREATE INDEX runs_task ON runs (task_id);

CREATE INDEX runs_open ON runs (node) WHERE ended_at IS NULL;

-- The triggers on runs as 0012 left them:
-- (0012) A run at or below the mark that was still open when the mark passed it adds itself now.
CREATE TRIGGER spend_hours_run_ended AFTER UPDATE OF ended_at ON runs
WHEN old.ended_at IS NULL AND new.ended_at IS NOT NULL
 AND new.id <= (SELECT runs_through FROM rollup_marks)
BEGIN
    INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens)
    VALUES (new.role, CAST(new.claimed_at / 3600 AS INTEGER) * 3600.0, 1,
            coalesce(new.cost_usd, 0), coalesce(new.input_tokens, 0),
            coalesce(new.output_tokens, 0))
    ON CONFLICT (role, hour) DO UPDATE
    SET runs = runs + 1, cost_usd = cost_usd + excluded.cost_usd,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens;
END;

CREATE TRIGGER spend_hours_run_deleted AFTER DELETE ON runs
WHEN old.ended_at IS NOT NULL AND old.id <= (SELECT runs_through FROM rollup_marks)
BEGIN
    UPDATE spend_hours
    SET runs = runs - 1, cost_usd = cost_usd - coalesce(old.cost_usd, 0),
        input_tokens = input_tokens - coalesce(old.input_tokens, 0),
        output_tokens = output_tokens - coalesce(old.output_tokens, 0)
    WHERE role = old.role AND hour = CAST(old.claimed_at / 3600 AS INTEGER) * 3600.0;
END;

-- Probe after a limit: once a cooldown's time is up, one run of the runtime goes first (the
-- probe) and the rest wait until it got past the provider; the row is deleted then. While
-- probe_node is set, a node has taken the probe; probe_run_id is its run once claimed.
ALTER TABLE cooldowns ADD COLUMN probe_node TEXT;

ALTER TABLE cooldowns ADD COLUMN probe_run_id INTEGER;

ALTER TABLE cooldowns ADD COLUMN probe_started_at REAL;
