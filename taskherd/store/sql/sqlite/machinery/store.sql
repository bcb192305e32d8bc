-- Statements of the SQLite store's own machinery: the migrations' bookkeeping.

-- name: create_schema_migrations
CREATE TABLE IF NOT EXISTS schema_migrations (
  version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL);

-- name: applied_migrations
SELECT version FROM schema_migrations;

-- name: release_of_schema
-- The release that brought a schema version; a table that a schema from before it lacks.
SELECT taskherd FROM schema_releases WHERE version = :version;

-- name: record_release
INSERT INTO schema_releases (version, taskherd) VALUES (:version, :taskherd)
ON CONFLICT (version) DO NOTHING;

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

-- name: begin_write
-- Takes the write lock up front, so a transaction never has to upgrade (and fail) midway.
BEGIN IMMEDIATE;

-- name: commit
COMMIT;

-- name: rollback
ROLLBACK;

-- name: savepoint
-- One transaction of a group committed together (SQLiteStore.writes_grouped): a failure rolls
-- back its own writes, not the group's.
SAVEPOINT grouped;

-- name: release_savepoint
RELEASE grouped;

-- name: rollback_to_savepoint
ROLLBACK TO grouped;

-- name: inner_savepoint
-- A part of a transaction that may fail alone (SQLiteStore._savepoint): the claim a run's end
-- makes room for, rolled back without the end.
SAVEPOINT part;

-- name: release_inner
RELEASE part;

-- name: rollback_to_inner
ROLLBACK TO part;

-- name: journal_wal
-- Readers never block the writer, nor it them.
PRAGMA journal_mode = WAL;

-- name: journal_delete
-- A backup copy is one self-contained file.
PRAGMA journal_mode = DELETE;

-- name: integrity_check
PRAGMA integrity_check;

-- name: foreign_keys_on
PRAGMA foreign_keys = ON;

-- name: data_version
-- Changes whenever another connection (of any process) has committed since this one last
-- asked; this connection's own commits leave it as it was.
PRAGMA data_version;

-- name: no_autocheckpoint
PRAGMA wal_autocheckpoint = 0;

-- name: durability_full
-- durability = full: each commit is fsynced before it returns.
PRAGMA synchronous = FULL;

-- name: durability_normal
-- durability = normal: WAL commits are fsynced at checkpoints; a power loss may lose the last
-- commits (never a half-done one).
PRAGMA synchronous = NORMAL;

-- name: wal_checkpoint_truncate
-- After a snapshot and on a clean shutdown: everything into the database file and the WAL
-- emptied to zero bytes. Waits (up to the connection's busy timeout) for readers; the first
-- column of its row is 1 when a reader still held part of the WAL and it could not finish.
PRAGMA wal_checkpoint(TRUNCATE);
