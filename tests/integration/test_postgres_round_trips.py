"""On PostgreSQL what an enqueue sends: its INSERT returns the task's row, so the answer is
built without reading the task back (each statement a round trip a loaded server makes the
caller wait for)."""

from __future__ import annotations

import psycopg

from taskherd.model import NewTask
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


def test_an_enqueue_is_its_insert_and_its_commit_with_no_read_back(monkeypatch, pg_url):
    with PostgresStore(pg_url, durability="normal") as store:
        store.enqueue(NewTask(role="coder", title="warm"), NOW)  # the first one prepares
        answers = []
        sent = first_words(monkeypatch, store, lambda: answers.append(
            store.enqueue(NewTask(role="coder", title="fix", priority=2), NOW)))
        assert sent == ["BEGIN", "INSERT", "COMMIT"]
        added = answers[0].task
        assert added == store.get_task(added.id)  # the row the INSERT returned is the task
        assert (added.title, added.priority, answers[0].created) == ("fix", 2, True)
