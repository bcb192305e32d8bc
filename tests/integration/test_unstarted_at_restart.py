"""A claim an earlier daemon left with no spawn on record and no shim header: it may have
handed the run to a shim just before it died, and the shim writes its header as soon as it is
scheduled. The restarted daemon waits SHIM_GRACE for it: a late shim is adopted and its task
runs once; with none, the run is given up as never started (`lost`, no strike). Real shims
and agents, on both stores."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from taskherd.config import parse_config
from taskherd.host import procs
from taskherd.model import NewTask, Outcome, TaskState
from taskherd.policy.admission import ClaimRequest
from taskherd.services.starts import SHIM_GRACE
from taskherd.services.supervisor import Supervisor
from taskherd.store import open_store
from tests.fleet import PYTHON, agent, until

AGENT = """
    import os, sys
    with open(os.path.join(sys.argv[1], "starts"), "a") as f:
        f.write(os.environ.get("TASKHERD_RUN_ID", "late") + "\\n")
    print("TASK_COMPLETE: done")
"""


def left_claimed(tmp_path: Path, database: str):
    """The config, store, and a run the earlier daemon claimed on this node and died."""
    program = agent(tmp_path, "agent", AGENT)
    config = parse_config({
        "daemon": {"database": database, "data_dir": "data", "timezone": "UTC", "node": "n1"},
        "roles": {"worker": {"command": [PYTHON, "-S", program, str(tmp_path)]}},
    }, base_dir=tmp_path)
    store = open_store(database, durability="normal")
    store.enqueue(NewTask(role="worker", title="once"), time.time())
    claim = store.claim(ClaimRequest("n1", time.time(), 60.0))
    return config, store, claim


def test_a_late_shim_of_a_run_left_unstarted_is_adopted_and_its_task_runs_once(
        tmp_path: Path, database):
    config, store, claim = left_claimed(tmp_path, database)
    argv = list(config.role("worker").command)

    async def scenario():
        supervisor = Supervisor(config, store, time.time)
        now = time.time()
        assert supervisor.adopt(claim.run, claim.task, now, at_start=True) is None
        assert store.get_run(claim.run.id).ended_at is None  # not given up at once
        # The shim the dead daemon handed the run to gets the CPU only now.
        procs.spawn(argv, env={"PATH": "/usr/bin:/bin"}, cwd=None,
                    log_path=config.daemon.log_dir / f"run-{claim.run.id}.log",
                    header={"run": claim.run.id})
        await until(lambda: supervisor.run_once(time.time())["adopted"], timeout=10)
        await until(lambda: store.get_run(claim.run.id).ended_at, timeout=20)

    asyncio.run(scenario())
    assert [run.outcome for run in store.runs_of_task(claim.task.id)] == [Outcome.SUCCEEDED]
    assert store.get_task(claim.task.id).state is TaskState.COMPLETED
    assert (tmp_path / "starts").read_text().split() == ["late"]
    store.close()


def test_a_run_left_unstarted_with_no_shim_is_lost_after_the_grace_without_a_strike(
        tmp_path: Path, database):
    config, store, claim = left_claimed(tmp_path, database)

    async def scenario():
        supervisor = Supervisor(config, store, time.time)
        now = time.time()
        assert supervisor.adopt(claim.run, claim.task, now, at_start=True) is None
        supervisor.run_once(now + 1)
        assert store.get_run(claim.run.id).ended_at is None
        supervisor.run_once(now + SHIM_GRACE)

    asyncio.run(scenario())
    run = store.get_run(claim.run.id)
    assert run.outcome is Outcome.LOST and run.ended_at is not None
    task = store.get_task(claim.task.id)
    assert task.state is TaskState.READY and task.attempts == 0
    assert not (tmp_path / "starts").exists()
    store.close()
