-- Tasks and the runs that attempt them.
-- Times are unix seconds (REAL): every decision is made with `now` passed in.
-- CHECKs list allowed values as OR chains, not `x IN (…)`: SQLite evaluates an IN list in a
-- CHECK through a temporary table on every row written, which cost a third of an insert.

CREATE TABLE tasks (
    id               INTEGER PRIMARY KEY,
    role             TEXT    NOT NULL CHECK (role <> ''),
    title            TEXT    NOT NULL CHECK (title <> ''),
    prompt           TEXT    NOT NULL DEFAULT '',
    priority         INTEGER NOT NULL DEFAULT 2 CHECK (priority BETWEEN 0 AND 3),
    state            TEXT    NOT NULL CHECK (state = 'pending' OR state = 'ready' OR state = 'claimed'
                         OR state = 'running' OR state = 'completed' OR state = 'needs_review'
                         OR state = 'blocked' OR state = 'dead' OR state = 'cancelled'),
    pool             TEXT,
    dedup_key        TEXT,
    review           INTEGER NOT NULL DEFAULT 0 CHECK (review = 0 OR review = 1),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    rescues          INTEGER NOT NULL DEFAULT 0,
    rate_limits      INTEGER NOT NULL DEFAULT 0,
    run_after        REAL    NOT NULL,
    lease_node       TEXT,
    lease_expires_at REAL,
    last_error       TEXT,
    error_tail       TEXT,
    summary          TEXT,
    reason           TEXT,
    parent_id        INTEGER REFERENCES tasks (id) ON DELETE SET NULL,
    meta             TEXT    NOT NULL DEFAULT '{}',
    created_at       REAL    NOT NULL,
    updated_at       REAL    NOT NULL,
    finished_at      REAL,
    -- Final states and only they carry finished_at.
    CHECK ((state = 'completed' OR state = 'dead' OR state = 'cancelled')
           = (finished_at IS NOT NULL)),
    -- A lease exists exactly while a node holds the task.
    CHECK ((state = 'claimed' OR state = 'running')
           = (lease_node IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- The claim order: priority, then FIFO. Partial, so the index holds only what can be claimed.
CREATE INDEX tasks_ready ON tasks (priority, id) WHERE state = 'ready';
-- The monitor's rescue scan.
CREATE INDEX tasks_leases ON tasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
-- One open task per dedup key: enqueueing a duplicate returns the open one.
CREATE UNIQUE INDEX tasks_open_dedup ON tasks (dedup_key)
    WHERE dedup_key IS NOT NULL AND finished_at IS NULL;
-- No index on state, role or finished_at: every index is one more page written by each claim
-- and each completion (the hot path), while the reads they would serve (status counts, listing
-- by state, hourly pruning) scan a table that pruning keeps bounded.

CREATE TABLE runs (
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
    outcome        TEXT CHECK (outcome = 'succeeded' OR outcome = 'failed'
                       OR outcome = 'rate_limited' OR outcome = 'timed_out'
                       OR outcome = 'stalled' OR outcome = 'crashed' OR outcome = 'cancelled'
                       OR outcome = 'lost' OR outcome = 'blocked'),
    summary        TEXT,
    error          TEXT,
    cost_usd       REAL,
    input_tokens   INTEGER,
    output_tokens  INTEGER,
    turns          INTEGER,
    session_id     TEXT,
    CHECK ((outcome IS NULL) = (ended_at IS NULL))
);

CREATE INDEX runs_task ON runs (task_id);
CREATE INDEX runs_open ON runs (node) WHERE ended_at IS NULL;
