-- The task list's text search through the trigram index (migration 0034), one block a dialect.

-- name: tasks_with_text
-- The tasks whose lower-cased title or prompt (tasks_fts) matches :pattern, found through
-- pg_trgm's GIN index (which reads the pattern's own trigrams; :trigrams is SQLite's query,
-- only tested here so that a short text, which has none, never reads the index).
SELECT tasks.* FROM tasks_fts JOIN tasks ON tasks.id = tasks_fts.task_id
WHERE CAST(:trigrams AS TEXT) IS NOT NULL
  AND (tasks_fts.title LIKE :pattern ESCAPE '\' OR tasks_fts.prompt LIKE :pattern ESCAPE '\')
