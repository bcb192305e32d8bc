-- The task list's text search through the trigram index (migration 0037): the one part
-- of it each dialect writes its own way (searched_tasks, in common/, is the rest).

-- name: tasks_with_text
-- The ids of the tasks whose lower-cased title or prompt (tasks_fts) matches :pattern, found
-- through pg_trgm's GIN index, which reads the pattern's own trigrams (:trigrams is SQLite's
-- query, only tested here: a text without trigrams never reads the index).
SELECT task_id AS id FROM tasks_fts
WHERE CAST(:trigrams AS TEXT) IS NOT NULL
  AND (title LIKE :pattern ESCAPE '\' OR prompt LIKE :pattern ESCAPE '\')

-- name: tasks_not_indexed
-- None: PostgreSQL's tasks_fts is written as each task is added (its row trigger; the GIN
-- index takes the entry without the segment writes that made SQLite index in batches).
SELECT task_id AS id FROM tasks_fts WHERE CAST(:trigrams AS TEXT) IS NOT NULL AND false

-- text_index_upto, index_task_text, move_text_mark and text_index_waiting have no PostgreSQL
-- block: no task waits to be indexed (tasks_not_indexed above), and there is no indexer pass.
