-- An enqueue in one call (PostgresStore.enqueue; SQLite, and an enqueue that counts a run's
-- spawns or notes an agent's request, run the steps of SQLTasks.enqueue).

-- name: enqueue_procedure
-- insert_task, its durable COMMIT and then its event in one round trip: the steps took two
-- (the BEGIN with the INSERT, then the COMMIT with the event), and an agent or a script
-- adds its tasks one at a time. Created once per connection in its temporary schema beside
-- claim_within_function and finish_run_procedure, from insert_task (each `:x` is `arg_x`);
-- the call is made outside any transaction, and the event is sent in a transaction of its
-- own that does not wait for the disk, as finish_run_procedure's are (PostgresStore._commit
-- says why). A duplicate of an open task adds nothing and answers NULL: the steps find the
-- open one. The answer is the task as added. :event is the task_added event as the store
-- emits it but for the task's id, which the database adds.
CREATE OR REPLACE PROCEDURE pg_temp.taskherd_enqueue(
    arg_role TEXT, arg_title TEXT, arg_prompt TEXT, arg_priority BIGINT, arg_state TEXT,
    arg_pool TEXT, arg_dedup_key TEXT, arg_review BIGINT, arg_max_attempts BIGINT,
    arg_run_after DOUBLE PRECISION, arg_parent_id BIGINT, arg_meta TEXT,
    arg_now DOUBLE PRECISION, arg_chain TEXT, arg_event TEXT, INOUT answer JSONB DEFAULT NULL)
LANGUAGE plpgsql AS $procedure$
DECLARE
    var_task RECORD;
BEGIN
    answer := NULL;
    FOR var_task IN {insert_task} LOOP
        EXIT;
    END LOOP;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    answer := to_jsonb(var_task);
    COMMIT;
    PERFORM set_config('synchronous_commit', 'off', true);  -- event_without_flush
    PERFORM pg_notify('taskherd_events', CAST(
        CAST(arg_event AS JSONB) || jsonb_build_object('task_id', var_task.id) AS TEXT));
END
$procedure$;

-- name: enqueue_call
-- enqueue_procedure called, by this connection (its temporary schema is pg_temp).
CALL pg_temp.taskherd_enqueue(
    :role, :title, :prompt, :priority, :state, :pool, :dedup_key, :review, :max_attempts,
    :run_after, :parent_id, :meta, :now, :chain, :event, NULL);
