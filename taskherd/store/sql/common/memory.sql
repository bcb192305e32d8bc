-- Named SQL blocks of long-term memory (store/sql_memory.py). search_memories is written
-- per dialect (sqlite/memory.sql, postgres/memory.sql): their full-text search differs.

-- name: insert_memory
INSERT INTO memories (scope, section, text, source, created_at, embedding, embedding_model)
VALUES (:scope, :section, :text, :source, :now, :embedding, :embedding_model)
RETURNING *;

-- name: get_memory
SELECT * FROM memories WHERE id = :id;

-- name: list_memories
-- Newest first; NULL scope lists every scope.
SELECT * FROM memories
WHERE CAST(:scope AS TEXT) IS NULL OR scope = :scope OR scope = :shared
ORDER BY id DESC
LIMIT :limit;

-- name: forget_memory
DELETE FROM memories WHERE id = :id;

-- name: embedded_memories
-- The vectors of hybrid search: every embedded entry of the scope and the shared ones.
SELECT id, embedding FROM memories
WHERE (scope = :scope OR scope = :shared) AND embedding IS NOT NULL
  AND embedding_model = :embedding_model;
