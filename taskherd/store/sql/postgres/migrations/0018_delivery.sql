-- Delivery targets: named aliases (a webhook, a command, a JSON Lines file) and the outbox
-- of what must reach them. An outbox row is written in the transaction that settles its
-- task and sent after the commit: a settle that rolls back tells nobody, and one that
-- commits is told even if the daemon dies before sending (the row waits for the next).
CREATE TABLE delivery_aliases (
    name        text             PRIMARY KEY,
    channel     text             NOT NULL CHECK (channel IN ('webhook', 'command', 'file')),
    target      text             NOT NULL,
    format      text             NOT NULL DEFAULT 'json' CHECK (format IN ('json', 'slack', 'discord')),
    description text,
    created_at  double precision NOT NULL
);
CREATE TABLE deliveries (
    id              bigserial        PRIMARY KEY,
    alias           text             NOT NULL,
    event           text             NOT NULL,
    task_id         bigint,
    payload         text             NOT NULL,
    state           text             NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
    attempts        integer          NOT NULL DEFAULT 0,
    next_attempt_at double precision NOT NULL,
    last_error      text,
    created_at      double precision NOT NULL,
    sent_at         double precision
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX deliveries_alias ON deliveries (alias, id);
CREATE INDEX deliveries_created ON deliveries (created_at);
