-- Messages between agents (and people): a recipient is a role, or a task as 'task:ID'; a
-- message to '@all' is written once per recipient, so each has its own receipts.
-- No foreign keys: a message outlives the run that sent it and the message it answers
-- (pruning removes those first), and its thread must still read.
CREATE TABLE messages (
    id               bigserial        PRIMARY KEY,
    sender           text             NOT NULL,
    sender_role      text,
    sender_run_id    bigint,
    recipient        text             NOT NULL,
    kind             text             NOT NULL DEFAULT 'text'
                     CHECK (kind IN ('text', 'task', 'result', 'status', 'system', 'spawn')),
    priority         integer          NOT NULL DEFAULT 0 CHECK (priority IN (0, 1, 2)),
    body             text             NOT NULL,
    reply_to         bigint,
    thread_id        bigint,
    created_at       double precision NOT NULL,
    delivered_at     double precision,
    delivered_run_id bigint,
    read_at          double precision,
    expires_at       double precision
);
CREATE INDEX messages_undelivered ON messages (recipient, priority DESC, id)
    WHERE delivered_at IS NULL AND read_at IS NULL;
CREATE INDEX messages_unread ON messages (recipient, id) WHERE read_at IS NULL;
CREATE INDEX messages_sender ON messages (sender, id);
CREATE INDEX messages_thread ON messages (thread_id) WHERE thread_id IS NOT NULL;
CREATE INDEX messages_created ON messages (created_at);
