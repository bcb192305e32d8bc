-- The task list's text search through the trigram index (migration 0037): the one part
-- of it each dialect writes its own way (searched_tasks, in common/, is the rest).

-- name: tasks_with_text
-- The ids of the tasks whose title or prompt has every trigram of the text searched:
-- :trigrams is the FTS5 query the store builds from the text ("abc" AND "bcd" …), never the
-- text itself. No text (NULL) matches nothing, as in PostgreSQL.
SELECT rowid AS id FROM tasks_fts
WHERE CAST(:trigrams AS TEXT) IS NOT NULL AND tasks_fts MATCH :trigrams
