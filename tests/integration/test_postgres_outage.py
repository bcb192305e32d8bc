"""A PostgreSQL store rides out a lost connection (a server restart, a failover): the call
that meets it fails with StoreUnavailable, the next one connects again and works, and a
node keeps its node name."""

from __future__ import annotations

import psycopg
import pytest

from taskherd.model import NewTask
from taskherd.store import StoreError, StoreUnavailable
from taskherd.store.postgres import PostgresStore

NOW = 1_700_000_000.0


def cut_connections(pg_url: str) -> int:
    """Terminate every other session on the test database, as a server restart would."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        return admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]


def test_the_call_after_a_lost_connection_reconnects(pg_url):
    with PostgresStore(pg_url, durability="normal") as store:
        first = store.enqueue(NewTask(role="coder", title="before"), NOW).task
        assert cut_connections(pg_url) >= 1
        with pytest.raises(StoreUnavailable, match="database error"):
            store.get_task(first.id)
        second = store.enqueue(NewTask(role="coder", title="after"), NOW).task
        assert [task.title for task in store.list_tasks()] == ["before", "after"]
        assert second.id > first.id


def test_a_node_name_is_held_again_after_a_reconnect(pg_url):
    with PostgresStore(pg_url, durability="normal") as store:
        store.hold_node("n1")
        cut_connections(pg_url)
        with pytest.raises(StoreUnavailable):
            store.counts()
        store.counts()  # reconnects, and takes the node name again
        with PostgresStore(pg_url, durability="normal") as twin, \
                pytest.raises(StoreError, match="already runs as node 'n1'"):
            twin.hold_node("n1")
