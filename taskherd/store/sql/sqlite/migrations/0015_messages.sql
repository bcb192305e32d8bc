-- Messages between agents (and people): a recipient is a role, or a task as 'task:ID'; a
-- message to '@all' is written once per recipient, so each has its own receipts.
-- No foreign keys: a message outlives the run that sent it and the message it answers
-- (pruning removes those first), and its thread must still read.
CREATE TABLE messages (
    id               INTEGER PRIMARY KEY,
    sender           TEXT    NOT NULL,  -- a role, 'task:ID', or '@person'
    sender_role      TEXT,              -- the sending run's role, when an agent sent it
    sender_run_id    INTEGER,
    recipient        TEXT    NOT NULL,  -- a role or 'task:ID'
    kind             TEXT    NOT NULL DEFAULT 'text'
                     CHECK (kind IN ('text', 'task', 'result', 'status', 'system', 'spawn')),
    priority         INTEGER NOT NULL DEFAULT 0 CHECK (priority IN (0, 1, 2)),
    body             TEXT    NOT NULL,
    reply_to         INTEGER,
    thread_id        INTEGER,           -- the thread's first message; NULL: this one is
    created_at       REAL    NOT NULL,
    delivered_at     REAL,
    delivered_run_id INTEGER,
    read_at          REAL,
    expires_at       REAL
);
-- A run's inbox at claim: urgent first, then by age, without sorting a backlog of thousands.
CREATE INDEX messages_undelivered ON messages (recipient, priority DESC, id)
    WHERE delivered_at IS NULL AND read_at IS NULL;
CREATE INDEX messages_unread ON messages (recipient, id) WHERE read_at IS NULL;
CREATE INDEX messages_sender ON messages (sender, id);
CREATE INDEX messages_thread ON messages (thread_id) WHERE thread_id IS NOT NULL;
CREATE INDEX messages_created ON messages (created_at);
