-- The agents registry's "last run of a role" leaves the claim's path: an index of runs by
-- role cost every claim a page write. The roll-up (every few seconds, off the hot path)
-- records each role's latest rolled-up run here; the registry reads that and walks only the
-- runs past the roll-up's mark.
DROP INDEX runs_role;
CREATE TABLE role_last_runs (
    role   TEXT PRIMARY KEY,
    run_id INTEGER NOT NULL
);
INSERT INTO role_last_runs (role, run_id)
SELECT role, max(id) FROM runs
WHERE id <= (SELECT runs_through FROM rollup_marks)
GROUP BY role;
