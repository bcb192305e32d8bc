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
SELECT * FROM runs WHERE role = :role ORDER BY id DESC LIMIT 1;

-- name: latest_ended_run_of_role
SELECT * FROM runs WHERE role = :role AND ended_at IS NOT NULL ORDER BY id DESC LIMIT 1;
