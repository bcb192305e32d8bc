-- Long-term memory: what a role (or every role: scope '@shared') learnt, searched by
-- relevance before acting. Entries come from agents and people, and from the short-term
-- memory files' overflow. `embedding` is a JSON array when an embeddings endpoint is set.
CREATE TABLE memories (
    id              INTEGER PRIMARY KEY,
    scope           TEXT    NOT NULL,  -- a role, or '@shared'
    section         TEXT,              -- the short-term section it came from, if any
    text            TEXT    NOT NULL,
    source          TEXT    NOT NULL,  -- agent, person, or short-term
    created_at      REAL    NOT NULL,
    embedding       TEXT,
    embedding_model TEXT
);
CREATE INDEX memories_scope ON memories (scope, id);
-- Full-text search (FTS5, ranked by bm25), kept in step with the table by triggers; the
-- porter stemmer lets "deploying" find "deploy".
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    text, content = 'memories', content_rowid = 'id', tokenize = 'porter unicode61'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF text ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
END;
