-- Statements of the PostgreSQL store's own machinery: events, node locks, migrations.
-- SQLite has no counterpart of the first three (its events go through local sockets and its
-- daemon's file lock is all a host needs).

-- name: transaction_begin
-- A writing transaction, begun and ended by hand (PostgresStore._transaction): its end is one
-- simple query, what goes with the COMMIT followed by it, one round trip.
BEGIN;

-- name: transaction_commit
COMMIT;

-- name: transaction_rollback
ROLLBACK;

-- name: notify_event
-- Delivered to every LISTENing connection when this transaction commits, never if it rolls
-- back: one notification per event, the payload one event's JSON (< 8000 bytes), inlined as a
-- quoted literal ({payload}) since it is sent with the COMMIT as one simple query, which
-- takes no parameters.
SELECT pg_notify('taskherd_events', {payload});

-- name: listen_events
LISTEN taskherd_events;

-- name: try_node_lock
-- A session advisory lock, keyed by a constant ("thnd") and the node name's hash: held while
-- this connection lives, dropped by the server when the daemon dies however it dies.
SELECT pg_try_advisory_lock(1953001060, hashtext(:node)) AS held;

-- name: limits_lock
-- Orders the claims that count other nodes' runs (a role's max_concurrent or stagger, a
-- pool's capacity) and the setting of cooldowns: held until the transaction ends, so a claim
-- that takes it counts every claim committed before it, and two nodes can never both find
-- "one place left" and both take it. Under READ COMMITTED each later statement of the
-- transaction reads a snapshot taken after the lock was granted. Keyed "thnd", 1.
SELECT pg_advisory_xact_lock(1953001060, 1);

-- name: claim_settings
-- Two settings for a claim's transaction alone (set_config's `true`: until it ends).
-- synchronous_commit off: a claim's commit does not wait for its WAL flush. The claims that
-- count other nodes' runs hold limits_lock until they commit, and a flush per claim inside it
-- made every node's claims queue for the disk one at a time (4 processes on a durable server:
-- -35 %). What follows a claim does wait (the spawn's record, a run's end), and WAL is flushed
-- in order, so it carries the claim to disk with it. A server crash before that loses the
-- claim only: the task is ready again, and the agent whose spawn cannot be recorded is stopped.
-- enable_sort off: a claim walks tasks_queue's ready side in (priority, id) order and stops at the first
-- task that fits. Planned on statistics from before a burst of new tasks (until autovacuum
-- analyzes the table, up to a minute later; on a new database, until it first does),
-- PostgreSQL reads every ready task and sorts them instead: 0.9 ms per claim at 2,000 ready
-- tasks against 0.04 ms, and more with more. A sort no index can spare is still made.
SELECT set_config('synchronous_commit', 'off', true), set_config('enable_sort', 'off', true);

-- name: event_without_flush
-- A transaction that only sends events, after the one that made them committed, need not
-- wait for the disk: an event is a wake-up call, and a listener that misses one is covered by
-- its node's poll. A NOTIFY takes a transaction id, so its commit would otherwise be flushed.
SET LOCAL synchronous_commit = off;

-- name: migration_lock
-- Held until the migrating transaction ends, so two nodes starting together do not apply the
-- same migration twice; the key is any constant both sides agree on ("taskherd").
SELECT pg_advisory_xact_lock(8386110886290748004);

-- name: has_schema_migrations
-- Asked before create_schema_migrations: CREATE TABLE IF NOT EXISTS needs the privilege to
-- create in the schema even when the table exists, which a role that only reads and writes
-- taskherd's tables (its schema migrated by its owner) does not have.
SELECT to_regclass('schema_migrations') IS NOT NULL AS present;

-- name: create_schema_migrations
CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY,
  name text NOT NULL, applied_at double precision NOT NULL);

-- name: applied_migrations
SELECT version FROM schema_migrations;

-- name: release_of_schema
-- The release that brought a schema version; a table that a schema from before it lacks.
SELECT taskherd FROM schema_releases WHERE version = :version;

-- name: record_release
INSERT INTO schema_releases (version, taskherd) VALUES (:version, :taskherd)
ON CONFLICT (version) DO NOTHING;

-- name: record_migration
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:version, :name, :now);

-- name: may_write_table
-- `taskherd doctor`'s write probe: asked, not tried.
SELECT has_table_privilege(:table, 'SELECT, INSERT, UPDATE, DELETE') AS granted;

-- name: may_create_temporary
-- `taskherd doctor`: whether this role may create claim_within_function in its session.
SELECT has_database_privilege(current_database(), 'TEMPORARY') AS granted,
       current_user AS role, current_database() AS database;

-- name: durability_full
-- durability = full: each commit waits for the flush of its WAL.
SET synchronous_commit = on;

-- name: durability_normal
-- durability = normal: a server crash may lose the last commits (never a half-done one), as
-- SQLite's NORMAL may on power loss.
SET synchronous_commit = off;
