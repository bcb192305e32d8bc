-- The task list's text search reads an index rather than every task: a word found in a few
-- tasks of a million read all million (about 0.5 s) before. FTS5's trigram tokenizer
-- indexes every three characters of the title and the prompt, case-folded, so part of a
-- word still finds it. The index holds which tasks have each trigram and nothing more
-- (detail = none: no positions, no copy of the text, about a sixth of the size with them);
-- a search asks for the tasks having every trigram of its text, and the list's LIKE reads
-- those few tasks' text to keep only the real matches (filtered_tasks). columnsize = 0:
-- nothing is ranked, no token counts are kept.
CREATE VIRTUAL TABLE tasks_fts USING fts5 (
    title, prompt, content = 'tasks', content_rowid = 'id', tokenize = 'trigram',
    detail = none, columnsize = 0
);
-- Kept in step by triggers on the text alone: a task's state changes (claims, heartbeats,
-- settling) write no index page; a task's title and prompt are written once, on insert.
CREATE TRIGGER tasks_fts_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO tasks_fts (rowid, title, prompt) VALUES (new.id, new.title, new.prompt);
END;
CREATE TRIGGER tasks_fts_delete AFTER DELETE ON tasks BEGIN
    INSERT INTO tasks_fts (tasks_fts, rowid, title, prompt)
    VALUES ('delete', old.id, old.title, old.prompt);
END;
CREATE TRIGGER tasks_fts_update AFTER UPDATE OF title, prompt ON tasks BEGIN
    INSERT INTO tasks_fts (tasks_fts, rowid, title, prompt)
    VALUES ('delete', old.id, old.title, old.prompt);
    INSERT INTO tasks_fts (rowid, title, prompt) VALUES (new.id, new.title, new.prompt);
END;
-- The tasks already there, read once in rowid order (FTS5 builds its segments in memory and
-- merges them: a million short tasks in seconds, bench/task_search.py).
INSERT INTO tasks_fts (tasks_fts) VALUES ('rebuild');
