"""The store's events: published after commit, by any process, to listeners in others.

Every test runs on both stores (`database`): SQLite carries events between the processes of
one host through datagram sockets, PostgreSQL between nodes through LISTEN/NOTIFY.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from taskherd.model import Event, EventKind, NewTask, Outcome, RunResult, TaskState
from taskherd.queue import RetryPolicy
from taskherd.store import open_store

NOW = 1_700_000_000.0
WAIT = 20.0  # seconds an expected event may take before the test fails


@pytest.fixture
def store(database):
    opened = open_store(database, durability="normal")
    yield opened
    opened.close()


def write_config(root: Path, database: str) -> Path:
    path = root / "taskherd.toml"
    path.write_text(textwrap.dedent(f"""\
        [daemon]
        database = "{database}"
        data_dir = "{root / 'data'}"

        [roles.coder]
        command = ["true"]
        """))
    return path


async def next_event(events, kind: EventKind) -> Event:
    """The next event of `kind`, skipping others (a listener sees every change)."""
    while True:
        event = await asyncio.wait_for(anext(events), WAIT)
        if event.kind is kind:
            return event


def test_a_task_added_by_a_cli_process_reaches_a_listener_here(store, database, tmp_path):
    config = write_config(tmp_path, database)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    env |= {"TASKHERD_CONFIG": str(config), "TASKHERD_HOME": str(tmp_path / "home")}

    async def scenario() -> Event:
        async with store.listen() as events:
            added = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "taskherd", "task", "add", "from the CLI",
                                 "--role", "coder"],
                env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
            assert added.returncode == 0, added.stderr
            return await next_event(events, EventKind.TASK_ADDED)

    event = asyncio.run(scenario())
    task = store.list_tasks()[0]
    assert (event.task_id, event.role, event.state) == (task.id, "coder", TaskState.READY)


def test_a_rolled_back_transaction_publishes_nothing(store):
    async def scenario() -> list[Event]:
        async with store.listen() as events:
            with pytest.raises(RuntimeError), store._write() as db:
                store._add_task(db, NewTask(role="coder", title="rolled back"), NOW)
                raise RuntimeError("the transaction fails after the insert")
            kept = await asyncio.to_thread(store.enqueue, NewTask(role="coder", title="kept"), NOW)
            event = await next_event(events, EventKind.TASK_ADDED)
            return [event, kept.task]

    event, kept = asyncio.run(scenario())
    assert event.task_id == kept.id  # the first task_added is the committed one's
    assert [task.title for task in store.list_tasks()] == ["kept"]


def test_each_transition_tells_what_it_did(store):
    async def scenario() -> list[tuple]:
        async with store.listen() as events:
            def work() -> None:
                store.enqueue(NewTask(role="coder", title="x"), NOW)
                claim = store.claim("n1", NOW, 60.0)
                store.mark_spawned(claim.run.id, NOW, 60.0, pid=None, pid_started_at=None,
                                   log_path=None)
                store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), NOW)
                store.set_cooldown("claude", NOW + 60, "429", NOW)
                store.clear_cooldown("claude", NOW)

            await asyncio.to_thread(work)
            seen = []
            while len(seen) < 7:
                event = await asyncio.wait_for(anext(events), WAIT)
                seen.append((event.kind.value, event.state and event.state.value,
                             event.runtime))
            return seen

    assert asyncio.run(scenario()) == [
        ("task_added", "ready", None),
        ("task_changed", "claimed", None),
        ("run_started", "running", None),
        ("run_ended", None, None),
        ("task_changed", "completed", None),
        ("cooldown_set", None, "claude"),
        ("cooldown_cleared", None, "claude"),
    ]


def test_a_listener_that_died_is_forgotten(tmp_path):
    """A socket left by a killed listener is removed by the next publisher (SQLite)."""
    from taskherd.store.events import listening, socket_dir

    database = str(tmp_path / "q.db")
    folder = socket_dir(database)
    with open_store(database) as store:
        folder.mkdir(mode=0o700)
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        dead.bind(str(folder / "1-dead.sock"))
        dead.close()  # the file stays, nobody reads it: as after kill -9
        assert listening(database) == 1
        store.enqueue(NewTask(role="coder", title="x"), NOW)
        assert listening(database) == 0


def test_a_long_database_path_listens_in_a_short_private_folder(tmp_path):
    from taskherd.store.events import MAX_SOCKET_PATH, socket_dir

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    database = str(deep / "q.db")
    folder = socket_dir(database)
    assert len(str(folder)) < MAX_SOCKET_PATH - 30
    with open_store(database) as store:
        async def scenario() -> Event:
            async with store.listen() as events:
                await asyncio.to_thread(store.enqueue, NewTask(role="coder", title="x"), NOW)
                return await next_event(events, EventKind.TASK_ADDED)

        assert asyncio.run(scenario()).role == "coder"
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
