-- The agents registry: agents that work through the API or MCP without being spawned by
-- taskherd (a configured role is an agent without a row here).
CREATE TABLE agents (
    name          text             PRIMARY KEY,
    runtime       text,
    capabilities  text             NOT NULL DEFAULT '[]',
    description   text,
    registered_at double precision NOT NULL,
    last_seen_at  double precision NOT NULL
);
CREATE INDEX runs_role ON runs (role, id);
