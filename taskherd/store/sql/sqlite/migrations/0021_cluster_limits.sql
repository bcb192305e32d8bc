-- Several nodes, one fleet: the limits a claim checks across every node sharing the database,
-- where a node may run, when a silent node was declared down, and which taskherd a schema needs.

-- The role's pool when the run was claimed (the task's own pool is on the task): an open run
-- holds a place in both, whichever node runs it.
ALTER TABLE runs ADD COLUMN pool TEXT;

-- The latest claim of each staggered role on each node, for the gap between two spawns: the
-- role's runs would have to be scanned for it otherwise, and they are the whole history.
CREATE TABLE role_claims (
    role       TEXT NOT NULL,
    node       TEXT NOT NULL,
    claimed_at REAL NOT NULL,
    PRIMARY KEY (role, node)
);

-- The node's tags ([daemon] tags, JSON list), its own node_timeout (how long a silence means
-- death), and when and by whom it was declared down (NULL while it is up or said goodbye).
ALTER TABLE nodes ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
ALTER TABLE nodes ADD COLUMN timeout REAL;
ALTER TABLE nodes ADD COLUMN down_at REAL;
ALTER TABLE nodes ADD COLUMN down_by TEXT;

-- For each schema version, the taskherd release that brought it: a node that finds a schema
-- newer than it knows names the release it needs.
CREATE TABLE schema_releases (
    version  INTEGER PRIMARY KEY,
    taskherd TEXT NOT NULL
);
