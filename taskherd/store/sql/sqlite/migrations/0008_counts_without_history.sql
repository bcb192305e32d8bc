-- The status board counts tasks by state and role. Counting every row made `taskherd status`
-- scan the whole table: 780 ms with a million finished tasks kept as history. So the two
-- halves are counted differently:
--  * open tasks (few, and changing at every claim) are counted live through a partial index
--    that holds only them, so a claim pays nothing new;
--  * finished tasks (many, and changing only when one settles, is revived or is pruned) are
--    counted by triggers into finished_counts, one small row per (state, role). A settle pays
--    one upsert; reading them is a handful of rows whatever the history's size.
CREATE INDEX tasks_open_state ON tasks (state, role)
WHERE state <> 'completed' AND state <> 'dead' AND state <> 'cancelled';

CREATE TABLE finished_counts (
    state TEXT NOT NULL CHECK (state = 'completed' OR state = 'dead' OR state = 'cancelled'),
    role TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (state, role)
);

INSERT INTO finished_counts (state, role, n)
SELECT state, role, count(*) FROM tasks
WHERE state IN ('completed', 'dead', 'cancelled') GROUP BY state, role;

CREATE TRIGGER finished_counts_insert AFTER INSERT ON tasks
WHEN new.state = 'completed' OR new.state = 'dead' OR new.state = 'cancelled'
BEGIN
    INSERT INTO finished_counts (state, role, n) VALUES (new.state, new.role, 1)
    ON CONFLICT (state, role) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER finished_counts_leave AFTER UPDATE OF state, role ON tasks
WHEN old.state = 'completed' OR old.state = 'dead' OR old.state = 'cancelled'
BEGIN
    UPDATE finished_counts SET n = n - 1 WHERE state = old.state AND role = old.role;
END;

CREATE TRIGGER finished_counts_enter AFTER UPDATE OF state, role ON tasks
WHEN new.state = 'completed' OR new.state = 'dead' OR new.state = 'cancelled'
BEGIN
    INSERT INTO finished_counts (state, role, n) VALUES (new.state, new.role, 1)
    ON CONFLICT (state, role) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER finished_counts_delete AFTER DELETE ON tasks
WHEN old.state = 'completed' OR old.state = 'dead' OR old.state = 'cancelled'
BEGIN
    UPDATE finished_counts SET n = n - 1 WHERE state = old.state AND role = old.role;
END;
