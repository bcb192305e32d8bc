-- Long-term memory: what a role (or every role: scope '@shared') learnt, searched by
-- relevance before acting. Entries come from agents and people, and from the short-term
-- memory files' overflow. `embedding` is a JSON array when an embeddings endpoint is set.
CREATE TABLE memories (
    id              bigserial        PRIMARY KEY,
    scope           text             NOT NULL,
    section         text,
    text            text             NOT NULL,
    source          text             NOT NULL,
    created_at      double precision NOT NULL,
    embedding       text,
    embedding_model text
);
CREATE INDEX memories_scope ON memories (scope, id);
-- Full-text search over an expression index (no extra column: a row reads as in SQLite);
-- search_memories repeats the expression word for word so the planner uses it.
CREATE INDEX memories_text_search ON memories USING GIN (to_tsvector('english', text));
