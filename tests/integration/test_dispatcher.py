"""The dispatcher against a real store, once per store (`database`): what a waiting P0 is
told it waits for."""

from __future__ import annotations

import logging
from datetime import datetime

from taskherd.config import parse_config
from taskherd.model import NewTask, Priority
from taskherd.services.dispatcher import Dispatcher
from taskherd.services.supervisor import Supervisor
from taskherd.store import open_store

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
