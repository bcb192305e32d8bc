"""The planner service on a real store: it adds one planner task when the queue runs low,
never a second while one is open, and not again within planner_every."""

from __future__ import annotations

import textwrap
from dataclasses import replace

from taskherd.config import load_config
from taskherd.model import NewTask, Outcome, Priority, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.chains import workflow_of
from taskherd.services.planner import Planner
from taskherd.store import open_store


def planner_for(tmp_path, database, monitor: str) -> Planner:
    (tmp_path / "taskherd.toml").write_text(textwrap.dedent(f"""
        [daemon]
        database = "{database}"
        [monitor]
        {monitor}
        [roles.planner]
        command = ["true"]
        max_attempts = 2
        [roles.coder]
        command = ["true"]
    """))
    config = load_config(tmp_path / "taskherd.toml")
    return Planner(config, open_store(config.daemon.database, workflow=workflow_of(config)))


def finish(store, task_id, outcome, now):
    claim = store.claim(ClaimRequest("n1", now, 60.0, roles=[store.get_task(task_id).role]))
    assert claim.task.id == task_id
    store.finish_run(claim.run.id, RunResult(outcome, error="no"), RetryPolicy(), now + 1)


def test_the_planner_fills_a_low_queue_once_per_planner_every(tmp_path, database):
    planner = planner_for(tmp_path, database, """
        planner = "planner"
        low_water = 2
        planner_every = "1h"
        prompt = "Fill the queue for the coders."
    """)
    store = planner.store
    broken = store.enqueue(NewTask(role="coder", title="broken build", max_attempts=1), 900.0)
    finish(store, broken.task.id, Outcome.FAILED, 900.0)
    store.enqueue(NewTask(role="coder", title="one ready"), 1000.0)
    assert planner.run_once(1000.0) == {"planned": 1}
    [task] = store.list_tasks(role="planner")
    assert task.priority is Priority.P0 and task.state is TaskState.READY
    assert task.prompt.startswith("Fill the queue for the coders.")
    assert "## Queue now" in task.prompt and "coder" in task.prompt
    assert "## Recent failures" in task.prompt and "broken build" in task.prompt
    # One at a time: its own task is open.
    assert planner.run_once(1001.0) == {"planned": 0}
    finish(store, task.id, Outcome.SUCCEEDED, 1002.0)
    # Done, but it ran within planner_every.
    assert planner.run_once(1003.0) == {"planned": 0}
    assert planner.run_once(1000.0 + 3600) == {"planned": 1}
    # Enough work ready: no planner.
    for n in range(3):
        store.enqueue(NewTask(role="coder", title=f"work {n}"), 9000.0)
    finish(store, store.list_tasks(role="planner", state=TaskState.READY)[0].id,
           Outcome.SUCCEEDED, 9000.0)
    assert planner.run_once(20000.0) == {"planned": 0}
    store.close()


def test_without_a_planner_role_nothing_is_added(tmp_path, database):
    planner = planner_for(tmp_path, database, "max_spawn = 5")
    assert planner.run_once(1000.0) == {}
    assert planner.store.list_tasks() == []
    planner.store.close()


def test_an_agent_cannot_add_a_task_beyond_max_depth(tmp_path, database):
    import pytest

    from taskherd.ops import Queue
    from taskherd.ops.agent import SpawnRefused, add_child_task

    planner = planner_for(tmp_path, database, "max_spawn = 5")
    store = planner.store
    config = replace(planner.config, daemon=replace(planner.config.daemon, max_depth=2))
    parent = None
    for depth in range(3):
        parent = store.enqueue(NewTask(role="coder", title=f"level {depth}",
                                       parent_id=parent), 1000.0).task.id
    assert store.get_task(parent).depth == 2
    while (claim := store.claim(ClaimRequest("n1", 1000.0, 60.0))).task.id != parent:
        pass
    queue = Queue(config, store)
    with pytest.raises(SpawnRefused, match="depth 3 of its chain, beyond max_depth 2"):
        add_child_task(queue, claim.run, {"role": "coder", "title": "too deep"}, 1001.0)
    assert len(store.list_tasks()) == 3
    store.close()
