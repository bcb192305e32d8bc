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

-- name: claim_within_function
-- A claim within limits as one call, one statement: its own transaction (the connection's
-- autocommit), so the candidate's row lock, limits_lock and the COMMIT all end on the server,
-- and the claim costs one round trip instead of two, and one statement to parse and bind
-- instead of six. Created once per connection in its temporary schema (PostgresStore), from
-- the blocks it runs: claim_candidate, claim_if_room and deliver_claim_inbox, put in for their
-- names in braces, their parameters this function's arguments and variables (each `:x` is
-- `arg_x`). The settings are claim_settings'.
-- Each statement of a PL/pgSQL function takes a snapshot of its own, so the count (in
-- claim_if_room) sees every claim committed before limits_lock was granted, as in the steps.
-- What ClaimLimits says of a role is handed in as JSON, by role (:roles' each, with `runtime`
-- that of its cooldown and `run_runtime` the run's) and by pool, and the candidate's pools
-- and node filters are worked out from it as usage_params does; PostgresStore checks the
-- pools named against usage_params before it believes the answer.
-- With :token_sha256 (the digest of the secret of the run's credential the dispatcher
-- minted before the claim), the claimed run's credential is recorded too, on the run's row
-- (note_run_credential), as the steps' claim records it: no write of its own between the
-- claim and the agent's start. The secret itself never reaches the server.
-- The answer is NULL (no ready task), or the candidate, its role and pools, the counts and
-- whether they left room, and if so the run and its inbox's messages.
CREATE OR REPLACE FUNCTION pg_temp.taskherd_claim_within(
    arg_now DOUBLE PRECISION, arg_node TEXT, arg_lease_until DOUBLE PRECISION,
    arg_roles TEXT, arg_full_pools TEXT, arg_any_role TEXT, arg_role_limits TEXT,
    arg_pool_limits TEXT, arg_event TEXT, arg_task_address_prefix TEXT,
    arg_inbox_messages BIGINT, arg_inbox_bytes BIGINT, arg_token_sha256 TEXT)
RETURNS JSONB LANGUAGE plpgsql AS $function$
DECLARE
    var_task RECORD;
    var_claim RECORD;
    var_message RECORD;
    var_messages JSONB := '[]';
    var_role_limit JSONB;
    var_pool_limits JSONB := CAST(arg_pool_limits AS JSONB);
    arg_id BIGINT;
    arg_task_id BIGINT;
    arg_role TEXT;
    arg_role_node TEXT;
    arg_pool_a TEXT;
    arg_pool_a_node TEXT;
    arg_pool_b TEXT;
    arg_pool_b_node TEXT;
    arg_runtime TEXT;
    arg_run_runtime TEXT;
    arg_role_pool TEXT;
    arg_max_concurrent BIGINT;
    arg_stagger DOUBLE PRECISION;
    arg_pool_a_capacity BIGINT;
    arg_pool_b_capacity BIGINT;
    arg_task_address TEXT;
    arg_limit BIGINT := arg_inbox_messages;
    arg_bytes BIGINT := arg_inbox_bytes;
    arg_run_id BIGINT;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true), set_config('enable_sort', 'off', true);
    FOR var_task IN {claim_candidate} LOOP
        EXIT;
    END LOOP;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    arg_id := var_task.id;
    arg_task_id := var_task.id;
    arg_role := CASE WHEN var_task.role = 'any' THEN arg_any_role ELSE var_task.role END;
    var_role_limit := CAST(arg_role_limits AS JSONB) -> arg_role;
    arg_role_pool := var_role_limit ->> 'pool';
    arg_runtime := var_role_limit ->> 'runtime';
    arg_run_runtime := var_role_limit ->> 'run_runtime';
    arg_max_concurrent := CAST(var_role_limit ->> 'max_concurrent' AS BIGINT);
    arg_stagger := COALESCE(CAST(var_role_limit ->> 'stagger' AS DOUBLE PRECISION), 0);
    IF CAST(var_role_limit ->> 'node_scope' AS BOOLEAN) THEN
        arg_role_node := arg_node;
    END IF;
    -- ClaimLimits.pools_of: the role's pool, then the task's, those limited, each once.
    IF var_pool_limits ? arg_role_pool THEN
        arg_pool_a := arg_role_pool;
    END IF;
    IF var_pool_limits ? var_task.pool AND var_task.pool IS DISTINCT FROM arg_pool_a THEN
        IF arg_pool_a IS NULL THEN
            arg_pool_a := var_task.pool;
        ELSE
            arg_pool_b := var_task.pool;
        END IF;
    END IF;
    arg_pool_a_capacity := CAST(var_pool_limits -> arg_pool_a ->> 'capacity' AS BIGINT);
    arg_pool_b_capacity := CAST(var_pool_limits -> arg_pool_b ->> 'capacity' AS BIGINT);
    IF CAST(var_pool_limits -> arg_pool_a ->> 'node_scope' AS BOOLEAN) THEN
        arg_pool_a_node := arg_node;
    END IF;
    IF CAST(var_pool_limits -> arg_pool_b ->> 'node_scope' AS BOOLEAN) THEN
        arg_pool_b_node := arg_node;
    END IF;
    -- ClaimLimits.crosses_nodes: a role limited cluster-wide, or a pool counted so.
    IF CAST(var_role_limit ->> 'crosses_nodes' AS BOOLEAN)
       OR (arg_pool_a IS NOT NULL AND arg_pool_a_node IS NULL)
       OR (arg_pool_b IS NOT NULL AND arg_pool_b_node IS NULL) THEN
        PERFORM pg_advisory_xact_lock(1953001060, 1);  -- limits_lock
    END IF;
    arg_event := CAST(CAST(arg_event AS JSONB)
                      || jsonb_build_object('task_id', var_task.id, 'role', var_task.role)
                      AS TEXT);
    FOR var_claim IN {claim_if_room} LOOP
        EXIT;
    END LOOP;
    IF var_claim.id IS NOT NULL AND arg_token_sha256 IS NOT NULL THEN
        arg_run_id := var_claim.id;
        {note_run_credential};
        var_claim.credential_sha256 := arg_token_sha256;  -- the run as now stored
    END IF;
    IF var_claim.id IS NOT NULL AND arg_inbox_messages IS NOT NULL THEN
        arg_task_address := arg_task_address_prefix || var_task.id;
        FOR var_message IN {deliver_claim_inbox} LOOP
            var_messages := var_messages || to_jsonb(var_message);
        END LOOP;
    END IF;
    RETURN jsonb_build_object(
        'task', to_jsonb(var_task), 'role', arg_role, 'pool_a', arg_pool_a,
        'pool_b', arg_pool_b, 'claim', to_jsonb(var_claim), 'messages', var_messages);
END
$function$;

-- name: claim_within_call
-- claim_within_function called, by this connection (its temporary schema is pg_temp).
SELECT pg_temp.taskherd_claim_within(
    :now, :node, :lease_until, :roles, :full_pools, :any_role, :role_limits, :pool_limits,
    :event, :task_address_prefix, :inbox_messages, :inbox_bytes, :token_sha256) AS claimed;
