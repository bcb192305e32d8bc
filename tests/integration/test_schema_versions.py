"""A node never runs on a schema newer than it knows: it refuses, naming the release the
database needs. Nodes starting together on a fresh database apply each migration once."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import traceback

import pytest

from taskherd import __version__
from taskherd.store import StoreError, open_store
from taskherd.store.sqlfile import migrations


def newer_node_was_here(database: str) -> int:
    """What a newer taskherd leaves: one more migration applied, and its release recorded."""
    newer = len(migrations("sqlite")) + 1
    with open_store(database) as store, store._write() as db:
        db.execute(f"INSERT INTO schema_migrations VALUES ({newer}, 'from_the_future', 0)")
        db.execute(f"INSERT INTO schema_releases VALUES ({newer}, '9.1.0')")
    return newer


def test_a_schema_newer_than_this_taskherd_is_refused_naming_the_release_needed(database):
    with open_store(database) as store:
        assert store.counts() == []
    newer = newer_node_was_here(database)
    with pytest.raises(StoreError) as refused:
        open_store(database)
    message = str(refused.value)
    assert f"schema is at version {newer}" in message and f"taskherd {__version__}" in message
    assert f"up to {newer - 1}" in message and "run taskherd 9.1.0 or later" in message


def test_a_node_refuses_to_start_on_it_and_says_why(database, tmp_path):
    (tmp_path / "taskherd.toml").write_text(f'[daemon]\ndatabase = "{database}"\n'
                                            'data_dir = "data"\n')
    open_store(database).close()
    newer_node_was_here(database)
    up = subprocess.run([sys.executable, "-m", "taskherd", "up"], cwd=tmp_path, timeout=60,
                        capture_output=True, text=True, check=False)
    assert up.returncode != 0
    assert "run taskherd 9.1.0 or later" in up.stderr


def opener(url: str, start, out) -> None:
    try:
        start.wait(30)
        open_store(url).close()
        out.put(None)
    except BaseException:  # noqa: BLE001
        out.put(traceback.format_exc())


def test_nodes_starting_together_apply_each_migration_once(pg_url):
    context = multiprocessing.get_context("spawn")
    start, out = context.Event(), context.Queue()
    nodes = [context.Process(target=opener, args=(pg_url, start, out)) for _ in range(4)]
    for node in nodes:
        node.start()
    start.set()
    errors = [out.get(timeout=60) for _ in nodes]
    for node in nodes:
        node.join(30)
    assert errors == [None] * 4
    import psycopg

    with psycopg.connect(pg_url) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_migrations")]
    assert sorted(versions) == list(range(1, len(migrations("postgres")) + 1))


def test_a_role_that_only_reads_and_writes_opens_a_schema_its_owner_migrated(pg_server, pg_url):
    from taskherd.model import NewTask
    from taskherd.store.postgres import PostgresStore

    PostgresStore(pg_url, durability="normal").close()  # migrated by the database's owner
    url = pg_server.url_without_temporary(pg_url)  # no CREATE on the schema either
    with PostgresStore(url, durability="normal") as store:
        added = store.enqueue(NewTask(role="coder", title="as the application's role"), 1.0)
        assert store.get_task(added.task.id).title == "as the application's role"


def test_a_role_that_cannot_create_pg_trgm_is_told_what_to_run(pg_server, pg_url):
    """The task search's migration creates pg_trgm: a role without CREATE on the database
    (which PostgreSQL asks for a trusted extension) is told the statement a superuser runs,
    and the migration is not recorded."""
    import psycopg

    from taskherd.store.postgres import PostgresStore

    every = migrations("postgres")
    search = next(m.version for m in every if m.name == "task_text_search")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_migrations (version integer PRIMARY KEY,"
                     " name text NOT NULL, applied_at double precision NOT NULL)")
        for migration in every[:search - 1]:  # the database as the release before left it
            with conn.transaction():
                for statement in migration.statements():
                    conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, 0)",
                         (migration.version, migration.name))
    url = pg_server.url_without_temporary(pg_url)  # no CREATE on the database
    with pytest.raises(StoreError) as refused:
        PostgresStore(url, durability="normal")
    message = str(refused.value)
    assert f"migration {search} needs PostgreSQL's pg_trgm extension" in message
    assert "runs 'CREATE EXTENSION IF NOT EXISTS pg_trgm;'" in message
    with psycopg.connect(pg_url) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_migrations")]
    assert max(versions) == search - 1
