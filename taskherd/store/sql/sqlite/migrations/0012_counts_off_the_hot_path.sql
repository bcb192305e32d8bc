-- Migrations 0008 and 0010 kept the board's numbers by writing at every claim and settle: an
-- index of the open tasks rewritten by each move, and triggers adding each settled task and
-- each ended run to a counter row. Each is one more page a transaction writes; together they
-- cost claim+complete a quarter of its throughput. So the claim and the settle now write
-- nothing for the board:
--  * open tasks are counted through indexes the queue keeps anyway (tasks_ready for ready
--    ones, tasks_leases for claimed and running ones) and tasks_waiting, which only tasks
--    waiting for a person enter;
--  * finished tasks and spend are rolled up by the daemon's monitor behind two marks:
--    finished_counts holds the tasks finished before rollup_marks.tasks_through (a time a
--    little in the past), spend_hours the runs whose id is at most rollup_marks.runs_through
--    (all of them ended). The board adds what lies past the marks, read live: the tasks
--    through the tasks_finished index, the runs by id from the mark on;
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

-- (state, role) beside finished_at: the board counts the tasks past the mark from the index
-- alone. <> chains and ORs, not IN: SQLite evaluates a partial index's IN list through a
-- temporary table on every row written to the table.
DROP INDEX tasks_finished;
CREATE INDEX tasks_finished ON tasks (finished_at, state, role) WHERE finished_at IS NOT NULL;
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

CREATE TRIGGER finished_counts_enter AFTER UPDATE OF state, role, finished_at ON tasks
WHEN (new.state = 'completed' OR new.state = 'dead' OR new.state = 'cancelled')
 AND new.finished_at < (SELECT tasks_through FROM rollup_marks)
BEGIN
    INSERT INTO finished_counts (state, role, n) VALUES (new.state, new.role, 1)
    ON CONFLICT (state, role) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER finished_counts_leave AFTER UPDATE OF state, role, finished_at ON tasks
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
