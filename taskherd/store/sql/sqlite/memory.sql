-- name: search_memories
-- :query is an FTS5 expression the store builds from the words ("a" OR "b"), never the
-- caller's raw text; bm25 is lower for a better match.
-- Ranked within the newest 1,000 entries that match: bm25 is computed for every match it
-- is asked to order, and a word found in half of 100,000 entries made one search take
-- 130 ms (bench/memory.py). A selective search (fewer than 1,000 matches) ranks them all;
-- an unselective one ranks its newest 1,000. The window's start is found by walking the
-- matches in rowid order, which costs no ranking.
SELECT memories.* FROM memories_fts JOIN memories ON memories.id = memories_fts.rowid
WHERE memories_fts MATCH :query
  AND memories_fts.rowid >= coalesce((SELECT rowid FROM memories_fts
                                      WHERE memories_fts MATCH :query
                                      ORDER BY rowid DESC LIMIT 1 OFFSET 999), 0)
  AND (memories.scope = :scope OR memories.scope = :shared)
ORDER BY bm25(memories_fts), memories.id DESC
LIMIT :limit;
