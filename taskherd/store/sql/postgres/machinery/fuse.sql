-- A run's end and the node's next claim in one call (PostgresStore.finish_run_and_claim; the
-- store's default, and SQLite, make them one after the other).

-- name: finish_and_claim_procedure
-- finish_run_procedure, then claim_within_function's first candidate, in one round trip: the
-- daemon ends a run and claims for the slot it freed once a cycle, and the two calls were two
-- round trips, each one a loaded server makes the node wait for. Created once per connection
-- in its temporary schema beside the two it calls (a CALL inside a procedure may commit).
-- The run's end commits first, durably (the connection's synchronous_commit): the claim
-- after it does not wait for the disk, and the end must not lose that wait. The claim then
-- runs in the transaction that sends the end's events, which does not wait for the disk
-- either (event_without_flush), so the end's events, the claim and its event commit together
-- and a listener reads them in the steps' order. The claim is a block of its own (a
-- savepoint): when it fails (another node held the claims' lock past lock_timeout or
-- statement_timeout, the server's disk filled) it alone is rolled back, the end and its
-- events stand, and the answer says why (its SQLSTATE and message), for the store to answer
-- it as no claim.
-- The answer: `finished`, finish_run_procedure's (NULL when it wrote nothing: the end and
-- then the claim take the steps), and `claimed`, claim_within_function's (absent when the end
-- took the steps), or `claim_error` and `claim_message`.
-- Each argument is the one of the call it goes to; `claim_now` is the claim's own `now`.
CREATE OR REPLACE PROCEDURE pg_temp.taskherd_finish_and_claim(
    arg_run_id BIGINT, arg_now DOUBLE PRECISION, arg_outcome TEXT, arg_exit_code BIGINT,
    arg_summary TEXT, arg_error TEXT, arg_error_tail TEXT, arg_cost_usd DOUBLE PRECISION,
    arg_input_tokens BIGINT, arg_output_tokens BIGINT, arg_turns BIGINT, arg_session_id TEXT,
    arg_state TEXT, arg_run_after DOUBLE PRECISION, arg_strike BIGINT, arg_rescue BIGINT,
    arg_rate_limit BIGINT, arg_reason TEXT, arg_slow_roles TEXT, arg_slow_meta TEXT,
    arg_run_ended TEXT, arg_task_changed TEXT,
    arg_claim_now DOUBLE PRECISION, arg_node TEXT, arg_lease_until DOUBLE PRECISION,
    arg_roles TEXT, arg_full_pools TEXT, arg_any_role TEXT, arg_role_limits TEXT,
    arg_pool_limits TEXT, arg_event TEXT, arg_task_address_prefix TEXT,
    arg_inbox_messages BIGINT, arg_inbox_bytes BIGINT, arg_token_sha256 TEXT,
    INOUT answer JSONB DEFAULT NULL)
LANGUAGE plpgsql AS $procedure$
DECLARE
    var_finished JSONB;
BEGIN
    CALL pg_temp.taskherd_finish_run(
        arg_run_id, arg_now, arg_outcome, arg_exit_code, arg_summary, arg_error,
        arg_error_tail, arg_cost_usd, arg_input_tokens, arg_output_tokens, arg_turns,
        arg_session_id, arg_state, arg_run_after, arg_strike, arg_rescue, arg_rate_limit,
        arg_reason, arg_slow_roles, arg_slow_meta, arg_run_ended, arg_task_changed,
        var_finished);
    answer := jsonb_build_object('finished', var_finished);
    IF var_finished IS NULL THEN
        RETURN;  -- nothing written: the steps end the run, then the claim is made
    END IF;
    BEGIN
        answer := answer || jsonb_build_object('claimed', pg_temp.taskherd_claim_within(
            arg_claim_now, arg_node, arg_lease_until, arg_roles, arg_full_pools, arg_any_role,
            arg_role_limits, arg_pool_limits, arg_event, arg_task_address_prefix,
            arg_inbox_messages, arg_inbox_bytes, arg_token_sha256));
    -- OTHERS leaves out query_canceled: a statement_timeout met by the claim (the claims'
    -- lock held long by another node) is the claim's fault alone, as a lock_timeout is.
    EXCEPTION WHEN query_canceled OR OTHERS THEN
        answer := answer || jsonb_build_object('claim_error', SQLSTATE,
                                               'claim_message', SQLERRM);
    END;
END
$procedure$;

-- name: finish_and_claim_call
-- finish_and_claim_procedure called, by this connection (its temporary schema is pg_temp).
CALL pg_temp.taskherd_finish_and_claim(
    :run_id, :now, :outcome, :exit_code, :summary, :error, :error_tail, :cost_usd,
    :input_tokens, :output_tokens, :turns, :session_id, :state, :run_after, :strike, :rescue,
    :rate_limit, :reason, :slow_roles, :slow_meta, :run_ended, :task_changed,
    :claim_now, :node, :lease_until, :roles, :full_pools, :any_role, :role_limits,
    :pool_limits, :event, :task_address_prefix, :inbox_messages, :inbox_bytes, :token_sha256,
    NULL);
