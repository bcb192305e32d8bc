-- Migrations 0008 and 0010 kept the board's numbers by writing at every claim and settle: an
-- index of the open tasks rewritten by each move, and triggers adding each settled task and
-- each ended run to a counter row, one row every node's settles contended for. So the claim
-- and the settle now write nothing for the board:
--  * open tasks are counted through indexes the queue keeps anyway (tasks_ready for ready
--    ones, tasks_clock for claimed and running ones) and tasks_waiting, which only tasks
--    waiting for a person enter;
--  * finished tasks and spend are rolled up by the daemons' monitors behind two marks:
--    finished_counts holds the tasks finished before rollup_marks.tasks_through (a time a
--    little in the past), spend_hours the runs whose id is at most rollup_marks.runs_through
--    (all of them ended). The board adds what lies past the marks, read live;
--  * the triggers fire only for what changes a counter already holding a row: a task finished
--    before the mark that is revived, or pruned; a rolled-up run pruned, or one below the mark
--    that was still open when the mark passed it.
-- Function bodies are single-quoted and triggers CREATE OR REPLACE, for the reasons in 0008.
DROP INDEX tasks_open_state;
DROP TRIGGER finished_counts_insert ON tasks;
DROP TRIGGER finished_counts_update ON tasks;
DROP TRIGGER finished_counts_delete ON tasks;
DROP TRIGGER spend_hours_run_ended ON runs;
DROP TRIGGER spend_hours_run_deleted ON runs;

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
-- Not partial, unlike SQLite's: PostgreSQL gathers statistics on an index's expressions only
-- for an index without a predicate, and without them it planned the history, the prune and
-- the roll-up as scans of the whole table. The open tasks' entries are the price.
CREATE INDEX tasks_clock
ON tasks ((CASE WHEN finished_at IS NULL THEN 1 ELSE 0 END), coalesce(finished_at, lease_expires_at),
          state, role);
CREATE INDEX tasks_waiting ON tasks (state, role)
WHERE state IN ('pending', 'needs_review', 'blocked');

CREATE TABLE rollup_marks (
    id            integer          PRIMARY KEY CHECK (id = 1),
    tasks_through double precision NOT NULL,  -- finished_counts: tasks finished before this
    runs_through  bigint           NOT NULL   -- spend_hours: the runs with an id up to this
);

INSERT INTO rollup_marks (id, tasks_through, runs_through)
VALUES (1, coalesce((SELECT max(finished_at) FROM tasks), 0) + 1,
        coalesce((SELECT max(id) FROM runs), 0));

CREATE OR REPLACE FUNCTION finished_counts_track() RETURNS trigger LANGUAGE plpgsql AS '
DECLARE
    mark double precision := (SELECT tasks_through FROM rollup_marks);
BEGIN
    IF TG_OP IN (''UPDATE'', ''DELETE'')
       AND OLD.state IN (''completed'', ''dead'', ''cancelled'') AND OLD.finished_at < mark THEN
        UPDATE finished_counts SET n = n - 1 WHERE state = OLD.state AND role = OLD.role;
    END IF;
    IF TG_OP IN (''UPDATE'', ''INSERT'')
       AND NEW.state IN (''completed'', ''dead'', ''cancelled'') AND NEW.finished_at < mark THEN
        INSERT INTO finished_counts (state, role, n) VALUES (NEW.state, NEW.role, 1)
        ON CONFLICT (state, role) DO UPDATE SET n = finished_counts.n + 1;
    END IF;
    RETURN NULL;
END';

-- A trigger's WHEN cannot read a table, so it only spares the claims and the other moves of
-- open tasks; the function compares finished_at with the mark and writes nothing for a task
-- settled after it, which is every settle of a running fleet.
CREATE OR REPLACE TRIGGER finished_counts_insert AFTER INSERT ON tasks
FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL)
EXECUTE FUNCTION finished_counts_track();

-- OF finished_at alone: a finished task changes only by being revived (finished_at cleared)
-- or pruned.
CREATE OR REPLACE TRIGGER finished_counts_update AFTER UPDATE OF finished_at ON tasks
FOR EACH ROW WHEN (OLD.finished_at IS NOT NULL OR NEW.finished_at IS NOT NULL)
EXECUTE FUNCTION finished_counts_track();

CREATE OR REPLACE TRIGGER finished_counts_delete AFTER DELETE ON tasks
FOR EACH ROW WHEN (OLD.finished_at IS NOT NULL)
EXECUTE FUNCTION finished_counts_track();

CREATE OR REPLACE FUNCTION spend_hours_track() RETURNS trigger LANGUAGE plpgsql AS '
BEGIN
    IF (CASE WHEN TG_OP = ''UPDATE'' THEN NEW.id ELSE OLD.id END)
       > (SELECT runs_through FROM rollup_marks) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = ''UPDATE'' THEN
        INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens)
        VALUES (NEW.role, floor(NEW.claimed_at / 3600) * 3600, 1, coalesce(NEW.cost_usd, 0),
                coalesce(NEW.input_tokens, 0), coalesce(NEW.output_tokens, 0))
        ON CONFLICT (role, hour) DO UPDATE
        SET runs = spend_hours.runs + 1,
            cost_usd = spend_hours.cost_usd + excluded.cost_usd,
            input_tokens = spend_hours.input_tokens + excluded.input_tokens,
            output_tokens = spend_hours.output_tokens + excluded.output_tokens;
    ELSE
        UPDATE spend_hours
        SET runs = runs - 1, cost_usd = cost_usd - coalesce(OLD.cost_usd, 0),
            input_tokens = input_tokens - coalesce(OLD.input_tokens, 0),
            output_tokens = output_tokens - coalesce(OLD.output_tokens, 0)
        WHERE role = OLD.role AND hour = floor(OLD.claimed_at / 3600) * 3600;
    END IF;
    RETURN NULL;
END';

CREATE OR REPLACE TRIGGER spend_hours_run_ended AFTER UPDATE OF ended_at ON runs
FOR EACH ROW WHEN (OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL)
EXECUTE FUNCTION spend_hours_track();

CREATE OR REPLACE TRIGGER spend_hours_run_deleted AFTER DELETE ON runs
FOR EACH ROW WHEN (OLD.ended_at IS NOT NULL)
EXECUTE FUNCTION spend_hours_track();
