-- The claim within cluster limits in one statement (PostgresStore; SQLite runs the steps of
-- common/limits.sql one by one, in process, under its write lock).

-- name: claim_if_room
-- limit_usage's counts (that block, put in for {limit_usage}), whether they leave room for
-- one more run, and only then claim_task, insert_run, note_role_claim and the claim's event,
-- as one statement, sent right after limits_lock in one round trip (its snapshot is taken once
-- the lock is granted, so it counts every claim committed before it): a claim holds the lock
-- for that round trip only, the COMMIT going with it.
-- The caps are :max_concurrent, :stagger (0 = none), :pool_a_capacity and :pool_b_capacity
-- (NULL = no limit), the same tests as ClaimLimits.refusal, which words a refusal from the
-- counts returned with it. :runtime is the role's, whose cooldown counts; :run_runtime and
-- :role_pool are the run's. :event is the claim's task_changed event but for the run's id,
-- which the database adds; it is sent when the claim commits, and only if it made a run.
-- The claimed run's columns follow (NULL when there was no room).
WITH usage AS MATERIALIZED (  -- counted once, not once per column room reads
    {limit_usage}
), room AS (
    SELECT usage.*,
           cooldown_until IS NULL
           AND (CAST(:max_concurrent AS BIGINT) IS NULL OR role_running < :max_concurrent)
           AND (CAST(:stagger AS DOUBLE PRECISION) = 0 OR role_last_claim IS NULL
                OR :now >= role_last_claim + :stagger)
           AND (CAST(:pool_a_capacity AS BIGINT) IS NULL OR pool_a_running < :pool_a_capacity)
           AND (CAST(:pool_b_capacity AS BIGINT) IS NULL OR pool_b_running < :pool_b_capacity)
           AS has_room
    FROM usage
), claimed AS (
    UPDATE tasks
    SET state = 'claimed', lease_node = :node, lease_expires_at = :lease_until, updated_at = :now
    WHERE id = :id AND state = 'ready' AND (SELECT has_room FROM room)
    RETURNING id
), run AS (
    INSERT INTO runs (task_id, attempt, node, role, runtime, claimed_at, pool)
    SELECT id, (SELECT count(*) + 1 FROM runs WHERE task_id = :id), :node, :role, :run_runtime,
           :now, :role_pool
    FROM claimed
    RETURNING *
), noted AS (
    INSERT INTO role_claims (role, node, claimed_at)
    SELECT :role, :node, :now FROM run WHERE CAST(:stagger AS DOUBLE PRECISION) > 0
    ON CONFLICT (role, node) DO UPDATE SET claimed_at = excluded.claimed_at
), notified AS (  -- not inlined (pg_notify is volatile): run for each claimed run, once
    SELECT pg_notify('taskherd_events',
                     CAST(CAST(:event AS jsonb) || jsonb_build_object('run_id', id) AS text))
    FROM run
)
SELECT room.role_running, room.role_last_claim, room.pool_a_running, room.pool_b_running,
       room.cooldown_until, room.has_room, (SELECT count(*) FROM notified) AS notified, run.*
FROM room LEFT JOIN run ON true;

-- name: deliver_claim_inbox
-- The inbox of the run claim_if_room just claimed (none if it found no room), in the same round
-- trip: the messages undelivered_for_run finds ({undelivered_for_run}), urgent first, then
-- oldest first, marked delivered as long as their bodies stay within :bytes (the first always
-- fits), as SQLStore._deliver_inbox does one message at a time. The run is the one open run of
-- the task this node claimed at :now. `delivered_at IS NULL` is checked again on the row
-- itself: a message another node's claim marks meanwhile is left to it.
WITH run AS (
    SELECT id FROM runs
    WHERE task_id = :task_id AND node = :node AND claimed_at = :now AND ended_at IS NULL
), waiting AS (
    SELECT id, row_number() OVER in_order AS place, sum(octet_length(body)) OVER in_order AS size
    FROM ({undelivered_for_run}) AS undelivered
    WINDOW in_order AS (ORDER BY priority DESC, id)
)
UPDATE messages SET delivered_at = :now, delivered_run_id = run.id
FROM run, waiting
WHERE messages.id = waiting.id AND (waiting.place = 1 OR waiting.size <= :bytes)
  AND messages.delivered_at IS NULL AND messages.read_at IS NULL
RETURNING messages.*;
