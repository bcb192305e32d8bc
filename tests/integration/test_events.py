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
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
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
                claim = store.claim(ClaimRequest("n1", NOW, 60.0))
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


def test_a_claim_within_limits_tells_its_run_and_a_refused_one_tells_nothing(store):
    # A daemon's claim counts its limits: on PostgreSQL its event is sent by the claim's own
    # statements, with the run's id, and only if the limits left room.
    from taskherd.model import InboxLimit
    from taskherd.policy.limits import ClaimLimits, RoleLimit

    limits = ClaimLimits({"coder": RoleLimit(max_concurrent=1)})

    def claim(now: float):
        attempt = store.attempt_claim(ClaimRequest("n1", now, 60.0, roles=["coder"],
                                                   limits=limits, inbox=InboxLimit()))
        return attempt.claim, {refusal.role: refusal for refusal in attempt.refused}

    async def scenario():
        async with store.listen() as events:
            def work():
                store.enqueue_many([NewTask(role="coder", title="one"),
                                    NewTask(role="coder", title="two")], NOW)
                held, _ = claim(NOW)
                refused, refusals = claim(NOW + 1)
                assert refused is None and "max_concurrent 1" in refusals["coder"].reason
                store.finish_run(held.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(),
                                 NOW + 2)
                second, _ = claim(NOW + 3)
                return held, second

            held, second = await asyncio.to_thread(work)
            claimed = []
            while len(claimed) < 2:
                event = await next_event(events, EventKind.TASK_CHANGED)
                if event.state is TaskState.CLAIMED:
                    claimed.append((event.task_id, event.run_id, event.role, event.at))
            return held, second, claimed

    held, second, claimed = asyncio.run(scenario())
    assert claimed == [(held.task.id, held.run.id, "coder", NOW),
                       (second.task.id, second.run.id, "coder", NOW + 3)]


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


def test_a_postgres_listener_listens_again_after_losing_its_connection(pg_url, monkeypatch,
                                                                       caplog):
    import psycopg

    from taskherd.store import postgres

    monkeypatch.setattr(postgres, "RELISTEN_DELAY", 0.05)

    async def scenario(store) -> Event:
        async with store.listen() as events:
            with psycopg.connect(pg_url, autocommit=True) as admin:  # as a server restart would
                admin.execute("SELECT pg_terminate_backend(%s)", (events._conn.info.backend_pid,))
            deadline = asyncio.get_running_loop().time() + WAIT
            while asyncio.get_running_loop().time() < deadline:
                # What commits while it is away is missed (the daemon's poll covers that), so
                # keep committing until one arrives.
                await asyncio.to_thread(store.enqueue, NewTask(role="coder", title="x"), NOW)
                try:
                    return await asyncio.wait_for(next_event(events, EventKind.TASK_ADDED), 0.2)
                except TimeoutError:
                    continue
            raise AssertionError("no event after the connection was lost")

    with open_store(pg_url, durability="normal") as store:
        assert asyncio.run(scenario(store)).role == "coder"
    assert "events from other nodes paused" in caplog.text


def test_events_held_by_a_batch_are_told_after_it_and_another_threads_at_once(tmp_path):
    """SQLite: the API's store thread holds the events of a batch's commits and tells them
    together at its end (a listener is woken once, not once a commit); a commit of another
    thread meanwhile is told at its own commit. None is lost, each keeps its order."""
    import threading

    store = open_store(str(tmp_path / "q.db"), durability="normal")
    held_done, go = threading.Event(), threading.Event()
    held_ids: list[int] = []

    def batch() -> None:
        with store.events_held():
            for n in range(30):
                held_ids.append(store.enqueue(NewTask(role="coder", title=f"held {n}"),
                                              NOW).task.id)
            held_done.set()
            go.wait(WAIT)

    async def scenario() -> tuple[int, list[int]]:
        async with store.listen() as events:
            worker = threading.Thread(target=batch)
            worker.start()
            assert await asyncio.to_thread(held_done.wait, WAIT)
            alone = await asyncio.to_thread(
                store.enqueue, NewTask(role="coder", title="alone"), NOW)
            first = await next_event(events, EventKind.TASK_ADDED)
            go.set()
            later = [(await next_event(events, EventKind.TASK_ADDED)).task_id
                     for _ in range(30)]
            await asyncio.to_thread(worker.join, WAIT)
            assert first.task_id == alone.task.id
            return first.task_id, later

    try:
        _, later = asyncio.run(scenario())
        assert later == held_ids
    finally:
        store.close()


def test_a_listener_passes_over_the_kinds_its_reader_does_not_want(tmp_path):
    """SQLite: a kind the reader refuses (the API's run counters, a task added) is counted,
    not decoded nor queued; the kinds it takes still come, in order."""
    store = open_store(str(tmp_path / "q.db"), durability="normal")
    decoded: list[bytes] = []
    from_json = Event.from_json

    def counted(line: bytes) -> Event:
        decoded.append(line)
        return from_json(line)

    async def scenario() -> tuple[Event, int]:
        async with store.listen() as events:
            events.wanted = lambda kind: kind == EventKind.RUN_STARTED.value
            for n in range(5):
                store.enqueue(NewTask(role="coder", title=f"t{n}"), NOW)
            claim = store.claim(ClaimRequest("n1", NOW, 60, roles=["coder"]))
            store.mark_spawned(claim.run.id, NOW, 60, pid=None, pid_started_at=None,
                               log_path=None)
            started = await asyncio.wait_for(anext(events), WAIT)
            return started, events.passed

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Event, "from_json", staticmethod(counted))
            started, passed = asyncio.run(scenario())
        assert started.kind is EventKind.RUN_STARTED
        assert passed == 6 and len(decoded) == 1  # five task_added and the claim's change
    finally:
        store.close()
