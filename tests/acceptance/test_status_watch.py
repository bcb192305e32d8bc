"""`taskherd status --watch`: the live board follows the queue and each running agent's last
line, printed into a pipe when it changes, until Ctrl-C (exit 0)."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.fleet import PYTHON, Fleet, agent, read_until

AGENT = """
    import os, sys, time
    print("halfway there", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    print("TASK_COMPLETE: all the way")
"""


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
    """)
    yield node
    (tmp_path / "release").touch()
    node.close()


def test_the_board_shows_the_running_agent_then_the_finished_queue(fleet, tmp_path):
    fleet.up()
    task = fleet.add("walk the plank")
    watcher = subprocess.Popen(
        [PYTHON, "-m", "taskherd", "status", "--watch", "--interval", "0.1"],
        env=fleet.env, cwd=fleet.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        running = read_until(watcher, "halfway there")
        line = next(line for line in running.splitlines() if "halfway there" in line)
        assert f"#{task.id}" in line and "worker" in line and "walk the plank" in line
        (tmp_path / "release").touch()
        read_until(watcher, "completed 1")
        watcher.send_signal(signal.SIGINT)
        _, errors = watcher.communicate(timeout=20)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, errors
