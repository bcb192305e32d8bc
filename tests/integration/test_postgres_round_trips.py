"""On PostgreSQL what an enqueue and a run's end send: no read of what was just written, and
statements that do not wait on each other's answers go together (each round trip one a
loaded server makes the caller wait for)."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
import pytest

from taskherd.model import Event, EventKind, NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import FollowUp, RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.chains import RoleFlow, Workflow
from taskherd.policy.limits import ClaimLimits
from taskherd.store.postgres import PostgresStore

NOW = 1_700_000_000.0


def first_words(monkeypatch, store, act):
    """The first word of each statement `act` sends through the store's connection."""
    sent: list[str] = []
    execute = psycopg.Connection.execute

    def counting(self, query, params=None, **kwargs):
        text = query if isinstance(query, str) else query.as_string(self)
        sent.append(text.split(None, 1)[0].rstrip(";").upper())
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    act()
    monkeypatch.undo()
    return sent


def round_trips(monkeypatch, act) -> int:
    """The exchanges `act` makes with the server: a statement sent alone, or a pipeline."""
    trips = [0]
    execute, pipeline = psycopg.Connection.execute, psycopg.Connection.pipeline

    def counting(self, query, params=None, **kwargs):
        if self.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF:
            trips[0] += 1
        return execute(self, query, params, **kwargs)

    @contextlib.contextmanager
    def piped(self):
        outermost = self.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
        with pipeline(self) as p:
            yield p
        trips[0] += outermost

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    monkeypatch.setattr(psycopg.Connection, "pipeline", piped)
    act()
    monkeypatch.undo()
    return trips[0]


def test_an_enqueue_is_one_call_with_no_read_back(monkeypatch, pg_url):
    """The INSERT, the COMMIT and the event: one call of the connection's enqueue_procedure
    (the steps took two round trips: the BEGIN with the INSERT, the COMMIT with the event)."""
    with PostgresStore(pg_url, durability="normal") as store:
        store.enqueue(NewTask(role="coder", title="warm"), NOW)  # the first one prepares
        answers = []
        sent = first_words(monkeypatch, store, lambda: answers.append(
            store.enqueue(NewTask(role="coder", title="fix", priority=2), NOW)))
        assert sent == ["CALL"]
        assert round_trips(monkeypatch, lambda: store.enqueue(NewTask(role="coder", title="x"),
                                                              NOW)) == 1
        added = answers[0].task
        assert added == store.get_task(added.id)  # the row the INSERT returned is the task
        assert (added.title, added.priority, answers[0].created) == ("fix", 2, True)


def test_an_enqueue_in_one_call_tells_what_the_steps_tell(pg_url):
    with PostgresStore(pg_url, durability="normal") as store:
        async def heard() -> tuple[Event, int]:
            async with store.listen() as events:
                added = await asyncio.to_thread(store.enqueue, NewTask(role="qa", title="x",
                                                                        pending=True), NOW)
                return await asyncio.wait_for(anext(events), 20.0), added.task.id

        event, task_id = asyncio.run(heard())
        assert event == Event(EventKind.TASK_ADDED, NOW, task_id=task_id,
                              state=TaskState.PENDING, role="qa")


def test_a_duplicate_of_an_open_task_takes_the_steps_and_adds_nothing(pg_url):
    with PostgresStore(pg_url, durability="normal") as store:
        first = store.enqueue(NewTask(role="coder", title="fix", dedup_key="k"), NOW)
        again = store.enqueue(NewTask(role="coder", title="fix again", dedup_key="k"), NOW)
        assert (first.created, again.created) == (True, False)
        assert again.task == first.task
        assert [task.title for task in store.list_tasks()] == ["fix"]


def claimed(store, role="coder"):
    """A claim's run, finished by the function returned (its first call prepares)."""
    claim = store.claim(ClaimRequest("node-a", NOW, 60.0, roles=[role], limits=ClaimLimits(),
                                     runtime="claude"))
    return claim, lambda: store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED,
                                                                   summary="done"),
                                           RetryPolicy(), NOW)


def test_a_runs_end_is_one_round_trip(monkeypatch, pg_url):
    """The run's end, the task's settle, the commit and the events: one call of the
    connection's finish_run_procedure (the steps took three round trips)."""
    with PostgresStore(pg_url, durability="normal") as store:
        for title in ("warm", "work"):
            store.enqueue(NewTask(role="coder", title=title), NOW)
        claimed(store)[1]()
        claim, finish = claimed(store)
        answers = []
        assert round_trips(monkeypatch, lambda: answers.append(finish())) == 1
        [finished] = answers
        assert finished.moved
        assert finished.task == store.get_task(claim.task.id)
        assert finished.run == store.get_run(claim.run.id)
        assert (finished.task.state.value, finished.task.summary) == ("completed", "done")
        assert (finished.run.outcome.value, finished.run.ended_at) == ("succeeded", NOW)


def test_a_runs_end_in_one_call_tells_what_the_steps_tell(pg_url):
    """Its events, as a listener on another connection reads them, are the steps' own."""
    with PostgresStore(pg_url, durability="normal") as store:
        store.enqueue(NewTask(role="coder", title="work"), NOW)
        claim, finish = claimed(store)

        async def heard() -> list[Event]:
            async with store.listen() as events:
                await asyncio.to_thread(finish)
                return [await asyncio.wait_for(anext(events), 20.0) for _ in range(2)]

        assert asyncio.run(heard()) == [
            Event(EventKind.RUN_ENDED, NOW, task_id=claim.task.id, run_id=claim.run.id,
                  role="coder", runtime="claude"),
            Event(EventKind.TASK_CHANGED, NOW, task_id=claim.task.id,
                  state=TaskState.COMPLETED, role="coder"),
        ]


@pytest.mark.parametrize("case", ["deliver_to", "chain", "reviewed role"])
def test_a_runs_end_that_sets_off_more_takes_the_steps(monkeypatch, pg_url, case):
    """A settle whose task tells delivery targets, has a chain of its own or belongs to a
    reviewed role is left to the steps (their three round trips and more), which do it."""
    with PostgresStore(pg_url, durability="normal") as store:
        store.workflow = Workflow({"coder": RoleFlow(review_by="qa")})
        role = "coder" if case == "reviewed role" else "writer"
        meta = {"deliver_to": ["@ops"]} if case == "deliver_to" else {}
        chain = (FollowUp(role="qa", title="check {parent_title}"),) if case == "chain" else ()
        store.enqueue(NewTask(role=role, title="warm"), NOW)
        claimed(store, role)[1]()
        store.enqueue(NewTask(role=role, title="work", meta=meta, chain=chain), NOW)
        claim, finish = claimed(store, role)
        assert round_trips(monkeypatch, finish) >= 3
        task = store.get_task(claim.task.id)
        if case == "deliver_to":
            assert [d.alias for d in store.list_deliveries()] == ["ops"]
        elif case == "chain":
            assert [t.title for t in store.children_of(task.id)] == ["check work"]
        else:
            assert task.state is TaskState.NEEDS_REVIEW
