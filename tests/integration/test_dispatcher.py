"""The dispatcher against a real store, once per store (`database`): what a waiting P0 is
told it waits for, and when the cooldowns are read."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from datetime import datetime

from taskherd.config import parse_config
from taskherd.model import Event, EventKind, NewTask, Priority, TaskState
from taskherd.services.dispatcher import COOLDOWNS_KEPT, Dispatcher
from taskherd.services.supervisor import Supervisor
from taskherd.store import open_store
from taskherd.store.events import SOCKET_SUFFIX, socket_dir

NOW = 1_800_000_000.0


def test_a_p0_waiting_for_a_cooldown_is_told_when_it_ends_as_a_time(tmp_path, database, caplog):
    config = parse_config(
        {"daemon": {"database": database, "data_dir": "data", "timezone": "UTC"},
         "roles": {"coder": {"command": ["true"]}}},
        base_dir=tmp_path,
    )
    with open_store(database, durability="normal") as store:
        store.enqueue(NewTask(role="coder", title="urgent", priority=Priority.P0), NOW)
        store.set_cooldown("command", NOW + 3600, "429", NOW)
        supervisor = Supervisor(config, store, lambda: NOW)
        dispatcher = Dispatcher(config, store, supervisor.view, supervisor.start)
        with caplog.at_level(logging.WARNING, logger="taskherd.dispatcher"):
            assert dispatcher.run_once(NOW) == {"started": 0}
    until = datetime.fromtimestamp(NOW + 3600).astimezone().isoformat(sep=" ", timespec="seconds")
    # Was the raw unix time ("until 1800003600"), which nobody reading a log can place.
    assert f"runtime command is rate-limited until {until}" in caplog.text
    assert "P0 task 1" in caplog.text


def test_the_cooldowns_are_read_again_once_an_event_tells_of_one_or_after_a_while(
        tmp_path, database, caplog):
    # Read at each pass, they cost each claim a store query on its way; kept, a cooldown set
    # by any process must still be seen at the pass after its event.
    config = parse_config(
        {"daemon": {"database": database, "data_dir": "data", "timezone": "UTC"},
         "roles": {"coder": {"command": ["true"]}}},
        base_dir=tmp_path,
    )
    with open_store(database, durability="normal") as store:
        reads = []
        read = store.all_cooldowns
        store.all_cooldowns = lambda: reads.append(1) or read()
        supervisor = Supervisor(config, store, lambda: NOW)
        dispatcher = Dispatcher(config, store, supervisor.view, supervisor.start)
        dispatcher.run_once(NOW)
        dispatcher.run_once(NOW + 0.1)
        assert len(reads) == 1
        store.set_cooldown("command", NOW + 3600, "429", NOW)  # as the CLI or a node would
        store.enqueue(NewTask(role="coder", title="urgent", priority=Priority.P0), NOW)
        dispatcher.hear(Event(EventKind.COOLDOWN_SET, NOW, runtime="command"))
        with caplog.at_level(logging.WARNING, logger="taskherd.dispatcher"):
            assert dispatcher.run_once(NOW + 0.2) == {"started": 0}
        assert len(reads) == 2
        assert "runtime command is rate-limited until" in caplog.text
        dispatcher.run_once(NOW + 0.2 + COOLDOWNS_KEPT)  # an event missed: read again
        assert len(reads) == 3


def test_a_claims_events_are_told_once_its_agent_is_on_its_way_and_not_lost(tmp_path):
    # Telling them is a datagram to every listener: 0.1 ms of the way from a claim to its
    # agent's exec when it came before the start.
    database = str(tmp_path / "q.db")
    config = parse_config(
        {"daemon": {"database": database, "data_dir": "data", "timezone": "UTC"},
         "roles": {"coder": {"command": ["true"]}}},
        base_dir=tmp_path,
    )
    with open_store(database, durability="normal") as store:
        task = store.enqueue(NewTask(role="coder", title="fix"), NOW).task
        folder = socket_dir(database)
        folder.mkdir(mode=0o700, exist_ok=True)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
            listener.bind(str(folder / f"{os.getpid()}-0123456789ab{SOCKET_SUFFIX}"))
            listener.setblocking(False)
            told_before_start = []

            def start(claim, now, probe=False):
                with contextlib.suppress(BlockingIOError):
                    told_before_start.append(listener.recv(1 << 16))
                return claim

            dispatcher = Dispatcher(config, store, Supervisor(config, store, lambda: NOW).view,
                                    start)
            assert dispatcher.run_once(NOW) == {"started": 1}
            told_after = []
            with contextlib.suppress(BlockingIOError):
                told_after.append(listener.recv(1 << 16))
    assert told_before_start == []
    told = [Event.from_json(line) for datagram in told_after for line in datagram.splitlines()]
    assert [(e.kind, e.task_id, e.state) for e in told] == [
        (EventKind.TASK_CHANGED, task.id, TaskState.CLAIMED)]
