-- Migrations 0008 and 0010 kept the board's numbers by writing at every claim and settle: an
-- index of the open tasks rewritten by each move, and triggers adding each settled task and
-- each ended run to a counter row. Each is one more page a transaction writes; together they
-- cost claim+complete a quarter of its throughput. So the claim and the settle now write
-- nothing for the board:
--  * open tasks are counted through indexes the queue keeps anyway (tasks_ready for ready
--    ones, tasks_clock for claimed and running ones) and tasks_waiting, which only tasks
--    waiting for a person enter;
--  * finished tasks and spend are rolled up by the daemon's monitor behind two marks:
--    finished_counts holds the tasks finished before rollup_marks.tasks_through (a time a
--    little in the past), spend_hours the runs whose id is at most rollup_marks.runs_through
--    (all of them ended). The board adds what lies past the marks, read live: the tasks
--    through the tasks_clock index, the runs by id from the mark on;
--  * triggers remain only for what changes a counter already holding a row: a task finished
--    before the mark that is revived, or pruned; a rolled-up run pruned. They fire on no
--    claim or settle of a task finished after the mark.
DROP INDEX tasks_open_state;
DROP TRIGGER finished_counts_insert;
DROP TRIGGER finished_counts_leave;
DROP TRIGGER finished_counts_enter;
DROP TRIGGER finished_counts_delete;
DROP TRIGGER spend_hours_run_ended;
DROP TRIGGER spend_hours_run_deleted;

-- One index for the two clocks of a task that moves: when its lease expires (claimed and
-- running tasks, side 1) and when it finished (the history, side 0). A settle moves the
-- task's entry from one side to the other, and the two sides meet at the index's right end,
-- where the newest finished tasks sit beside the leases of the running ones: a claim and a
-- settle write the one page there, where two indexes (tasks_leases and the history's
-- tasks_finished) had each settle write two. Queries name the index's own expressions, the
-- side `(CASE WHEN finished_at IS NULL THEN 1 ELSE 0 END) = 0|1` (a CASE, not a boolean test,
-- which PostgreSQL rewrites out of the index's reach) and `coalesce(finished_at,
-- lease_expires_at)`, so that the planner finds the index. (state, role) let the board's
-- counts read the index alone.
DROP INDEX tasks_leases;
DROP INDEX tasks_finished;
CREATE INDEX tasks_clock
ON tasks ((CASE WHEN finished_at IS NULL THEN 1 ELSE 0 END), coalesce(finished_at, lease_expires_at),
          state, role)
WHERE finished_at IS NOT NULL OR lease_expires_at IS NOT NULL;
-- <> chains and ORs, not IN: SQLite evaluates a partial index's IN list through a temporary
-- table on every row written to the table.
CREATE INDEX tasks_waiting ON tasks (state, role)
WHERE state = 'pending' OR state = 'needs_review' OR state = 'blocked';

CREATE TABLE rollup_marks (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    tasks_through REAL    NOT NULL,  -- finished_counts: the tasks finished before this time
    runs_through  INTEGER NOT NULL   -- spend_hours: the runs with an id up to this one
);

-- The counters the old triggers kept are exact for everything already finished: the marks
-- start past all of it. A run still open below runs_through adds itself when it ends.
INSERT INTO rollup_marks (id, tasks_through, runs_through)
VALUES (1, coalesce((SELECT max(finished_at) FROM tasks), 0) + 1,
        coalesce((SELECT max(id) FROM runs), 0));

-- OF finished_at alone: a finished task changes only by being revived (finished_at cleared)
-- or pruned, and a claim, which sets no finished_at, runs no trigger at all.
CREATE TRIGGER finished_counts_enter AFTER UPDATE OF finished_at ON tasks
WHEN (new.state = 'completed' OR new.state = 'dead' OR new.state = 'cancelled')
 AND new.finished_at < (SELECT tasks_through FROM rollup_marks)
BEGIN
    INSERT INTO finished_counts (state, role, n) VALUES (new.state, new.role, 1)
    ON CONFLICT (state, role) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER finished_counts_leave AFTER UPDATE OF finished_at ON tasks
WHEN (old.state = 'completed' OR old.state = 'dead' OR old.state = 'cancelled')
 AND old.finished_at < (SELECT tasks_through FROM rollup_marks)
BEGIN
    UPDATE finished_counts SET n = n - 1 WHERE state = old.state AND role = old.role;
END;

CREATE TRIGGER finished_counts_insert AFTER INSERT ON tasks
WHEN (new.state = 'completed' OR new.state = 'dead' OR new.state = 'cancelled')
 AND new.finished_at < (SELECT tasks_through FROM rollup_marks)
BEGIN
    INSERT INTO finished_counts (state, role, n) VALUES (new.state, new.role, 1)
    ON CONFLICT (state, role) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER finished_counts_delete AFTER DELETE ON tasks
WHEN (old.state = 'completed' OR old.state = 'dead' OR old.state = 'cancelled')
 AND old.finished_at < (SELECT tasks_through FROM rollup_marks)
BEGIN
    UPDATE finished_counts SET n = n - 1 WHERE state = old.state AND role = old.role;
END;

-- A run at or below the mark that was still open when the mark passed it adds itself now.
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
