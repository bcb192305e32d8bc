-- Named SQL blocks of the node store: every daemon's record that it is alive.

-- name: node_up
-- A restart is a new life: start time, pid and goodbye are reset, whoever held the name.
INSERT INTO nodes (name, host, pid, version, lease, started_at, last_seen, stopped_at, running,
                   roles)
VALUES (:name, :host, :pid, :version, :lease, :now, :now, NULL, 0, :roles)
ON CONFLICT (name) DO UPDATE
SET host = excluded.host, pid = excluded.pid, version = excluded.version,
    lease = excluded.lease, started_at = excluded.started_at, last_seen = excluded.last_seen,
    stopped_at = NULL, running = 0, roles = excluded.roles
RETURNING *;

-- name: node_seen
-- The roles come along: a reload may have changed what the node can run.
UPDATE nodes SET last_seen = :now, running = :running, roles = :roles WHERE name = :name;

-- name: node_stopped
UPDATE nodes SET stopped_at = :now, last_seen = :now, running = 0 WHERE name = :name;

-- name: list_nodes
SELECT * FROM nodes ORDER BY name;
