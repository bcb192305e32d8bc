"""Spawn requests end to end: an agent sends a `spawn` message from inside its run; the task
is created as a child of the agent's task and runs, a job spec becomes a job, and the
agent's task gets a `result` message naming each; a bad spec is answered with the error and
creates nothing."""

from __future__ import annotations

import json

from taskherd.model import TaskState
from tests.fleet import PYTHON, Fleet, agent

PLANNER = """
import json, subprocess, sys
def spawn(spec):
    return subprocess.run([sys.executable, "-m", "taskherd", "msg", "send", "worker",
                           json.dumps(spec), "--kind", "spawn"], capture_output=True,
                          text=True, check=True).stdout
print(spawn({"title": "write the parser", "prompt": "parse it"}))
print(spawn({"title": "bad one", "priority": "P9"}))
print(spawn({"name": "nightly-parse", "cron": "0 3 * * *", "timezone": "UTC",
             "prompt": "parse the logs of the night"}))
print("TASK_COMPLETE: planned")
"""


def test_an_agent_spawns_a_child_and_is_answered(tmp_path):
    planner = agent(tmp_path, "planner", PLANNER)
    fleet = Fleet(tmp_path, f"""
        [daemon]
        data_dir = "data"
        poll_interval = "0.2s"
        [roles.planner]
        command = ["{PYTHON}", "{planner}"]
        [roles.worker]
        command = ["{PYTHON}", "-c", "print('TASK_COMPLETE: parsed')"]
    """)
    try:
        plan = fleet.add("plan the work", role="planner")
        fleet.up()
        assert fleet.wait_final(plan.id).state is TaskState.COMPLETED
        children = [t for t in fleet.store.list_tasks() if t.parent_id == plan.id]
        assert [(t.title, t.role) for t in children] == [("write the parser", "worker")]
        assert fleet.wait_final(children[0].id).state is TaskState.COMPLETED
        answers = json.loads(fleet.cli("msg", "inbox", f"task:{plan.id}", "--json").stdout)
        assert [a["kind"] for a in answers] == ["result", "result", "result"]
        assert answers[0]["body"].startswith(f"spawned task {children[0].id} (role worker)")
        assert "nothing was created: priority 'P9'" in answers[1]["body"]
        job = fleet.store.get_job("nightly-parse")
        assert (job.template["role"], job.source) == ("worker", "cli")
        assert answers[2]["body"].startswith(f"spawned job {job.id} 'nightly-parse' (role "
                                             "worker): first fire ")
        requests = fleet.store.sent_messages(f"task:{plan.id}")
        assert sorted(m.kind for m in requests) == ["spawn", "spawn", "spawn"]
        assert len(fleet.store.list_tasks()) == 2
    finally:
        fleet.close()
