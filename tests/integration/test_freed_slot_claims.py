"""A run's end takes the node's next task for the slot it frees, in the store's call that
settles it (`Store.finish_run_and_claim`): a busy node keeps its slots full with no
dispatch pass between one agent and the next, and a stopping node claims nothing more.
Real agent processes, on both stores."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from taskherd.config import parse_config
from taskherd.model import NewTask, TaskState
from taskherd.services.dispatcher import Dispatcher
from taskherd.services.supervisor import Supervisor
from taskherd.store import open_store
from tests.fleet import PYTHON, agent, until

# Waits for its task's release file (named by the task's id), then completes.
AGENT = """
    import os, sys, time
    folder, task = sys.argv[1], os.environ["TASKHERD_TASK_ID"]
    while not os.path.exists(os.path.join(folder, task)):
        time.sleep(0.02)
    print("TASK_COMPLETE: done")
"""


def one_slot_node(tmp_path: Path, database: str):
    program = agent(tmp_path, "agent", AGENT)
    config = parse_config({
        "daemon": {"database": database, "data_dir": "data", "timezone": "UTC",
                   "max_concurrent": 1},
        "roles": {"worker": {"command": [PYTHON, "-S", program, str(tmp_path)]}},
    }, base_dir=tmp_path)
    store = open_store(database, durability="normal")
    supervisor = Supervisor(config, store, time.time)
    dispatcher = Dispatcher(config, store, supervisor.view, supervisor.start,
                            disk=supervisor.disk)
    supervisor.hand_freed_slots_to(dispatcher)
    return store, supervisor, dispatcher


def test_each_runs_end_starts_the_next_task_with_no_dispatch_pass(tmp_path, database):
    store, supervisor, dispatcher = one_slot_node(tmp_path, database)

    async def scenario():
        ids = [store.enqueue(NewTask(role="worker", title=title), time.time()).task.id
               for title in ("a", "b", "c")]
        for id in ids:
            (tmp_path / str(id)).touch()
        # One pass, and one slot: it starts the first task only.
        assert dispatcher.run_once(time.time()) == {"started": 1}
        # No pass after it: the second and third start as the run before them ends.
        return await until(lambda: all(
            store.get_task(id).state is TaskState.COMPLETED for id in ids) and ids)

    try:
        ids = asyncio.run(scenario())
        runs = [store.runs_of_task(id) for id in ids]
        assert [len(of_task) for of_task in runs] == [1, 1, 1]
        # One slot: each run was claimed once the run before it had ended.
        for before, after in zip(runs, runs[1:], strict=False):
            assert after[0].claimed_at >= before[0].ended_at
    finally:
        store.close()


def test_a_run_ending_while_the_node_stops_claims_nothing(tmp_path, database):
    store, supervisor, dispatcher = one_slot_node(tmp_path, database)

    async def scenario():
        first = store.enqueue(NewTask(role="worker", title="first"), time.time()).task
        waiting = store.enqueue(NewTask(role="worker", title="second"), time.time()).task
        (tmp_path / str(waiting.id)).touch()
        assert dispatcher.run_once(time.time()) == {"started": 1}
        stopping = asyncio.create_task(supervisor.shutdown("wait", grace=20.0))
        await asyncio.sleep(0)  # the stop has begun: nothing new may start from here
        (tmp_path / str(first.id)).touch()
        await stopping
        return first, waiting

    try:
        first, waiting = asyncio.run(scenario())
        assert store.get_task(first.id).state is TaskState.COMPLETED
        assert store.get_task(waiting.id).state is TaskState.READY
        assert store.runs_of_task(waiting.id) == []
    finally:
        store.close()
