"""An agent that finishes before its spawn is recorded, on a node that dies right then, is not
run a second time: the node that comes back finds it in the run's log and exit file, and
another node that rescues it settles it by the agent's own report. Real agent processes, the
real agent door, on both stores.

The interleaving is forced: the dying node's `mark_spawned` waits until the agent has done
its work and exited, and then the node dies (nothing after the spawn reaches the store).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from taskherd.agent.door import AgentDoor
from taskherd.config import parse_config
from taskherd.host import procs
from taskherd.model import NewTask, Outcome, TaskState
from taskherd.ops import Queue
from taskherd.policy.admission import ClaimRequest
from taskherd.services.supervisor import Supervisor
from taskherd.store import open_store
from tests.fleet import PYTHON, agent, until

# Does its work once (a line in `work`), says so as the role asks, and exits at once.
AGENT = """
    import os, subprocess, sys
    folder, say = sys.argv[1], sys.argv[2]
    with open(os.path.join(folder, "work"), "a") as f:
        f.write(f"run {os.environ['TASKHERD_RUN_ID']} did the work\\n")
    if say == "report":  # through its run credential, to the door of its node
        subprocess.run(["taskherd", "done", "--summary", "deployed"], check=True)
    else:
        print("TASK_COMPLETE: deployed", flush=True)
"""
LEASE = 60.0


class NodeDied(Exception):
    """The daemon is gone: nothing it would have done next reaches the store."""


class DiesBeforeRecordingTheSpawn:
    """The store of a node that dies between starting an agent and recording it: recording
    the spawn waits until the agent has finished (and, when asked, has reported), then the
    node dies."""

    def __init__(self, store, wait_for_report: bool):
        self._store = store
        self._wait_for_report = wait_for_report

    def __getattr__(self, name):
        return getattr(self._store, name)

    def mark_spawned(self, run_id, now, lease_seconds, *, pid, pid_started_at, log_path):
        exit_file = procs.exit_path_for(Path(log_path))
        deadline = time.monotonic() + 30
        while not (exit_file.exists() and (not self._wait_for_report
                                           or self._store.get_run(run_id).report == "done")):
            assert time.monotonic() < deadline, "the agent never finished"
            time.sleep(0.01)  # a thread, polling a file: the test's loop serves the door
        raise NodeDied(f"node died before recording the spawn of run {run_id}")


def config_for(tmp_path: Path, database: str, say: str):
    program = agent(tmp_path, "agent", AGENT)
    return parse_config({
        "daemon": {"database": database, "data_dir": "data", "timezone": "UTC",
                   "node": "n1", "node_timeout": "15s"},
        "roles": {"deployer": {"command": [PYTHON, "-S", program, str(tmp_path), say]}},
    }, base_dir=tmp_path)


async def die_while_spawning(config, store, wait_for_report: bool):
    """Claim the task on n1 and start its agent; the node dies before the spawn is recorded.
    The door of n1 answers meanwhile, as a daemon's does until it dies."""
    claim = store.claim(ClaimRequest("n1", time.time(), LEASE))
    dying = Supervisor(config, DiesBeforeRecordingTheSpawn(store, wait_for_report), time.time)
    door = AgentDoor(Queue(config, store), time.time)
    await door.start(config.daemon.data_dir)
    try:
        with pytest.raises(NodeDied):
            await asyncio.to_thread(dying.start, claim, time.time())
    finally:
        await door.close()
    run = store.get_run(claim.run.id)
    assert run.pid is None and run.ended_at is None  # only the claim is on record
    return run


def work_done(tmp_path: Path) -> list[str]:
    return (tmp_path / "work").read_text().splitlines()


def test_the_node_back_finds_the_agent_it_started_and_settles_it_once(tmp_path, database):
    config = config_for(tmp_path, database, say="marker")
    store = open_store(database, durability="normal")
    task = store.enqueue(NewTask(role="deployer", title="deploy"), time.time()).task

    async def scenario():
        run = await die_while_spawning(config, store, wait_for_report=False)
        # The daemon starts again on the same node and adopts what its earlier life left.
        back = Supervisor(config, store, time.time)
        assert back.adopt(run, store.get_task(task.id), time.time()) is not None
        return await until(lambda: (t := store.get_task(task.id)).state is TaskState.COMPLETED
                           and t)

    try:
        done = asyncio.run(scenario())
        [run] = store.runs_of_task(task.id)
        assert run.outcome is Outcome.SUCCEEDED and run.summary == "deployed"
        assert run.pid is not None and run.log_path.endswith(f"run-{run.id}.log")
        assert done.attempts == 0 and done.rescues == 0
        assert store.claim(ClaimRequest("n1", time.time(), LEASE)) is None
    finally:
        store.close()
    assert work_done(tmp_path) == [f"run {run.id} did the work"]


def test_a_node_that_stays_down_has_its_reported_work_settled_not_run_again(tmp_path,
                                                                            database):
    config = config_for(tmp_path, database, say="report")
    store = open_store(database, durability="normal")
    survivor = open_store(database, durability="normal")
    started = time.time()
    for name, up in (("n1", store), ("n2", survivor)):
        up.node_up(name, host=name, pid=1, version="1", lease=LEASE, roles=["deployer"],
                   now=started, timeout=15.0)
    task = store.enqueue(NewTask(role="deployer", title="deploy"), started).task

    try:
        run = asyncio.run(die_while_spawning(config, store, wait_for_report=True))
        assert run.report == "done"
        # n1 stays silent; n2 declares it down once its node_timeout has passed.
        later = started + 16
        survivor.node_seen("n2", later, running=0, roles=["deployer"])
        [down] = survivor.rescue_down_nodes("n2", later, config.policy_for)
        assert down.node.name == "n1" and down.node.down_by == "n2"
        [rescued] = down.rescued
        assert rescued.run.id == run.id and rescued.run.outcome is Outcome.SUCCEEDED
        assert rescued.run.summary == "deployed" and "node n1 went silent" in rescued.run.error
        assert survivor.get_task(task.id).state is TaskState.COMPLETED
        assert survivor.claim(ClaimRequest("n2", later, LEASE)) is None  # nothing to run again
        assert [r.id for r in survivor.runs_of_task(task.id)] == [run.id]
    finally:
        store.close()
        survivor.close()
    assert work_done(tmp_path) == [f"run {run.id} did the work"]
