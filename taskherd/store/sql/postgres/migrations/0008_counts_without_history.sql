-- The status board counts tasks by state and role. Counting every row made `taskherd status`
-- scan the whole table: 780 ms with a million finished tasks kept as history. So the two
-- halves are counted differently:
--  * open tasks (few, and changing at every claim) are counted live through a partial index
--    that holds only them, so a claim pays nothing new (and no counter row is contended by
--    nodes claiming at once);
--  * finished tasks (many, and changing only when one settles, is revived or is pruned) are
--    counted by a trigger into finished_counts, one small row per (state, role). A settle pays
--    one upsert; reading them is a handful of rows whatever the history's size.
-- The function body is a single-quoted literal, not $$-quoted: migrations are split into
-- statements by SQLite's statement splitter, which knows quotes but not dollar quotes; and
-- CREATE OR REPLACE TRIGGER, because after a bare CREATE TRIGGER it waits for an END.
CREATE INDEX tasks_open_state ON tasks (state, role)
WHERE state <> 'completed' AND state <> 'dead' AND state <> 'cancelled';

CREATE TABLE finished_counts (
    state TEXT NOT NULL CHECK (state IN ('completed', 'dead', 'cancelled')),
    role TEXT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (state, role)
);

INSERT INTO finished_counts (state, role, n)
SELECT state, role, count(*) FROM tasks
WHERE state IN ('completed', 'dead', 'cancelled') GROUP BY state, role;

CREATE FUNCTION finished_counts_track() RETURNS trigger LANGUAGE plpgsql AS '
BEGIN
    IF TG_OP IN (''UPDATE'', ''DELETE'')
       AND OLD.state IN (''completed'', ''dead'', ''cancelled'') THEN
        UPDATE finished_counts SET n = n - 1 WHERE state = OLD.state AND role = OLD.role;
    END IF;
    IF TG_OP IN (''UPDATE'', ''INSERT'')
       AND NEW.state IN (''completed'', ''dead'', ''cancelled'') THEN
        INSERT INTO finished_counts (state, role, n) VALUES (NEW.state, NEW.role, 1)
        ON CONFLICT (state, role) DO UPDATE SET n = finished_counts.n + 1;
    END IF;
    RETURN NULL;
END';

CREATE OR REPLACE TRIGGER finished_counts_insert AFTER INSERT ON tasks
FOR EACH ROW WHEN (NEW.state = 'completed' OR NEW.state = 'dead' OR NEW.state = 'cancelled')
EXECUTE FUNCTION finished_counts_track();

CREATE OR REPLACE TRIGGER finished_counts_update AFTER UPDATE OF state, role ON tasks
FOR EACH ROW WHEN (OLD.state = 'completed' OR OLD.state = 'dead' OR OLD.state = 'cancelled'
                   OR NEW.state = 'completed' OR NEW.state = 'dead' OR NEW.state = 'cancelled')
EXECUTE FUNCTION finished_counts_track();

CREATE OR REPLACE TRIGGER finished_counts_delete AFTER DELETE ON tasks
FOR EACH ROW WHEN (OLD.state = 'completed' OR OLD.state = 'dead' OR OLD.state = 'cancelled')
EXECUTE FUNCTION finished_counts_track();
