-- name: insert_memory
-- The entry and its tsvector (memories_fts), in one statement, as SQLite's trigger adds it
-- to FTS5.
WITH added AS (
    INSERT INTO memories (scope, section, text, source, created_at, embedding, embedding_model)
    VALUES (:scope, :section, :text, :source, :now, :embedding, :embedding_model)
    RETURNING *
), indexed AS (
    INSERT INTO memories_fts (memory_id, scope, document)
    SELECT id, scope, to_tsvector('english', text) FROM added
)
SELECT * FROM added;

-- name: search_memories
-- :query is a tsquery the store builds from the words ('a | b'), never the caller's raw
-- text. Ranked within the newest 1,000 entries that match, as SQLite ranks them (see
-- sqlite/memory.sql): a word found in half the entries would otherwise rank 50,000.
-- The newest matches are found in two steps, so neither a common nor a rare word costs
-- more than a few thousand rows whatever the planner's statistics say. The GIN index
-- cannot return matches newest first, so for a common word it would read every match
-- (80,000 of 100,000 entries: 80 ms) to keep 1,000; walking the newest 10,000 entries
-- by id finds a common word's newest 1,000 matches in the first few thousand. Only when
-- that walk finds fewer than 1,000 (a rarer word) are the older matches taken from the
-- GIN index, and a rarer word has few. Only memories_fts is read to rank (its stored
-- tsvector and scope), and memories only for the entries returned.
WITH recent_matched AS MATERIALIZED (
    SELECT memory_id, scope, document
    FROM (SELECT memory_id, scope, document FROM memories_fts
          ORDER BY memory_id DESC
          LIMIT 10000) AS recent
    WHERE document @@ to_tsquery('english', :query)
    ORDER BY memory_id DESC
    LIMIT 1000
), matched AS (
    SELECT * FROM recent_matched WHERE (SELECT count(*) FROM recent_matched) = 1000
    UNION ALL
    (SELECT memory_id, scope, document FROM memories_fts
     WHERE (SELECT count(*) FROM recent_matched) < 1000
       AND document @@ to_tsquery('english', :query)
     ORDER BY memory_id + 0 DESC  -- "+ 0": from the GIN index, never by walking the ids
     LIMIT 1000)
), ranked AS (
    SELECT memory_id, ts_rank_cd(document, to_tsquery('english', :query)) AS score
    FROM matched
    WHERE scope = :scope OR scope = :shared
    ORDER BY score DESC, memory_id DESC
    LIMIT :limit
)
SELECT memories.* FROM ranked JOIN memories ON memories.id = ranked.memory_id
ORDER BY ranked.score DESC, memories.id DESC;
