"""The store contract: every store implementation must pass every test in this folder."""

from __future__ import annotations

import pytest

from taskherd.store.sqlite import SQLiteStore


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "queue.db", durability="normal")
    else:
        from taskherd.store.postgres import PostgresStore

        opened = PostgresStore(request.getfixturevalue("pg_url"), durability="normal")
    yield opened
    opened.close()


@pytest.fixture
def reopen(store):
    """Open another store on the same database: a second process, a second node."""

    def another() -> object:
        if isinstance(store, SQLiteStore):
            return SQLiteStore(store.path, durability="normal")
        return type(store)(store.url, durability="normal")

    return another
