"""Fixtures every test folder may use: a throwaway PostgreSQL server (tests/pg.py) and
`database`, which runs a test once per store."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.pg", "tests.s3"]


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path) -> str:
    """The test's database, once per store, as `[daemon] database` and `open_store` take it:
    a SQLite file path, or the URL of a fresh PostgreSQL database (the server starts only
    when a test asks for it)."""
    if request.param == "sqlite":
        return str(tmp_path / "q.db")
    return request.getfixturevalue("pg_url")
