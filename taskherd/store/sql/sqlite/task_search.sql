-- The task list's text search through the trigram index (migrations 0037 and 0038): the one
-- part of it each dialect writes its own way (searched_tasks, in common/, is the rest).

-- name: tasks_with_text
-- The ids of the tasks whose title or prompt has every trigram of the text searched:
-- :trigrams is the FTS5 query the store builds from the text ("abc" AND "bcd" …), never the
-- text itself. No text (NULL) matches nothing, as in PostgreSQL.
-- The index holds the tasks at or below its mark (tasks_fts_mark, migration 0038); the
-- ones above it are searched_tail's (tasks_not_indexed).
SELECT rowid AS id FROM tasks_fts
WHERE CAST(:trigrams AS TEXT) IS NOT NULL AND tasks_fts MATCH :trigrams

-- name: tasks_not_indexed
-- The tasks added since the indexer's last pass (above the mark), every one a candidate:
-- searched_tail's LIKE keeps those that hold the text. Read by the key, newest or oldest
-- first as the list asks. A task whose id is at or below the mark is in the index.
SELECT id FROM tasks
WHERE CAST(:trigrams AS TEXT) IS NOT NULL AND id > (SELECT indexed_to FROM tasks_fts_mark)

-- The indexer's pass (services/text_index.py), SQLite only: PostgreSQL indexes each task
-- as it is added. Each chunk is one short writing transaction of these three blocks.

-- name: text_index_upto
-- The last id of the next :most tasks above the mark (NULL: none waits).
SELECT max(id) AS upto FROM (
    SELECT id FROM tasks WHERE id > (SELECT indexed_to FROM tasks_fts_mark) ORDER BY id LIMIT :most
) AS next_tasks;

-- name: index_task_text
-- Those tasks into the index, in id order (FTS5 appends them to its newest segment).
INSERT INTO tasks_fts (rowid, title, prompt)
SELECT id, title, prompt FROM tasks
WHERE id > (SELECT indexed_to FROM tasks_fts_mark) AND id <= :upto
ORDER BY id;

-- name: move_text_mark
-- Then the mark past them, in the same transaction: from here on a change to their text or
-- their deletion reaches the index (the triggers read the mark).
UPDATE tasks_fts_mark SET indexed_to = :upto;

-- name: text_index_waiting
-- How many tasks wait above the mark, at most (ids: a deleted one still counts): a search
-- reading more than a few thousand of them one by one indexes them first.
SELECT coalesce((SELECT max(id) FROM tasks), 0) - indexed_to AS waiting FROM tasks_fts_mark;
