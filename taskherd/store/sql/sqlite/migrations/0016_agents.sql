-- The agents registry: agents that work through the API or MCP without being spawned by
-- taskherd (a configured role is an agent without a row here).
CREATE TABLE agents (
    name          TEXT PRIMARY KEY,
    runtime       TEXT,
    capabilities  TEXT NOT NULL DEFAULT '[]',  -- a JSON array of strings
    description   TEXT,
    registered_at REAL NOT NULL,
    last_seen_at  REAL NOT NULL
);
-- `agents list` reads each role's latest run: walked backwards by role, not a scan of runs.
CREATE INDEX runs_role ON runs (role, id);
