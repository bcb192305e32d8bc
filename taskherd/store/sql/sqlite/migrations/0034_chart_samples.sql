-- The dashboard's chart of queue depth by role over time. The queue keeps no history of its
-- depth (a count is of now), so the daemon samples it, once a minute, into one row per
-- (minute, role): ready tasks (those waiting out a backoff included) and tasks a node holds
-- (claimed or running). A minute is sampled once across the fleet: every node samples, the
-- first row of a minute stays. Rows older than a week are pruned by the sampler itself.
CREATE TABLE queue_samples (
    at      REAL    NOT NULL,  -- unix seconds of the minute's start (UTC)
    role    TEXT    NOT NULL,
    ready   INTEGER NOT NULL CHECK (ready >= 0),
    running INTEGER NOT NULL CHECK (running >= 0),
    PRIMARY KEY (at, role)
);

-- The day's and the week's charts read quarter hours summed once (96 or 672 rows), not a day
-- or a week of rows at each look (at a million tasks, a week's finished tasks alone took
-- 80 ms to count). The same daemon loop keeps, per past quarter hour: tasks finished by state
-- (chart 'finished', label: the state), first runs started by how long they waited (chart
-- 'latency', label: the histogram's bound, 'inf' past the last) and ended runs by role and
-- outcome with their cost (chart 'cost', by the time of their claim), and the queue's depth
-- by role (chart 'depth', label 'ready' or 'running': the quarter's highest sample; 'samples':
-- how many minutes were sampled). Recent quarters are
-- summed again later (a run ending after its claim's quarter, a task revived). chart_marks
-- says up to where the sums are kept; the readers add what lies past it live.
CREATE TABLE chart_sums (
    at       REAL    NOT NULL,  -- unix seconds of the quarter hour's start (UTC)
    chart    TEXT    NOT NULL CHECK (chart = 'finished' OR chart = 'latency' OR chart = 'cost'
                                  OR chart = 'depth'),
    role     TEXT    NOT NULL,  -- '' but for cost and depth
    label    TEXT    NOT NULL,
    n        INTEGER NOT NULL,
    cost_usd REAL    NOT NULL,
    unpriced INTEGER NOT NULL,
    PRIMARY KEY (at, chart, role, label)
);

CREATE TABLE chart_marks (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    sums_through REAL   NOT NULL  -- chart_sums holds every quarter hour before this time
);
