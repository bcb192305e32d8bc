"""No orphan at spawn: when the store fails to record an agent's spawn (`mark_spawned`), the
agent just started is stopped and its claim released without a strike, so the task runs once.
Real agent processes, on both stores."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, TaskState
from taskherd.policy.admission import ClaimRequest
from taskherd.services.supervisor import Supervisor
from taskherd.store import StoreUnavailable, open_store
from tests.fleet import PYTHON, agent, until

# Records its pid, waits for the release file, then records that it did the work.
AGENT = """
    import os, sys, time
    folder = sys.argv[1]
    with open(os.path.join(folder, "pids"), "a") as f:
        f.write(f"{os.getpid()}\\n")
    while not os.path.exists(os.path.join(folder, "release")):
        time.sleep(0.02)
    with open(os.path.join(folder, "work"), "a") as f:
        f.write("did the work\\n")
    print("TASK_COMPLETE: done")
"""


class SpawnNotRecorded:
    """The store, except that recording a spawn fails as a lost database connection would."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def mark_spawned(self, *args, **kwargs):
        raise StoreUnavailable("database error: server closed the connection unexpectedly")


def test_an_unrecorded_spawn_is_stopped_and_the_task_runs_once(tmp_path: Path, database):
    program = agent(tmp_path, "agent", AGENT)
    config = parse_config({
        "daemon": {"database": database, "data_dir": "data", "timezone": "UTC"},
        "roles": {"worker": {"command": [PYTHON, "-S", program, str(tmp_path)]}},
    }, base_dir=tmp_path)
    store = open_store(database, durability="normal")

    async def scenario():
        task = store.enqueue(NewTask(role="worker", title="once"), time.time()).task
        failing = Supervisor(config, SpawnNotRecorded(store), time.time)
        claim = store.claim(ClaimRequest("n1", time.time(), 60.0))
        assert failing.start(claim, time.time()) is None
        [stopping] = failing.live.values()  # watched until its process is gone
        pid, first = stopping.handle.pid, claim.run.id
        ended = await until(lambda: (run := store.get_run(first)).ended_at and run)
        assert ended.outcome is Outcome.LOST
        await until(lambda: not psutil.pid_exists(pid) or
                    psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
        released = store.get_task(task.id)
        assert released.state is TaskState.READY and released.attempts == 0  # no strike

        (tmp_path / "release").touch()
        working = Supervisor(config, store, time.time)
        again = store.claim(ClaimRequest("n1", time.time(), 60.0))
        assert again.task.id == task.id
        assert working.start(again, time.time()) is not None
        return await until(lambda: (t := store.get_task(task.id)).state is TaskState.COMPLETED
                           and t)

    try:
        asyncio.run(scenario())
    finally:
        store.close()
    assert (tmp_path / "work").read_text().splitlines() == ["did the work"]
