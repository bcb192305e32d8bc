-- The task list's text search reads an index rather than every task: a word found in a few
-- tasks of a million read all million before. pg_trgm's GIN index finds the rows whose text
-- has every trigram of a LIKE pattern, then PostgreSQL checks the pattern on those rows.
-- pg_trgm is in contrib, and trusted (PostgreSQL 13 on): a role that may create objects in
-- the database may create it; otherwise a superuser runs this statement once (the store
-- says so when it cannot, docs/operating.md).
CREATE EXTENSION IF NOT EXISTS pg_trgm;
-- The lower-cased text beside the task rather than an index on tasks itself: PostgreSQL
-- adds an entry to every index of a table at each update that is not HOT, and a task is
-- updated several times (claimed, running, heartbeats, settled), which would index its whole
-- text again each time. This table is written when a task is added (or its text changes),
-- and goes with it (cascade), as SQLite's FTS5 table.
-- (CREATE OR REPLACE TRIGGER: the migration splitter reads a bare CREATE TRIGGER as
-- SQLite's, which waits for an END.)
CREATE TABLE tasks_fts (
    task_id bigint PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    title   text   NOT NULL,
    prompt  text   NOT NULL
);
CREATE OR REPLACE FUNCTION tasks_fts_keep() RETURNS trigger LANGUAGE plpgsql AS '
BEGIN
    INSERT INTO tasks_fts (task_id, title, prompt)
    VALUES (NEW.id, lower(NEW.title), lower(NEW.prompt))
    ON CONFLICT (task_id) DO UPDATE SET title = excluded.title, prompt = excluded.prompt;
    RETURN NULL;
END';
CREATE OR REPLACE TRIGGER tasks_fts_insert AFTER INSERT ON tasks
FOR EACH ROW EXECUTE FUNCTION tasks_fts_keep();
CREATE OR REPLACE TRIGGER tasks_fts_update AFTER UPDATE OF title, prompt ON tasks
FOR EACH ROW EXECUTE FUNCTION tasks_fts_keep();
-- The tasks already there, in one statement, then the index built over them at once (faster
-- than growing it row by row).
INSERT INTO tasks_fts (task_id, title, prompt) SELECT id, lower(title), lower(prompt) FROM tasks;
CREATE INDEX tasks_fts_trigrams ON tasks_fts
USING GIN (title gin_trgm_ops, prompt gin_trgm_ops) WITH (fastupdate = off);
