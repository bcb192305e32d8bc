-- The agent requests that made something (a child task, messages, a memory entry, a review's
-- verdict), by the id the agent's command sends with every try of one request: a try repeated
-- because the daemon that applied the first died before it could answer finds what the first
-- made, and nothing is made twice. Written in the transaction that made it; gone with its run.
CREATE TABLE agent_requests (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    request_id TEXT    NOT NULL,
    made       TEXT    NOT NULL,  -- JSON: the ids of what the request made
    PRIMARY KEY (run_id, request_id)
);
