"""The store contract: every store implementation must pass every test in this folder."""

from __future__ import annotations

import pytest

from taskherd.store.sqlite import SQLiteStore


@pytest.fixture(params=["sqlite"])
def store(request, tmp_path):
    # A PostgreSQL store joins this list when it exists; the tests stay the same.
    opened = SQLiteStore(tmp_path / "queue.db", durability="normal")
    yield opened
    opened.close()
