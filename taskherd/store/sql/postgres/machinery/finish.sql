-- A run's end and its task's settle in one call (PostgresStore.finish_run; SQLite, and a
-- settle that sets off more, run the steps of SQLRuns._finish one by one).

-- name: finish_run_procedure
-- end_run and settle_task as one call, its durable COMMIT and then its events in one round
-- trip: the steps took three (the end and the task's read; the settle and the worktree's
-- read; the COMMIT with the events), and the client's work between them, for each of the
-- runs a fleet ends. Created once per connection in its temporary schema, as
-- claim_within_function is, from the blocks it names in braces (each `:x` is `arg_x`).
-- A procedure, not a function: it commits on the server (the call is made outside any
-- transaction), then sends the events in a transaction of their own that does not wait for
-- the disk, as PostgresStore._commit does: a NOTIFY in the durable commit holds the server's
-- notify lock through its flush, and every node's notifying commit waits behind it.
-- Only a settle that sets off nothing beyond itself is made here: Python gives the
-- settlement (policy/queue.py's plain_settlement), so the task must await no review, have no
-- chain of its own, belong to none of :slow_roles (a reviewer or a chain in the workflow),
-- name none of :slow_meta in its meta (its reviewed task, delivery targets; both are JSON
-- arrays) and have no active worktree (a completion waits in `merging`). Anything else, an
-- unknown run or one ended meanwhile, answers NULL before anything is written, and the store
-- takes the steps.
-- The answer: the run as ended, the task as settled (as read, and `moved` false, when a
-- person moved it meanwhile or a newer run holds it: settle_task's guards).
-- :run_ended and :task_changed are the events as the store emits them, but for what the
-- database adds: the ids, roles, runtime and state.
CREATE OR REPLACE PROCEDURE pg_temp.taskherd_finish_run(
    arg_run_id BIGINT, arg_now DOUBLE PRECISION, arg_outcome TEXT, arg_exit_code BIGINT,
    arg_summary TEXT, arg_error TEXT, arg_error_tail TEXT, arg_cost_usd DOUBLE PRECISION,
    arg_input_tokens BIGINT, arg_output_tokens BIGINT, arg_turns BIGINT, arg_session_id TEXT,
    arg_state TEXT, arg_run_after DOUBLE PRECISION, arg_strike BIGINT, arg_rescue BIGINT,
    arg_rate_limit BIGINT, arg_reason TEXT, arg_slow_roles TEXT, arg_slow_meta TEXT,
    arg_run_ended TEXT, arg_task_changed TEXT, INOUT answer JSONB DEFAULT NULL)
LANGUAGE plpgsql AS $procedure$
DECLARE
    var_task RECORD;
    var_run RECORD;
    var_settled RECORD;
    var_moved BOOLEAN;
    arg_task_id BIGINT;
    arg_last_error TEXT := arg_error;
BEGIN
    answer := NULL;
    FOR var_task IN {task_of_run} LOOP
        EXIT;
    END LOOP;
    IF NOT FOUND THEN
        RETURN;  -- no such run: the steps name it
    END IF;
    IF var_task.review <> 0 OR coalesce(var_task.chain, '') <> ''
       OR CAST(arg_slow_roles AS JSONB) ? var_task.role
       -- In parentheses: the IF's condition would end at the CASE's THEN.
       OR (CASE WHEN var_task.meta IN ('', '{}') THEN false
                ELSE CAST(var_task.meta AS JSONB) ?| ARRAY(
                    SELECT jsonb_array_elements_text(CAST(arg_slow_meta AS JSONB))) END)
       OR EXISTS (SELECT 1 FROM worktrees
                  WHERE worktrees.task_id = var_task.id AND worktrees.state = 'active') THEN
        RETURN;
    END IF;
    arg_task_id := var_task.id;
    FOR var_run IN {end_run} LOOP
        EXIT;
    END LOOP;
    IF NOT FOUND THEN
        RETURN;  -- ended meanwhile: the steps say so
    END IF;
    FOR var_settled IN {settle_task} LOOP
        EXIT;
    END LOOP;
    var_moved := FOUND;
    answer := jsonb_build_object(
        'run', to_jsonb(var_run), 'moved', var_moved,
        'task', CASE WHEN var_moved THEN to_jsonb(var_settled) ELSE to_jsonb(var_task) END);
    COMMIT;
    PERFORM set_config('synchronous_commit', 'off', true);  -- event_without_flush
    PERFORM pg_notify('taskherd_events', CAST(jsonb_strip_nulls(
        CAST(arg_run_ended AS JSONB) || jsonb_build_object(
            'task_id', var_run.task_id, 'run_id', var_run.id, 'role', var_run.role,
            'runtime', var_run.runtime)) AS TEXT));
    IF var_moved THEN
        PERFORM pg_notify('taskherd_events', CAST(
            CAST(arg_task_changed AS JSONB) || jsonb_build_object(
                'task_id', var_settled.id, 'state', var_settled.state,
                'role', var_settled.role) AS TEXT));
    END IF;
END
$procedure$;

-- name: finish_run_call
-- finish_run_procedure called, by this connection (its temporary schema is pg_temp).
CALL pg_temp.taskherd_finish_run(
    :run_id, :now, :outcome, :exit_code, :summary, :error, :error_tail, :cost_usd,
    :input_tokens, :output_tokens, :turns, :session_id, :state, :run_after, :strike, :rescue,
    :rate_limit, :reason, :slow_roles, :slow_meta, :run_ended, :task_changed, NULL);
