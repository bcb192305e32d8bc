-- Each daemon (node) says it is alive: `taskherd status` tells a live node from a dead one.
CREATE TABLE nodes (
    name       text             PRIMARY KEY,
    host       text             NOT NULL,
    pid        integer,
    version    text,
    lease      double precision NOT NULL,
    started_at double precision NOT NULL,
    last_seen  double precision NOT NULL,
    stopped_at double precision,
    running    integer          NOT NULL DEFAULT 0,
    roles      text             NOT NULL DEFAULT '[]'  -- JSON list: the roles its config defines
);
