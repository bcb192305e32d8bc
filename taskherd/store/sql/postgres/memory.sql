-- name: search_memories
-- :query is a tsquery the store builds from the words ('a | b'), never the caller's raw
-- text. The to_tsvector expression is memories_text_search's, word for word.
SELECT * FROM memories
WHERE to_tsvector('english', text) @@ to_tsquery('english', :query)
  AND (scope = :scope OR scope = :shared)
ORDER BY ts_rank_cd(to_tsvector('english', text), to_tsquery('english', :query)) DESC, id DESC
LIMIT :limit;
