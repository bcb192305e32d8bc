-- Two outcomes for agents that are alive but not working: `needs_input` (waiting at a
-- question; the task is blocked, no strike) and `looping` (output repeating without progress; a
-- strike). The column's CHECK was unnamed: PostgreSQL named it runs_outcome_check.
ALTER TABLE runs DROP CONSTRAINT runs_outcome_check;

ALTER TABLE runs ADD CONSTRAINT runs_outcome_check CHECK (outcome IN ('succeeded', 'failed',
    'rate_limited', 'timed_out', 'stalled', 'crashed', 'cancelled', 'lost', 'blocked',
    'needs_input', 'looping'));

-- The supervisor's verdict on a running agent, written when it changes (not each check):
-- active, quiet (since liveness_since), waiting_input (liveness_note: the question) or
-- looping. The last one stays after the run ends; NULL for runs older than this column.
ALTER TABLE runs ADD COLUMN liveness text
    CHECK (liveness IN ('active', 'quiet', 'waiting_input', 'looping'));

ALTER TABLE runs ADD COLUMN liveness_since double precision;

ALTER TABLE runs ADD COLUMN liveness_note text;

-- Probe after a limit: once a cooldown's time is up, one run of the runtime goes first (the
-- probe) and the rest wait until it got past the provider; the row is deleted then. While
-- probe_node is set, a node has taken the probe; probe_run_id is its run once claimed.
ALTER TABLE cooldowns ADD COLUMN probe_node text;

ALTER TABLE cooldowns ADD COLUMN probe_run_id bigint;

ALTER TABLE cooldowns ADD COLUMN probe_started_at double precision;
