-- Adding tasks wrote their text into the trigram index (0037) an entry at a time: a row
-- trigger ran an INSERT per task, and the GIN index (fastupdate off) put each of a task's
-- trigrams into its tree at once. A batch of 1,000 tasks with prompts of 200 characters was
-- 1,000 trigger calls and ~100,000 tree insertions: enqueue_many ran at 1,500 tasks/s, and
-- at a fifth of its rate without the index (bench/postgres.py).
-- Now one INSERT per statement, from the rows it added (a transition table), and the index
-- takes new entries into its pending list, merged into the tree in bulk once the list holds
-- 256 kB: a batch of 1,000 such tasks runs at ~8,000 tasks/s. A search reads the pending list
-- too, so it is kept small: 256 kB is ~32 pages scanned (a rare word's search 0.1-0.2 ms at
-- 20,000 tasks; the default 4 MB made it 4x slower, see 0025). A change of a task's text
-- stays a row trigger: PostgreSQL allows no transition table on UPDATE OF a column list.
-- The INSERT keeps 0037's ON CONFLICT, so a text already there is replaced as it was.
-- (CREATE OR REPLACE TRIGGER: the migration splitter reads a bare CREATE TRIGGER as
-- SQLite's, which waits for an END.)
DROP TRIGGER tasks_fts_insert ON tasks;
CREATE OR REPLACE FUNCTION tasks_fts_added() RETURNS trigger LANGUAGE plpgsql AS '
BEGIN
    INSERT INTO tasks_fts (task_id, title, prompt)
    SELECT id, lower(title), lower(prompt) FROM added
    ON CONFLICT (task_id) DO UPDATE SET title = excluded.title, prompt = excluded.prompt;
    RETURN NULL;
END';
CREATE OR REPLACE TRIGGER tasks_fts_insert AFTER INSERT ON tasks REFERENCING NEW TABLE AS added
FOR EACH STATEMENT EXECUTE FUNCTION tasks_fts_added();
ALTER INDEX tasks_fts_trigrams SET (fastupdate = on, gin_pending_list_limit = 256);
