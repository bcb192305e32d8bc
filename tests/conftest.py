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


@pytest.fixture
def host_dir():
    """A test's folder outside /tmp, for a fleet whose agents run in a sandbox: a sandbox
    gives its agent a private /tmp, so a config, data dir, workdir or home under pytest's
    tmp_path would be hidden from the agent (or, written there, never reach the host).
    /var/tmp is the host's own, as a real user's home or project folder is. Removed after the
    test unless KEEP_HOST_DIR is set (to read a failed test's logs)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="taskherd-test-", dir="/var/tmp"))
    yield path
    if not os.environ.get("KEEP_HOST_DIR"):
        shutil.rmtree(path, ignore_errors=True)
