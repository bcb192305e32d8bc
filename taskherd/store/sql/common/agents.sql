-- Named SQL blocks of the agents registry (store/sql_agents.py).

-- name: register_agent
-- Registering again updates what is given and counts as being seen.
INSERT INTO agents (name, runtime, capabilities, description, registered_at, last_seen_at)
VALUES (:name, :runtime, :capabilities, :description, :now, :now)
ON CONFLICT (name) DO UPDATE
SET runtime = coalesce(excluded.runtime, agents.runtime),
    capabilities = excluded.capabilities,
    description = coalesce(excluded.description, agents.description),
    last_seen_at = excluded.last_seen_at
RETURNING *;

-- name: list_agents
SELECT * FROM agents ORDER BY name;

-- name: latest_run_of_role
-- The newest run past the roll-up's mark (a walk of the recent runs by id), else the newest
-- rolled up (role_last_runs); no index of runs by role, which every claim would write.
SELECT * FROM runs
WHERE id = coalesce(
    (SELECT max(id) FROM runs
     WHERE id > (SELECT runs_through FROM rollup_marks) AND role = :role),
    (SELECT run_id FROM role_last_runs WHERE role = :role));

-- name: latest_ended_run_of_role
-- As latest_run_of_role; every rolled-up run has ended (the mark stops below the oldest open).
SELECT * FROM runs
WHERE id = coalesce(
    (SELECT max(id) FROM runs
     WHERE id > (SELECT runs_through FROM rollup_marks) AND role = :role
       AND ended_at IS NOT NULL),
    (SELECT run_id FROM role_last_runs WHERE role = :role))
  AND ended_at IS NOT NULL;

-- name: roll_up_role_last_runs
-- Each role's newest run between the mark and :through; before the mark moves past them.
INSERT INTO role_last_runs (role, run_id)
SELECT role, max(id) FROM runs
WHERE id > (SELECT runs_through FROM rollup_marks) AND id <= :through
GROUP BY role
ON CONFLICT (role) DO UPDATE SET run_id = excluded.run_id
WHERE excluded.run_id > role_last_runs.run_id;
