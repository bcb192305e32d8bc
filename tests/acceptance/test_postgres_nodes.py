"""Several daemons (nodes) on one PostgreSQL database: each task runs once, on one of them;
a dead node's tasks are rescued by another; a node name is held by one daemon at a time.

Each node is a real `taskherd up` with a data dir of its own, as on its own host; they share
only the database. Agents wait for a release file (their own behaviour; the tests never
sleep) so the tests decide when work may finish.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter

import psycopg
import pytest

from taskherd.host import procs
from taskherd.model import NewTask, Outcome, TaskState
from taskherd.store import open_store
from tests.fleet import PYTHON, Fleet, agent

AGENT = """
    import os, sys, time
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    print("TASK_COMPLETE: done on " + os.environ["TASKHERD_TASK_ID"])
"""


def node_config(database: str, node: str, program: str, release: str, lease: str = "60s",
                tags: tuple[str, ...] = (), node_timeout: str = "15s") -> str:
    return f"""
        [daemon]
        database = "{database}"
        data_dir = "data"
        timezone = "UTC"
        node = "{node}"
        max_concurrent = 2
        lease = "{lease}"
        node_timeout = "{node_timeout}"
        tags = {json.dumps(list(tags))}

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "{release}"]
        idle_timeout = "1h"

        [roles.trainer]
        command = ["{PYTHON}", "-S", "{program}", "{release}"]
        idle_timeout = "1h"
        nodes = ["gpu"]
    """


@pytest.fixture
def nodes(tmp_path, pg_url):
    program = agent(tmp_path, "agent", AGENT)
    release = tmp_path / "release"
    made: dict[str, Fleet] = {}

    def node(name: str, *, as_name: str | None = None, lease: str = "60s",
             tags: tuple[str, ...] = (), node_timeout: str = "15s") -> Fleet:
        root = tmp_path / name
        root.mkdir()
        made[name] = Fleet(root, node_config(pg_url, as_name or name, program, str(release),
                                              lease, tags, node_timeout))
        return made[name]

    node.release = release
    yield node
    release.touch()  # a failed test must not leave agents waiting
    for fleet in made.values():
        for run in fleet.store.open_runs(None):
            if run.pid and run.node in made:
                procs._kill_group(run.pid, signal.SIGKILL)
        fleet.close()


def test_two_nodes_share_one_queue_and_run_each_task_once(nodes):
    first, second = nodes("n1"), nodes("n2")
    first.up()
    second.up()
    tasks = [first.add(f"task {i}").id for i in range(20)]

    def both_busy() -> bool:  # both nodes hold work before any of it may finish
        return {run.node for run in first.store.open_runs() if run.pid} == {"n1", "n2"}

    first.wait_until(both_busy, what="both nodes running agents")
    nodes.release.touch()
    for task_id in tasks:
        assert first.wait_final(task_id, timeout=60).state is TaskState.COMPLETED
    runs = [run for task_id in tasks for run in first.store.runs_of_task(task_id)]
    assert Counter(run.task_id for run in runs) == dict.fromkeys(tasks, 1)
    assert {run.outcome for run in runs} == {Outcome.SUCCEEDED}
    assert set(Counter(run.node for run in runs)) == {"n1", "n2"}


def test_the_tasks_of_a_dead_node_are_rescued_by_another_within_node_timeout(nodes):
    # Leases of an hour: only the node's silence can bring its task back this soon.
    doomed = nodes("n1", lease="1h", node_timeout="2s")
    survivor = nodes("n2", lease="1h", node_timeout="2s")
    doomed.up()
    task = doomed.add("outlives its node")
    run = doomed.wait_until(lambda: next((r for r in doomed.store.open_runs() if r.pid), None),
                            what="the agent running on n1")
    # The host dies: the daemon and its agent, with no chance to record anything.
    doomed.stop(signal.SIGKILL)
    procs._kill_group(run.pid, signal.SIGKILL)
    survivor.up()
    nodes.release.touch()
    assert survivor.wait_final(task.id, timeout=60).state is TaskState.COMPLETED
    lost, redone = survivor.store.runs_of_task(task.id)
    assert (lost.node, lost.outcome) == ("n1", Outcome.LOST)
    assert "node n1 went silent" in lost.error and "declared down by n2" in lost.error
    assert (redone.node, redone.outcome) == ("n2", Outcome.SUCCEEDED)
    assert survivor.store.get_task(task.id).attempts == 0  # a rescue is not a strike
    assert "DOWN: declared by n2" in survivor.cli("status").stdout


def test_a_node_back_after_being_declared_down_stops_the_agents_it_lost(nodes):
    doomed = nodes("n1", lease="1h", node_timeout="2s")
    doomed.up()
    task = doomed.add("taken over")
    run = doomed.wait_until(lambda: next((r for r in doomed.store.open_runs() if r.pid), None),
                            what="the agent running on n1")
    doomed.stop(signal.SIGKILL)  # the daemon dies; its agent works on, unwatched
    survivor = nodes("n2", lease="1h", node_timeout="2s")
    survivor.up()
    redone = survivor.wait_until(
        lambda: next((r for r in survivor.store.runs_of_task(task.id) if r.node == "n2"
                      and r.pid), None), timeout=30, what="n2 to take the task over")
    assert procs.adopt(run.pid, run.pid_started_at, run.log_path).is_alive()
    doomed.up()
    doomed.wait_until(lambda: not procs.adopt(run.pid, run.pid_started_at,
                                              run.log_path).is_alive(),
                      what="n1 to stop the agent of the run it lost")
    assert "rescued while this node was down: stopping its agent" in doomed.daemon_log.read_text()
    nodes.release.touch()
    assert survivor.wait_final(task.id, timeout=60).state is TaskState.COMPLETED
    runs = survivor.store.runs_of_task(task.id)
    assert [(r.node, r.outcome) for r in runs] == [("n1", Outcome.LOST), ("n2", Outcome.SUCCEEDED)]
    assert redone.id == runs[1].id


def test_a_role_that_needs_a_tag_runs_only_on_nodes_that_have_it(nodes):
    gpu, plain = nodes("gpu-box", tags=("gpu", "linux")), nodes("cpu-box", tags=("linux",))
    plain.up()
    plain.wait_until(lambda: "taskherd up" in plain.daemon_log.read_text(), what="cpu-box up")
    trained = [plain.add(f"train {i}", role="trainer").id for i in range(3)]
    shown = plain.wait_until(lambda: "no live node can take them" in (
        out := plain.cli("status").stdout) and out, what="status to name the unserved role")
    assert "role trainer: 3 ready task(s) wait" in shown and "tagged gpu" in shown
    gpu.up()
    nodes.release.touch()
    for task_id in trained:
        assert gpu.wait_final(task_id, timeout=60).state is TaskState.COMPLETED
    assert {run.node for t in trained for run in gpu.store.runs_of_task(t)} == {"gpu-box"}


def test_a_node_name_is_held_by_one_daemon_across_hosts(nodes):
    first = nodes("host-a", as_name="builder")
    first.up()
    first.wait_until(lambda: "taskherd up" in first.daemon_log.read_text(), what="n1 up")
    twin = nodes("host-b", as_name="builder")  # another data dir: another host's file lock
    code = twin.up().wait(30)
    assert code != 0
    assert "already runs as node 'builder'" in twin.daemon_log.read_text()
    assert first.daemon.poll() is None  # the first one is untouched


def test_doctor_checks_a_postgres_database_and_never_shows_its_password(nodes, pg_url, tmp_path):
    fleet = nodes("n1")
    result = fleet.cli("doctor", check=False)
    assert f"database {pg_url} opens and is writable" in result.stdout, result.stdout

    wrong = pg_url.replace("postgres@", "postgres:s3cret@").rsplit("/", 1)[0] + "/absent"
    (tmp_path / "wrong.toml").write_text(f'[daemon]\ndatabase = "{wrong}"\n')
    env = fleet.env | {"TASKHERD_CONFIG": str(tmp_path / "wrong.toml")}
    status = fleet.cli("status", check=False, env=env)
    assert status.returncode == 2
    assert "cannot open database" in status.stderr and "absent" in status.stderr
    assert "s3cret" not in status.stderr + status.stdout


def test_a_node_rides_out_a_lost_database_connection(nodes, pg_url):
    node = nodes("n1")
    node.up()
    node.wait_until(lambda: "taskherd up" in node.daemon_log.read_text(), what="the daemon up")
    with psycopg.connect(pg_url, autocommit=True) as admin:  # as a server restart would
        cut = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]
    assert cut >= 2  # the daemon's store and its LISTEN connection at least
    with open_store(pg_url, durability="normal") as fresh:
        task = fresh.enqueue(NewTask(role="worker", title="after the outage"), time.time()).task
    nodes.release.touch()
    node.store.close()
    node.store = open_store(pg_url, durability="normal")
    assert node.wait_final(task.id, timeout=60).state is TaskState.COMPLETED
    assert node.daemon.poll() is None, "the daemon exited on a lost connection"
