"""The queue that runs itself, with real processes: a daemon configured only by its
taskherd.toml runs a planner when the queue is empty, the planner agent adds coder tasks with
`taskherd task add`, each coder task is followed by its QA task (a delayed child), for three
planner cycles.

What must hold: every coder task is followed by exactly one QA task, nothing runs twice, no
delayed task waits for the fallback poll (30 s here) once its run_after has come, and the
planner never runs twice at once.
"""

from __future__ import annotations

import pytest

from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

PLANNER = """
    import os, subprocess
    cycles = "cycles"
    cycle = (int(open(cycles).read()) if os.path.exists(cycles) else 0) + 1
    open(cycles, "w").write(str(cycle))
    if cycle <= 3:
        for n in range(2):
            subprocess.run(["taskherd", "task", "add", f"feature {cycle}.{n}", "--role", "coder",
                            "--prompt", "build it"], check=True, capture_output=True)
    print(f"TASK_COMPLETE: cycle {cycle}")
"""
WORKER = """
    import sys
    sys.stdin.read()
    print("TASK_COMPLETE: done")
"""
POLL = 30.0
DELAY = 1.0


@pytest.fixture
def fleet(tmp_path):
    planner = agent(tmp_path, "planner", PLANNER)
    worker = agent(tmp_path, "worker", WORKER)
    node = Fleet(tmp_path, f"""
        [daemon]
        data_dir = "data"
        path = "/usr/bin:/bin"
        max_concurrent = 4
        poll_interval = "{POLL:g}s"

        [monitor]
        planner = "planner"
        low_water = 1
        planner_every = "1s"
        max_spawn = 5
        prompt = "Add the next features."

        [roles.planner]
        command = ["{PYTHON}", "{planner}"]
        workdir = "{tmp_path}"

        [roles.coder]
        command = ["{PYTHON}", "{worker}"]
        workdir = "{tmp_path}"

        [[roles.coder.chain]]
        role = "qa"
        title = "QA: {{parent_title}}"
        prompt = "Check what task {{parent_id}} did: {{parent_summary}}"
        delay = "{DELAY:g}s"

        [roles.qa]
        command = ["{PYTHON}", "{worker}"]
        workdir = "{tmp_path}"
    """)
    node.up()
    yield node
    node.close()


def test_three_planner_cycles_keep_the_queue_busy_and_checked(fleet):
    def finished(role):
        return [t for t in fleet.store.list_tasks(role=role, limit=1000)
                if t.state is TaskState.COMPLETED]

    fleet.wait_until(lambda: len(finished("qa")) == 6 and len(finished("planner")) >= 4,
                     timeout=90, what="three planner cycles and their work")
    fleet.stop()
    tasks = fleet.store.list_tasks(limit=1000)
    coders = [t for t in tasks if t.role == "coder"]
    planners = {t.id for t in tasks if t.role == "planner"}
    assert len(coders) == 6 and all(t.parent_id in planners for t in coders)
    for coder in coders:
        qa = [t for t in tasks if t.role == "qa" and t.parent_id == coder.id]
        assert len(qa) == 1, f"coder task {coder.id} has {len(qa)} QA tasks"
        assert qa[0].root_id == coder.root_id and qa[0].depth == 2
    runs = {t.id: fleet.store.runs_of_task(t.id) for t in tasks}
    for task in tasks:
        if task.state is TaskState.COMPLETED:
            assert len(runs[task.id]) == 1, f"task {task.id} ran {len(runs[task.id])} times"
            [run] = runs[task.id]
            assert run.outcome is Outcome.SUCCEEDED
            # Never early, and a delayed child did not wait for the fallback poll: the
            # dispatcher woke for its run_after (settling moves run_after, so it is derived).
            due = task.created_at + (DELAY if task.role == "qa" else 0.0)
            assert due <= run.claimed_at < due + POLL / 3, (task, run)
    spans = sorted((run.spawned_at, run.ended_at) for task_id in planners
                   for run in runs[task_id])
    for (_, ended), (started, _) in zip(spans, spans[1:], strict=False):
        assert ended <= started, "two planner runs overlapped"
