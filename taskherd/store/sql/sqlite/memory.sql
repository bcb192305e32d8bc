-- name: search_memories
-- :query is an FTS5 expression the store builds from the words ("a" OR "b"), never the
-- caller's raw text; bm25 is lower for a better match.
SELECT memories.* FROM memories_fts JOIN memories ON memories.id = memories_fts.rowid
WHERE memories_fts MATCH :query AND (memories.scope = :scope OR memories.scope = :shared)
ORDER BY bm25(memories_fts), memories.id DESC
LIMIT :limit;
