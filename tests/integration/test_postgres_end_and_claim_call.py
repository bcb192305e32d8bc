"""On PostgreSQL a run's end and the node's next claim are one call of the connection's
finish_and_claim_procedure: one round trip where finish_run and attempt_claim took two. The
run's end stands when the claim after it fails. The contract itself (what is ended, claimed
and told) is tests/contract/test_finish_and_claim_contract.py's."""

from __future__ import annotations

import logging

import psycopg
import pytest

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits, PoolLimit, RoleLimit
from taskherd.store.postgres import PostgresStore
from tests.integration.test_postgres_round_trips import round_trips

NOW = 1_700_000_000.0
# Counted across nodes, so the claim takes the claims' lock (limits_lock).
LIMITS = ClaimLimits({"coder": RoleLimit(max_concurrent=8, pool="cpu")}, {"cpu": PoolLimit(8)})
LIMITS_LOCK = "SELECT pg_advisory_lock(1953001060, 1)"  # machinery/store.sql's limits_lock
DONE = RunResult(Outcome.SUCCEEDED, summary="done")


def request(now=NOW):
    return ClaimRequest("node-a", now, 60.0, roles=["coder"], limits=LIMITS,
                        runtime_of={"coder": "claude"}, credential=f"token-{now}")


def end_and_claim(store, run_id, now):
    return store.finish_run_and_claim(run_id, DONE, RetryPolicy(), now, request(now))


def test_a_runs_end_and_the_next_claim_are_one_round_trip(monkeypatch, pg_url):
    with PostgresStore(pg_url, durability="full") as store:
        for title in ("warm 1", "warm 2", "next"):
            store.enqueue(NewTask(role="coder", title=title), NOW)
        run = store.claim(request()).run
        run = end_and_claim(store, run.id, NOW + 1)[1].claim.run  # the first call makes it
        answers = []
        assert round_trips(monkeypatch, lambda: answers.append(
            end_and_claim(store, run.id, NOW + 2))) == 1
        [(finished, attempt)] = answers
        assert (finished.run.id, finished.task.state) == (run.id, TaskState.COMPLETED)
        assert finished.run == store.get_run(run.id)
        assert attempt.claim.task.title == "next"
        assert attempt.claim.run == store.get_run(attempt.claim.run.id)


# A connection that waits at most so long for a lock, or for a statement (milliseconds; the
# statement's long enough that the run's end, before the lock, meets it on a loaded machine
# only when something is wrong).
TIMEOUTS = {"lock_timeout": 50, "statement_timeout": 1000}


@pytest.mark.parametrize("timeout", TIMEOUTS)
def test_a_claim_that_fails_after_the_end_leaves_the_end_committed(pg_url, caplog, timeout):
    """Another node holds the claims' lock past this connection's lock_timeout (or its
    statement_timeout): the claim fails for the store's reasons, and is answered as none; the
    run's end, committed before it, stands."""
    with PostgresStore(pg_url, durability="full") as store:
        for title in ("work", "next"):
            store.enqueue(NewTask(role="coder", title=title), NOW)
        running = store.claim(request())
    impatient = f"{pg_url}?options=-c%20{timeout}%3D{TIMEOUTS[timeout]}"
    with PostgresStore(impatient, durability="full") as store, \
            psycopg.connect(pg_url, autocommit=True) as other_node, \
            caplog.at_level(logging.WARNING, logger="taskherd.store"):
        other_node.execute(LIMITS_LOCK)
        finished, attempt = end_and_claim(store, running.run.id, NOW + 1)
        other_node.execute("SELECT pg_advisory_unlock_all()")
    assert attempt.claim is None
    assert f"the claim after run {running.run.id} ended was not made" in caplog.text
    assert "timeout" in caplog.text  # the server's words
    with PostgresStore(pg_url, durability="full") as store:
        assert finished.run == store.get_run(running.run.id)
        assert finished.task == store.get_task(running.task.id)
        assert finished.task.state is TaskState.COMPLETED
        assert store.open_runs() == []
        assert [task.title for task in store.list_tasks(state=TaskState.READY)] == ["next"]
        assert store.claim(request(NOW + 2)).task.title == "next"  # the node's next pass


def test_a_role_that_may_not_create_the_procedure_ends_the_run_then_claims(pg_server, pg_url):
    PostgresStore(pg_url, durability="normal").close()  # migrated by the database's owner
    with PostgresStore(pg_server.url_without_temporary(pg_url), durability="full") as store:
        for title in ("work", "next"):
            store.enqueue(NewTask(role="coder", title=title), NOW)
        running = store.claim(request())
        finished, attempt = end_and_claim(store, running.run.id, NOW + 1)
        assert finished.task == store.get_task(running.task.id)
        assert finished.task.state is TaskState.COMPLETED
        assert attempt.claim.task.title == "next"
        assert attempt.claim.run == store.get_run(attempt.claim.run.id)


# Where the WAL stood at each run's end (its UPDATE, written before its COMMIT's record).
END_LSN = """
CREATE TABLE end_lsn (run_id bigint, lsn pg_lsn);
CREATE FUNCTION note_end() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    INSERT INTO end_lsn VALUES (new.id, pg_current_wal_insert_lsn());
    RETURN new;
END $$;
CREATE TRIGGER note_end AFTER UPDATE OF ended_at ON runs
FOR EACH ROW EXECUTE FUNCTION note_end();
"""


def test_the_runs_end_is_on_the_disk_when_the_call_answers(pg_url):
    """durability full: the end's COMMIT waits for its WAL's flush before the claim, whose
    own commit does not (a claim alone does not). Read from the server's flush position as
    the call answers: past the end's record (an end committed without waiting is found
    behind it, unless the WAL writer flushed it in the meantime)."""
    with PostgresStore(pg_url, durability="full") as store, \
            psycopg.connect(pg_url, autocommit=True) as server:
        for title in ("work", "next", "last"):
            store.enqueue(NewTask(role="coder", title=title), NOW)
        server.execute(END_LSN)
        run = store.claim(request()).run
        for now in (NOW + 1, NOW + 2):
            ended = run.id
            run = end_and_claim(store, ended, now)[1].claim.run
            flushed = server.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
            ended_at = server.execute("SELECT lsn FROM end_lsn WHERE run_id = %s",
                                      (ended,)).fetchone()[0]
            assert ended_at < flushed, f"run {ended}'s end at {ended_at}, flushed {flushed}"
