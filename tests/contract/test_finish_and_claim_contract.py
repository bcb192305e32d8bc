"""A run's end and the node's next claim together (`Store.finish_run_and_claim`): the end
stands whatever the claim meets, an end refused claims nothing, and on SQLite the two are
one commit."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

import pytest

from taskherd.model import EventKind, NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits, RoleLimit
from taskherd.store import StoreError
from taskherd.store.sqlite import SQLiteStore
from tests.integration.test_grouped_writes import wal_commits

NOW = 1_800_000_000.0
LEASE = 60.0
POLICY = RetryPolicy()
DONE = RunResult(Outcome.SUCCEEDED, summary="ok")


def add(store, title, role="coder"):
    return store.enqueue(NewTask(role=role, title=title), NOW).task


def running(store, request=None):
    """A run of the first ready task, its agent started."""
    claim = store.claim(request or ClaimRequest("n1", NOW, LEASE))
    store.mark_spawned(claim.run.id, NOW, LEASE, pid=4242, pid_started_at=NOW, log_path="l")
    return claim.run


def next_claim(now=NOW + 1, **asked):
    return ClaimRequest("n1", now, LEASE, **asked)


def state_of(store, task_id):
    return store.get_task(task_id).state


def heard(store, work):
    """The events of `work()` as a listener hears them, up to a task added after it."""

    async def listen():
        async with store.listen() as events:
            answer = work()
            sentinel = add(store, "sentinel")
            kinds = []
            while (event := await asyncio.wait_for(anext(events), 10)).task_id != sentinel.id:
                kinds.append((event.kind, event.task_id, event.run_id, event.state))
            return answer, kinds

    return asyncio.run(listen())


def test_the_end_and_the_next_claim_land_together_their_events_told_once(store):
    first, second = add(store, "first"), add(store, "second")
    run = running(store)
    if isinstance(store, SQLiteStore):
        store.checkpoint(truncate=True)  # an empty WAL: its commits from here counted
        before = wal_commits(store.path)
    (finished, attempt), events = heard(store, lambda: store.finish_run_and_claim(
        run.id, DONE, POLICY, NOW + 1, next_claim()))
    if isinstance(store, SQLiteStore):
        assert wal_commits(store.path) - before == 1 + 1  # the two together, then the sentinel
    assert finished.moved and finished.task.state is TaskState.COMPLETED
    assert store.get_run(run.id).outcome is Outcome.SUCCEEDED
    claim = attempt.claim
    assert claim.task.id == second.id and claim.run.ended_at is None
    assert state_of(store, second.id) is TaskState.CLAIMED
    assert events == [
        (EventKind.RUN_ENDED, first.id, run.id, None),
        (EventKind.TASK_CHANGED, first.id, None, TaskState.COMPLETED),
        (EventKind.TASK_CHANGED, second.id, claim.run.id, TaskState.CLAIMED),
    ]


def test_with_nothing_ready_the_end_is_answered_with_no_claim(store):
    first = add(store, "only")
    run = running(store)
    finished, attempt = store.finish_run_and_claim(run.id, DONE, POLICY, NOW + 1, next_claim())
    assert attempt.claim is None and attempt.refused == ()
    assert state_of(store, first.id) is TaskState.COMPLETED


@contextlib.contextmanager
def runs_refused(store):
    """A new run refused by the database as a full disk is (a trigger on `runs`)."""
    if isinstance(store, SQLiteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            db.execute("CREATE TRIGGER no_room BEFORE INSERT ON runs "
                       "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
        yield
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            db.execute("DROP TRIGGER no_room")
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as db:
        db.execute("CREATE FUNCTION no_room() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                   "RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full'; "
                   "END $$")
        db.execute("CREATE TRIGGER no_room BEFORE INSERT ON runs "
                   "FOR EACH ROW EXECUTE FUNCTION no_room()")
        yield
        db.execute("DROP TRIGGER no_room ON runs")


@pytest.mark.parametrize("limited", [False, True], ids=["no limits", "within limits"])
def test_a_claim_the_store_cannot_make_leaves_the_end_standing_and_nothing_else(store, limited):
    first, second = add(store, "first"), add(store, "second")
    asked = {"roles": ["coder"], "limits": ClaimLimits({"coder": RoleLimit(max_concurrent=2)}),
             "runtime_of": {"coder": "command"}} if limited else {}
    run = running(store)
    with runs_refused(store):
        (finished, attempt), events = heard(store, lambda: store.finish_run_and_claim(
            run.id, DONE, POLICY, NOW + 1, next_claim(**asked)))
    assert attempt.claim is None
    assert finished.task.state is TaskState.COMPLETED
    assert store.get_run(run.id).outcome is Outcome.SUCCEEDED
    assert state_of(store, first.id) is TaskState.COMPLETED
    assert state_of(store, second.id) is TaskState.READY
    assert store.runs_of_task(second.id) == []
    assert [kind for kind, *_ in events] == [EventKind.RUN_ENDED, EventKind.TASK_CHANGED]
    assert store.claim(next_claim(NOW + 2, **asked)).task.id == second.id  # it serves on


def test_a_claim_that_fails_otherwise_is_raised_once_the_end_is_committed(store, monkeypatch):
    first, second = add(store, "first"), add(store, "second")
    run = running(store)

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the claim's last step")

    monkeypatch.setattr(store, "_claimed", broken)  # after the claim's writes
    with pytest.raises(RuntimeError, match="a bug"):
        store.finish_run_and_claim(run.id, DONE, POLICY, NOW + 1, next_claim())
    monkeypatch.undo()
    assert store.get_run(run.id).outcome is Outcome.SUCCEEDED  # its record is not lost
    assert state_of(store, first.id) is TaskState.COMPLETED
    assert state_of(store, second.id) is TaskState.READY
    assert store.runs_of_task(second.id) == []


def test_an_end_the_store_refuses_raises_and_claims_nothing(store):
    add(store, "first")
    second = add(store, "second")
    run = running(store)
    store.finish_run(run.id, DONE, POLICY, NOW + 1)
    with pytest.raises(StoreError, match="already ended"):
        store.finish_run_and_claim(run.id, DONE, POLICY, NOW + 2, next_claim(NOW + 2))
    assert state_of(store, second.id) is TaskState.READY
    assert store.runs_of_task(second.id) == []


def test_within_limits_a_refused_candidate_is_passed_by_for_the_next(store):
    limits = ClaimLimits({"deployer": RoleLimit(max_concurrent=1)})
    asked = {"roles": ["deployer", "coder"], "limits": limits,
             "runtime_of": {"deployer": "command", "coder": "command"}}
    ending = add(store, "ends now")
    deploying = add(store, "deploy 1", role="deployer")
    waiting = add(store, "deploy 2", role="deployer")
    coding = add(store, "code", role="coder")
    run = running(store, next_claim(NOW, **asked))
    assert running(store, next_claim(NOW, **asked)).task_id == deploying.id
    _, attempt = store.finish_run_and_claim(run.id, DONE, POLICY, NOW + 1,
                                            next_claim(**asked))
    assert run.task_id == ending.id
    assert attempt.claim.task.id == coding.id and attempt.claim.run.role == "coder"
    assert [refusal.role for refusal in attempt.refused] == ["deployer"]
    assert state_of(store, waiting.id) is TaskState.READY
