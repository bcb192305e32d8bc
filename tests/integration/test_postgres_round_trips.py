"""On PostgreSQL what an enqueue and a run's end send: no read of what was just written, and
statements that do not wait on each other's answers go together (each round trip one a
loaded server makes the caller wait for)."""

from __future__ import annotations

import contextlib

import psycopg

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
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


def test_an_enqueue_is_its_insert_and_its_commit_with_no_read_back(monkeypatch, pg_url):
    with PostgresStore(pg_url, durability="normal") as store:
        store.enqueue(NewTask(role="coder", title="warm"), NOW)  # the first one prepares
        answers = []
        sent = first_words(monkeypatch, store, lambda: answers.append(
            store.enqueue(NewTask(role="coder", title="fix", priority=2), NOW)))
        assert sent == ["BEGIN", "INSERT", "COMMIT"]
        assert round_trips(monkeypatch, lambda: store.enqueue(NewTask(role="coder", title="x"),
                                                              NOW)) == 2
        added = answers[0].task
        assert added == store.get_task(added.id)  # the row the INSERT returned is the task
        assert (added.title, added.priority, answers[0].created) == ("fix", 2, True)


def test_a_runs_end_is_three_round_trips(monkeypatch, pg_url):
    """The run's end with its task read, the task's settle with its worktree read, the
    commit with the events."""
    with PostgresStore(pg_url, durability="normal") as store:
        for title in ("warm", "work"):
            store.enqueue(NewTask(role="coder", title=title), NOW)

        def claim_and_finish():
            claim = store.claim(ClaimRequest("node-a", NOW, 60.0, roles=["coder"],
                                             limits=ClaimLimits()))
            return lambda: store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED),
                                            RetryPolicy(), NOW)

        claim_and_finish()()  # the first one prepares
        finish = claim_and_finish()
        assert round_trips(monkeypatch, finish) == 3
        assert store.get_task(2).state.value == "completed"
