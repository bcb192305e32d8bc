-- The PostgreSQL store stops queueing its memory search index's new entries in a pending
-- list that every search scanned. SQLite's FTS5 index has no such list; the migration
-- merges its segments into one (what FTS5 calls optimize), so a store that has grown from
-- many small additions searches one b-tree, and both dialects stay at the same version.
INSERT INTO memories_fts (memories_fts) VALUES ('optimize');
