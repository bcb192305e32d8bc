-- The task list's text search through the trigram index (migration 0034), one block a dialect.

-- name: tasks_with_text
-- The tasks whose title or prompt has every trigram of the text searched: :trigrams is the
-- FTS5 query the store builds from the text ("abc" AND "bcd" …), never the text itself. The
-- index keeps no positions, so these are candidates: filtered_tasks' LIKE keeps the matches.
-- No text (NULL) matches nothing, as in PostgreSQL.
SELECT tasks.* FROM tasks_fts JOIN tasks ON tasks.id = tasks_fts.rowid
WHERE CAST(:trigrams AS TEXT) IS NOT NULL AND tasks_fts MATCH :trigrams
