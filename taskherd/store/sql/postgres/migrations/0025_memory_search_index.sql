-- The memory search index writes each entry straight into the index rather than into GIN's
-- pending list. With the pending list on, every search scanned the unsorted list too (up to
-- 4 MB of it after a few thousand additions), which made a search over 100,000 entries
-- four times slower until a vacuum merged it; memory is added a few entries at a time, so
-- the cost moves to where it is small.
ALTER INDEX memories_fts_document SET (fastupdate = off);
SELECT gin_clean_pending_list('memories_fts_document'::regclass);
