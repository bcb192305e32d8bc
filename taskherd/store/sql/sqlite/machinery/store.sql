-- Statements of the SQLite store's own machinery: the migrations' bookkeeping.

-- name: create_schema_migrations
CREATE TABLE IF NOT EXISTS schema_migrations (
  version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL);

-- name: applied_migrations
SELECT version FROM schema_migrations;

-- name: migration_applied
-- Asked again under the write lock: another process may have applied it while this one waited.
SELECT 1 FROM schema_migrations WHERE version = :version;

-- name: record_migration
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:version, :name, :now);

-- name: probe_table
-- `taskherd doctor`'s write probe, inside a transaction it rolls back: the queue is untouched.
CREATE TABLE taskherd_doctor_probe (x);

-- name: probe_row
INSERT INTO taskherd_doctor_probe VALUES (1);
