-- Jobs (schedules that create tasks) and the record of every fire.
-- Times are unix seconds (REAL), like the rest of the schema.

CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY,
    name             TEXT    NOT NULL UNIQUE CHECK (name <> ''),
    -- The task template (role, title, prompt, priority, pool, dedup_key, variants…) as JSON.
    template         TEXT    NOT NULL,
    -- The trigger as schedules' to_spec() JSON, its zone included: rebuilt with parse_trigger.
    trigger_spec     TEXT    NOT NULL,
    timezone         TEXT    NOT NULL CHECK (timezone <> ''),
    overlap          TEXT    NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip', 'allow', 'queue')),
    missed_fire      TEXT    NOT NULL DEFAULT 'once' CHECK (missed_fire IN ('skip', 'once', 'all')),
    max_retries      INTEGER NOT NULL DEFAULT 0 CHECK (max_retries >= 0),
    enabled          INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    -- 'config' jobs are synced from taskherd.toml; 'cli' jobs are never touched by a sync.
    source           TEXT    NOT NULL CHECK (source IN ('config', 'cli')),
    delete_after_run INTEGER NOT NULL DEFAULT 0 CHECK (delete_after_run IN (0, 1)),
    -- When the scheduler must next look at the job: the earliest of the schedule (pushed back
    -- by failure backoff), a pending retry, a run-now request, a queued fire to release.
    -- NULL: nothing to do until someone changes the job. Claimed by compare-and-set.
    next_run_at      REAL,
    -- The schedule's position: the earliest fire time of the trigger not yet fired.
    schedule_at      REAL,
    backoff_until    REAL,
    failures         INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),  -- consecutive
    variant_cursor   INTEGER NOT NULL DEFAULT 0 CHECK (variant_cursor >= 0),
    queued           INTEGER NOT NULL DEFAULT 0 CHECK (queued >= 0),  -- fires held by overlap=queue
    run_now_at       REAL,
    retry_at         REAL,
    retry_of         INTEGER,
    retry_count      INTEGER NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    -- Bumped by every write, so a claim computed from a stale read of any column loses.
    version          INTEGER NOT NULL DEFAULT 0,
    created_at       REAL    NOT NULL,
    updated_at       REAL    NOT NULL
);

-- The scheduler's one question, "what is due?": partial, so disabled jobs cost nothing.
CREATE INDEX jobs_due ON jobs (next_run_at) WHERE enabled = 1;

CREATE TABLE job_fires (
    id            INTEGER PRIMARY KEY,
    -- The history outlives its job (delete, delete_after_run): job_name keeps it findable.
    job_id        INTEGER REFERENCES jobs (id) ON DELETE SET NULL,
    job_name      TEXT    NOT NULL,
    scheduled_for REAL    NOT NULL,
    fired_at      REAL    NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('schedule', 'catch_up', 'retry', 'run_now')),
    -- open: its task is not finished; queued: held by overlap = queue; the rest are final.
    status        TEXT    NOT NULL CHECK (status IN ('open', 'queued', 'ok', 'error', 'timeout',
                      'skipped', 'cancelled')),
    task_id       INTEGER REFERENCES tasks (id) ON DELETE SET NULL,
    retry_of      INTEGER REFERENCES job_fires (id) ON DELETE SET NULL,
    retry_count   INTEGER NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    variant       INTEGER,
    duration      REAL,
    summary       TEXT,
    error         TEXT,
    finished_at   REAL,
    CHECK ((status IN ('open', 'queued')) = (finished_at IS NULL))
);

CREATE INDEX job_fires_job ON job_fires (job_id, id);
CREATE INDEX job_fires_name ON job_fires (job_name, id);
-- Fires waiting for their task to end: what the scheduler settles, and the overlap check.
CREATE INDEX job_fires_open ON job_fires (job_id) WHERE status = 'open';
CREATE INDEX job_fires_task ON job_fires (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX job_fires_finished ON job_fires (finished_at) WHERE finished_at IS NOT NULL;
