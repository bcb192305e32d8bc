-- Delivery targets: named aliases (a webhook, a command, a JSON Lines file) and the outbox
-- of what must reach them. An outbox row is written in the transaction that settles its
-- task and sent after the commit: a settle that rolls back tells nobody, and one that
-- commits is told even if the daemon dies before sending (the row waits for the next).
CREATE TABLE delivery_aliases (
    name        TEXT PRIMARY KEY,
    channel     TEXT NOT NULL CHECK (channel IN ('webhook', 'command', 'file')),
    target      TEXT NOT NULL,  -- a URL, a JSON argv list, or a file path
    format      TEXT NOT NULL DEFAULT 'json' CHECK (format IN ('json', 'slack', 'discord')),
    description TEXT,
    created_at  REAL NOT NULL
);
-- No foreign keys: a delivery outlives its task's pruning and its alias's removal (it then
-- fails, visibly, instead of vanishing).
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY,
    alias           TEXT    NOT NULL,
    event           TEXT    NOT NULL,  -- completed, dead, blocked, needs_review, job_error
    task_id         INTEGER,
    payload         TEXT    NOT NULL,  -- the JSON body, as written at the settle
    state           TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL    NOT NULL,
    last_error      TEXT,
    created_at      REAL    NOT NULL,
    sent_at         REAL
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX deliveries_alias ON deliveries (alias, id);
CREATE INDEX deliveries_created ON deliveries (created_at);
