"""A run's end and the node's next claim together (`Store.finish_run_and_claim`), as the
daemon makes them when a run frees a slot: the end stands as finish_run's would, whatever the
claim meets; the claim is attempt_claim's (within limits: the refusals on the way, then the
next candidate); an end refused claims nothing; a listener hears what the two calls one after
the other tell; and on SQLite the two are one commit. PostgreSQL makes both in one call; its
round trips and faults are tests/integration/test_postgres_end_and_claim_call.py's."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

import pytest

from taskherd.model import EventKind, NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import FollowUp, RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits, RoleLimit
from taskherd.store import RunNotFound, StoreError
from taskherd.store.sqlite import SQLiteStore
from tests.integration.test_grouped_writes import wal_commits

NOW = 1_800_000_000.0
LEASE = 60.0
POLICY = RetryPolicy()
DONE = RunResult(Outcome.SUCCEEDED, summary="ok")


def add(store, title, role="coder", **fields):
    return store.enqueue(NewTask(role=role, title=title, **fields), NOW).task


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


@pytest.mark.parametrize("refused", ["already ended", "unknown run"])
def test_an_end_the_store_refuses_raises_and_claims_nothing(store, refused):
    add(store, "first")
    second = add(store, "second")
    run = running(store)
    run_id, error = run.id, StoreError
    if refused == "already ended":
        store.finish_run(run.id, DONE, POLICY, NOW + 1)
    else:
        run_id, error = 999_999, RunNotFound
    with pytest.raises(error, match=refused if refused == "already ended" else None):
        store.finish_run_and_claim(run_id, DONE, POLICY, NOW + 2, next_claim(NOW + 2))
    assert state_of(store, second.id) is TaskState.READY
    assert store.runs_of_task(second.id) == []


# -- as the daemon asks: its roles within their limits, counted across nodes ----------------

LIMITS = ClaimLimits({"deployer": RoleLimit(max_concurrent=1), "coder": RoleLimit()})
ROLES = ["deployer", "coder"]


def within_limits(node="n1", now=NOW + 1, **fields):
    return ClaimRequest(node, now, LEASE, roles=ROLES, limits=LIMITS,
                        runtime_of={role: "command" for role in ROLES}, **fields)


@pytest.fixture
def other(reopen):
    second = reopen()
    yield second
    second.close()


def test_the_run_ends_as_finish_run_ends_it_and_the_next_task_is_claimed(store):
    first, second = add(store, "fix 1"), add(store, "fix 2")
    running = store.claim(within_limits(now=NOW))
    secret = "secret-of-the-next-claims-credential"
    finished, attempt = store.finish_run_and_claim(running.run.id, DONE, POLICY,
                                                   NOW + 1, within_limits(credential=secret))
    assert finished.moved
    assert finished.run == store.get_run(running.run.id)
    assert (finished.run.outcome, finished.run.ended_at) == (Outcome.SUCCEEDED, NOW + 1)
    assert finished.task == store.get_task(first.id)
    assert (finished.task.state, finished.task.summary) == (TaskState.COMPLETED, "ok")
    claim = attempt.claim
    assert (claim.task.id, claim.task.state, claim.task.lease_node) == (
        second.id, TaskState.CLAIMED, "n1")
    assert claim.task == store.get_task(second.id)
    assert claim.run == store.get_run(claim.run.id)
    assert (claim.run.node, claim.run.claimed_at) == ("n1", NOW + 1)
    assert claim.credential == f"{claim.run.id}.{secret}"  # the token names its run
    assert store.run_of_credential(claim.credential).id == claim.run.id
    assert attempt.refused == ()


def test_within_limits_the_refusals_come_back_and_the_next_candidate_is_claimed(store, other):
    add(store, "deploy 1", role="deployer")
    add(store, "fix 1")
    waiting = add(store, "deploy 2", role="deployer")
    fix = add(store, "fix 2")
    assert other.claim(within_limits("node-b", now=NOW)).task.title == "deploy 1"
    running = store.claim(within_limits(now=NOW))
    assert running.task.title == "fix 1"
    finished, attempt = store.finish_run_and_claim(running.run.id, DONE, POLICY,
                                                   NOW + 1, within_limits())
    assert finished.task.state is TaskState.COMPLETED
    assert attempt.claim.task.id == fix.id  # deploy 2 waits for deploy 1's place
    [refused] = attempt.refused
    assert refused.role == "deployer"
    assert "max_concurrent 1 (1 running)" in refused.reason
    assert state_of(store, waiting.id) is TaskState.READY


def test_with_no_task_ready_the_run_still_ends(store):
    task = add(store, "fix")
    running = store.claim(within_limits(now=NOW))
    finished, attempt = store.finish_run_and_claim(
        running.run.id, RunResult(Outcome.FAILED, exit_code=1, error="boom"), POLICY,
        NOW + 1, within_limits())
    assert (attempt.claim, attempt.refused) == (None, ())
    assert finished.task == store.get_task(task.id)
    assert finished.task.state is TaskState.READY  # to be tried again, after its backoff
    assert finished.run.outcome is Outcome.FAILED


def test_a_run_end_that_sets_off_a_chain_is_made_and_then_the_claim(store):
    chained = add(store, "fix", chain=(FollowUp(role="qa", title="check {parent_title}"),))
    later = add(store, "fix later")
    running = store.claim(within_limits(now=NOW))
    finished, attempt = store.finish_run_and_claim(running.run.id, DONE, POLICY,
                                                   NOW + 1, within_limits())
    assert finished.task == store.get_task(chained.id)
    assert [child.title for child in store.children_of(chained.id)] == ["check fix"]
    assert attempt.claim.task.id == later.id
