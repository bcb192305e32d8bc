-- Each daemon (node) says it is alive: `taskherd status` tells a live node from a dead one.
CREATE TABLE nodes (
    name       TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER,
    version    TEXT,
    lease      REAL NOT NULL,
    started_at REAL NOT NULL,
    last_seen  REAL NOT NULL,
    stopped_at REAL,
    running    INTEGER NOT NULL DEFAULT 0,
    roles      TEXT NOT NULL DEFAULT '[]'  -- JSON list: the roles its config defines
);
