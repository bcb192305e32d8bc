-- Named SQL blocks of the node store: every daemon's record that it is alive.

-- name: node_up
-- A restart is a new life: start time, pid, goodbye and a down mark are reset, whoever held
-- the name (the caller read the mark first, in the same transaction).
INSERT INTO nodes (name, host, pid, version, lease, started_at, last_seen, stopped_at, running,
                   roles, tags, timeout, down_at, down_by)
VALUES (:name, :host, :pid, :version, :lease, :now, :now, NULL, 0, :roles, :tags, :timeout,
        NULL, NULL)
ON CONFLICT (name) DO UPDATE
SET host = excluded.host, pid = excluded.pid, version = excluded.version,
    lease = excluded.lease, started_at = excluded.started_at, last_seen = excluded.last_seen,
    stopped_at = NULL, running = 0, roles = excluded.roles, tags = excluded.tags,
    timeout = excluded.timeout, down_at = NULL, down_by = NULL
RETURNING *;

-- name: get_node
SELECT * FROM nodes WHERE name = :name;

-- name: node_seen
-- The roles and tags come along: a reload may have changed what the node can run. A node
-- declared down while it was only slow is up again (its runs were rescued: it learns it from
-- the record it read before).
UPDATE nodes
SET last_seen = :now, running = :running, roles = :roles, tags = coalesce(:tags, tags),
    down_at = NULL, down_by = NULL
WHERE name = :name;

-- name: node_stopped
UPDATE nodes SET stopped_at = :now, last_seen = :now, running = 0 WHERE name = :name;

-- name: list_nodes
SELECT * FROM nodes ORDER BY name;

-- name: silent_nodes
-- Nodes that neither said goodbye nor were seen within their own node_timeout (three leases
-- for a record from before it existed), and that nobody declared down yet.
SELECT * FROM nodes
WHERE stopped_at IS NULL AND down_at IS NULL AND name <> :node
  AND last_seen < :now - coalesce(timeout, 3 * lease)
ORDER BY name;

-- name: declare_node_down
UPDATE nodes SET down_at = :now, down_by = :by
WHERE name = :name AND stopped_at IS NULL AND down_at IS NULL;

-- name: lost_runs_of_node
-- Read once, when a node declared down starts again: its agents whose runs were rescued may
-- still run and must stop (those with no pid too: the daemon may have died between starting
-- one and recording it). A scan of the node's runs, rare enough not to index.
SELECT * FROM runs
WHERE node = :node AND outcome = 'lost' AND ended_at >= :since
ORDER BY id;

-- name: pause_node
-- The node starts nothing new, for `reason`. A pause already on record (begun by an earlier
-- life of the daemon) keeps its start and takes the new reason; the caller read the record
-- first, in the same transaction, to tell whether this began it.
UPDATE nodes SET paused_at = coalesce(paused_at, :now), paused_reason = :reason
WHERE name = :name;

-- name: resume_node
-- Compare-and-set on the pause: only the call that ends it changes a row (and tells).
UPDATE nodes SET paused_at = NULL, paused_reason = NULL
WHERE name = :name AND paused_at IS NOT NULL;
