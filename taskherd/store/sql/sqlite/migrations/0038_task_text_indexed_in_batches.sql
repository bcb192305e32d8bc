-- The text index off the enqueue path: its insert trigger wrote FTS5 pages at every task
-- added (batched enqueue 92k/s without it, 24-39k/s with it; +72 µs of a single enqueue's
-- ~230 µs). Now the index holds exactly the tasks at or below a high-water mark, and the
-- tasks above it (the tail, the newest) are read by id when a search runs (tasks_with_text);
-- the daemon's indexer (services/text_index.py) indexes the tail in chunks and moves the mark.
--
-- The one rule every trigger keeps: a task is in the index if and only if its id is at or
-- below the mark (FTS5's 'delete' of a row it does not hold would corrupt it). FTS5's own
-- 'rebuild' reads every task: whoever runs it sets the mark to max(id) in its transaction.
CREATE TABLE tasks_fts_mark (
    only_row   INTEGER PRIMARY KEY CHECK (only_row = 1),
    indexed_to INTEGER NOT NULL  -- every task whose id is at or below it is in tasks_fts
);
-- Every task there now is in the index (0037 indexed them on insert).
INSERT INTO tasks_fts_mark (only_row, indexed_to)
VALUES (1, coalesce((SELECT max(id) FROM tasks), 0));
DROP TRIGGER tasks_fts_insert;
DROP TRIGGER tasks_fts_delete;
DROP TRIGGER tasks_fts_update;
-- tasks.id is INTEGER PRIMARY KEY without AUTOINCREMENT: once the newest tasks are deleted
-- (pruned), a new task takes an id at or below the mark, which no indexer pass would reach.
-- Such a task is indexed as it is added; any other costs this one lookup of the mark.
CREATE TRIGGER tasks_fts_insert AFTER INSERT ON tasks
WHEN new.id <= (SELECT indexed_to FROM tasks_fts_mark) BEGIN
    INSERT INTO tasks_fts (rowid, title, prompt) VALUES (new.id, new.title, new.prompt);
END;
CREATE TRIGGER tasks_fts_delete AFTER DELETE ON tasks
WHEN old.id <= (SELECT indexed_to FROM tasks_fts_mark) BEGIN
    INSERT INTO tasks_fts (tasks_fts, rowid, title, prompt)
    VALUES ('delete', old.id, old.title, old.prompt);
END;
CREATE TRIGGER tasks_fts_update AFTER UPDATE OF title, prompt ON tasks
WHEN old.id <= (SELECT indexed_to FROM tasks_fts_mark) BEGIN
    INSERT INTO tasks_fts (tasks_fts, rowid, title, prompt)
    VALUES ('delete', old.id, old.title, old.prompt);
    INSERT INTO tasks_fts (rowid, title, prompt) VALUES (new.id, new.title, new.prompt);
END;
