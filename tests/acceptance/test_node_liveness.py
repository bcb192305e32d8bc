"""Is the daemon alive? Nodes record a heartbeat in the store: `status` shows each node (up
since, last seen, agents running, its taskherd version), a node silent for its node_timeout is
down and its runs orphaned, and `runs stale` names them; a clean stop is shown as stopped."""

from __future__ import annotations

import json
import signal

import pytest

from tests.fleet import PYTHON, Fleet, agent


@pytest.fixture
def fleet(tmp_path):
    program = agent(tmp_path, "waits", """
        import os, sys, time
        print("working", flush=True)
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.05)
    """)
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        node = "box-1"
        lease = "1s"
        node_timeout = "2s"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "{tmp_path / 'release'}"]
    """)
    yield node
    (tmp_path / "release").touch()
    node.close()


def status(fleet):
    return json.loads(fleet.cli("status", "--json").stdout)


def test_status_shows_the_node_up_then_down_after_kill_9_with_its_run_orphaned(fleet):
    fleet.up()
    task = fleet.add("long work")
    fleet.wait_until(lambda: fleet.store.get_task(task.id).state.value == "running", what="run")
    [node] = fleet.wait_until(
        lambda: [n for n in status(fleet)["nodes"] if n["running"] == 1], what="node heartbeat")
    assert node["name"] == "box-1" and node["status"] == "up" and node["open_runs"] == 1
    assert node["orphaned_runs"] == 0
    fleet.stop(signal.SIGKILL)
    [node] = fleet.wait_until(
        lambda: [n for n in status(fleet)["nodes"] if n["status"] == "down"], timeout=30,
        what="the node to be judged down")
    assert node["orphaned_runs"] == 1
    shown = fleet.cli("status").stdout
    assert "node box-1" in shown and "DOWN: last seen" in shown and "taskherd 0." in shown
    stale = json.loads(fleet.cli("runs", "stale", "--json").stdout)
    assert [run["task_id"] for run in stale] == [task.id]
    assert "box-1 is down" in stale[0]["reason"]


def test_a_clean_stop_is_shown_as_stopped(fleet):
    fleet.up()
    fleet.wait_until(lambda: status(fleet)["nodes"], what="the node to say it is up")
    assert fleet.stop() == 0
    [node] = status(fleet)["nodes"]
    assert node["status"] == "stopped" and node["stopped_at"] is not None
    assert "stopped at" in fleet.cli("status").stdout


def test_a_write_says_when_no_daemon_is_up_or_no_node_defines_the_role(fleet):
    added = fleet.cli("task", "add", "waits", "-r", "worker")
    assert "no taskherd daemon is up" in added.stderr
    fleet.up()
    fleet.wait_until(lambda: status(fleet)["nodes"], what="the node to say it is up")
    (fleet.root / "release").touch()
    added = fleet.cli("task", "add", "runs", "-r", "worker")
    assert "note:" not in added.stderr
    added = fleet.cli("task", "add", "anyone", "-r", "any")
    assert "note:" not in added.stderr


def test_a_write_says_when_the_nodes_up_do_not_define_the_tasks_role(fleet):
    import time

    fleet.store.node_up("gpu-box", host="gpu", pid=1, version="x", lease=60.0,
                        roles=["trainer"], now=time.time())
    added = fleet.cli("task", "add", "needs a worker", "-r", "worker")
    assert "no running node can run role 'worker'" in added.stderr
    assert "up: gpu-box" in added.stderr


def test_status_says_when_ready_tasks_have_no_live_node_that_can_take_them(fleet):
    import time

    (fleet.root / "taskherd.toml").write_text((fleet.root / "taskherd.toml").read_text()
                                              + '\n[roles.trainer]\ncommand = ["true"]\n'
                                              'nodes = ["gpu"]\n')
    fleet.store.node_up("box-1", host="cpu", pid=1, version="x", lease=60.0, roles=["worker"],
                        now=time.time(), tags=["linux"], timeout=60.0)
    fleet.add("train it", role="trainer")
    shown = fleet.cli("status").stdout
    assert ("role trainer: 1 ready task(s) wait, no live node can take them (it needs a node "
            "tagged gpu); up: box-1") in shown
    [row] = status(fleet)["unserved"]
    assert row == {"role": "trainer", "ready": 1, "needs_tags": ["gpu"], "up": ["box-1"]}
    assert "tags linux" in shown
