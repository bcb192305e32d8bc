-- The dashboard's chart of queue depth by role over time. The queue keeps no history of its
-- depth (a count is of now), so the daemon samples it, once a minute, into one row per
-- (minute, role): ready tasks (those waiting out a backoff included) and tasks a node holds
-- (claimed or running). A minute is sampled once across the fleet: every node samples, the
-- first row of a minute stays. Rows older than a week are pruned by the sampler itself.
CREATE TABLE queue_samples (
    at      double precision NOT NULL,  -- unix seconds of the minute's start (UTC)
    role    text             NOT NULL,
    ready   bigint           NOT NULL CHECK (ready >= 0),
    running bigint           NOT NULL CHECK (running >= 0),
    PRIMARY KEY (at, role)
);
