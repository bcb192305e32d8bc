"""`taskherd task log` and `taskherd runs log` against a real daemon and a real agent: the
whole log, its last lines, JSON, and `--follow`, which prints what the agent writes while it
works and returns by itself once the run has ended."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.fleet import PYTHON, Fleet, agent, read_until

# The agent prints a line, waits for its release file (the agent's own behaviour; the test
# never sleeps), then prints three more and finishes.
AGENT = """
    import os, sys, time
    print("working on it", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    for step in range(3):
        print(f"step {step} done", flush=True)
    print("TASK_COMPLETE: three steps", flush=True)
"""
AFTER_RELEASE = ["step 0 done", "step 1 done", "step 2 done", "TASK_COMPLETE: three steps"]


@pytest.fixture
def fleet(tmp_path):
    program = agent(tmp_path, "agent", AGENT)
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "{tmp_path / 'release'}"]
        workdir = "{tmp_path}"
    """)
    yield node
    (tmp_path / "release").touch()  # a failed test must not leave the agent waiting
    node.close()


def test_follow_prints_the_agent_while_it_works_and_returns_when_the_run_ends(fleet, tmp_path):
    fleet.up()
    task = fleet.add("three steps")
    run = fleet.wait_until(lambda: next(iter(fleet.store.open_runs()), None), what="a run")
    follower = subprocess.Popen(
        [PYTHON, "-m", "taskherd", "task", "log", str(task.id), "--follow"],
        env=fleet.env, cwd=fleet.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        early = read_until(follower, "working on it")
        assert not any(line in early for line in AFTER_RELEASE)
        assert follower.poll() is None, "--follow returned while the agent still works"

        (tmp_path / "release").touch()
        rest, errors = follower.communicate(timeout=20)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, errors
    printed = early + rest.decode()
    assert [line for line in printed.splitlines() if line in AFTER_RELEASE] == AFTER_RELEASE
    assert fleet.wait_final(task.id).state.value == "completed"

    # Once the run is over, the log reads the same through either command.
    whole = fleet.cli("runs", "log", str(run.id)).stdout
    assert whole == printed
    assert fleet.cli("task", "log", str(task.id), "-n", "2").stdout.splitlines() == \
        AFTER_RELEASE[-2:]
    assert fleet.cli("task", "log", str(task.id), "-n", "0").stdout == ""
    data = json.loads(fleet.cli("task", "log", str(task.id), "--run", str(run.id),
                                "--json").stdout)
    assert data["run_id"] == run.id and data["task_id"] == task.id and data["ended"] is True
    assert data["text"] == whole


def test_a_pruned_log_is_refused_with_its_path(fleet, tmp_path):
    fleet.up()
    task = fleet.add("three steps")
    (tmp_path / "release").touch()
    fleet.wait_final(task.id)
    run = fleet.store.runs_of_task(task.id)[-1]
    os.unlink(run.log_path)
    result = fleet.cli("task", "log", str(task.id), check=False)
    assert result.returncode == 1
    assert f"log of run {run.id} is gone" in result.stderr and run.log_path in result.stderr
