"""`taskherd up` with `[api] listen`: the API served beside the daemon, an agent that has
only TASKHERD_URL and its run credential reporting over HTTP, the event stream, /metrics."""

from __future__ import annotations

import json
import signal
import socket
import threading

import httpx
import pytest

from taskherd.ops import open_queue
from taskherd.ops import tokens as token_ops
from tests.fleet import PYTHON, Fleet, agent

# An agent on "another host": no TASKHERD_HOME (so no agent socket), only the URL and token.
REMOTE_AGENT = """\
import os, subprocess, sys
env = {k: v for k, v in os.environ.items() if k != "TASKHERD_HOME"}
assert env["TASKHERD_URL"].startswith("http://127.0.0.1:")
def taskherd(*args):
    subprocess.run([sys.executable, "-m", "taskherd", *args], env=env, check=True)
taskherd("heartbeat", "--progress", "halfway there")
taskherd("task", "add", "a child from afar", "--role", "worker")
taskherd("done", "--summary", "reported over http", "--cost-usd", "0.25")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fleet(tmp_path):
    port = free_port()
    script = agent(tmp_path, "remote", REMOTE_AGENT)
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        durability = "normal"
        max_concurrent = 2

        [roles.remote]
        command = ["{PYTHON}", "{script}"]

        [roles.worker]
        command = ["true"]

        [api]
        listen = "127.0.0.1:{port}"
        """)
    node.url = f"http://127.0.0.1:{port}"
    with open_queue(node.config_path) as queue:
        node.token = token_ops.create_token(queue, "ops", "operator", 0.0).token
    yield node
    node.stop()
    node.close()


def get(fleet, path: str) -> httpx.Response:
    return httpx.get(fleet.url + path, headers={"Authorization": f"Bearer {fleet.token}"},
                     timeout=10)


def test_an_agent_with_only_the_url_reports_over_http(fleet):
    fleet.up()
    fleet.wait_until(lambda: _answers(fleet), what="the API to listen")
    task = fleet.add("work from afar", role="remote")
    done = fleet.wait_final(task.id, timeout=60)
    assert done.state.value == "completed", fleet.daemon_log.read_text()[-2000:]
    [run] = fleet.store.runs_of_task(task.id)
    assert (run.report, run.report_summary, run.progress, run.cost_usd) == (
        "done", "reported over http", "halfway there", 0.25)
    children = [t for t in fleet.store.list_tasks() if t.parent_id == task.id]
    assert [child.title for child in children] == ["a child from afar"]
    # What the API shows is what the store holds.
    shown = get(fleet, f"/v1/tasks/{task.id}").json()
    assert shown["task"]["state"] == "completed" and shown["runs"][0]["report"] == "done"
    metrics = get(fleet, "/metrics").text
    assert 'taskherd_runs_total{outcome="succeeded",role="remote"} 1.0' in metrics
    assert 'taskherd_cost_usd_total{role="remote"} 0.25' in metrics
    assert 'taskherd_service_counts_total{count=' in metrics
    fleet.wait_until(lambda: 'taskherd_run_duration_seconds_count{outcome="succeeded",'
                     'role="remote"} 1.0' in get(fleet, "/metrics").text,
                     what="the run's duration observed")
    assert 'taskherd_ready_to_exec_seconds_count{role="remote"} 1.0' in get(
        fleet, "/metrics").text


def test_runs_of_unknown_cost_are_never_summed_as_zero_in_any_door(fleet):
    """Five command runs that report no cost: every sum says so instead of $0."""
    fleet.up()
    fleet.wait_until(lambda: _answers(fleet), what="the API to listen")
    tasks = [fleet.add(f"unpriced {n}") for n in range(5)]
    for task in tasks:
        assert fleet.wait_final(task.id, timeout=60).state.value == "completed"
    status = fleet.cli("status").stdout
    assert "unknown (5 runs)" in status and "$0.0000" not in status
    assert "unknown (5 runs)" in fleet.cli("runs", "cost").stdout
    for rows in (json.loads(fleet.cli("runs", "cost", "--json").stdout),
                 get(fleet, "/v1/cost").json()):
        assert [(r["role"], r["runs"], r["cost_usd"], r["unpriced_runs"]) for r in rows] == [
            ("worker", 5, None, 5)]
    by_day = get(fleet, "/v1/cost?by=day").json()
    assert [(r["runs"], r["cost_usd"], r["unpriced_runs"]) for r in by_day] == [(5, None, 5)]
    board = json.loads(fleet.cli("status", "--json").stdout)["cost"]
    assert [(r["cost_today"], r["unpriced_today"]) for r in board] == [(None, 5)]
    shown = get(fleet, f"/v1/tasks/{tasks[0].id}").json()
    assert (shown["cost_usd"], shown["unpriced_runs"]) == (None, 1)
    metrics = get(fleet, "/metrics").text
    assert 'taskherd_unpriced_runs_total{role="worker"} 5.0' in metrics


def test_the_event_stream_shows_a_task_the_cli_adds(fleet):
    fleet.up()
    fleet.wait_until(lambda: _answers(fleet), what="the API to listen")
    seen: list[dict] = []
    hello = threading.Event()
    added = threading.Event()

    def read() -> None:
        with httpx.stream("GET", fleet.url + "/v1/events", timeout=30,
                          headers={"Authorization": f"Bearer {fleet.token}"}) as stream:
            kind = None
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind == "hello":
                    hello.set()
                elif line.startswith("data: ") and kind == "task_added":
                    seen.append(json.loads(line[6:]))
                    added.set()
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert hello.wait(10)
    out = fleet.cli("task", "add", "watched", "--role", "worker", "--json")
    task_id = json.loads(out.stdout)["id"]
    assert added.wait(10), "no task_added event within 10 s"
    assert seen[0]["task_id"] == task_id


def test_a_daemon_whose_api_cannot_listen_says_why(fleet):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(fleet.url.rsplit(":", 1)[1])))
        taken.listen()
        result = fleet.cli("up", check=False)
    assert result.returncode == 1
    assert "could not listen" in result.stderr


def _answers(fleet) -> bool:
    try:
        return get(fleet, "/v1/status").status_code == 200
    except httpx.TransportError:
        return False


def _api_process(fleet):
    import psutil

    # The daemon has heard its child serve (it may answer a moment before it says so).
    fleet.wait_until(lambda: "API and dashboard at" in fleet.daemon_log.read_text(),
                     what="the daemon to see its API serve")
    [child] = [p for p in psutil.Process(fleet.daemon.pid).children()
               if "taskherd.api.process" in p.cmdline()]
    return child


def test_the_api_serves_from_its_own_process_started_again_when_it_dies(fleet):
    import psutil

    fleet.up()
    fleet.wait_until(lambda: _answers(fleet), what="the API to listen")
    first = _api_process(fleet)
    assert first.pid != fleet.daemon.pid
    first.kill()
    fleet.wait_until(lambda: not psutil.pid_exists(first.pid) or
                     first.status() == psutil.STATUS_ZOMBIE, what="the API process to die")
    fleet.wait_until(lambda: "the API process serves again" in fleet.daemon_log.read_text(),
                     timeout=30, what="the API process started again")
    assert _answers(fleet)
    second = _api_process(fleet)
    assert second.pid != first.pid
    # The daemon kept running its agents meanwhile, and the new process sees its counts.
    task = fleet.add("after the restart", role="worker")
    assert fleet.wait_final(task.id, timeout=60).state.value == "completed"
    assert 'taskherd_service_counts_total{count=' in get(fleet, "/metrics").text
    assert "ended with status" in fleet.daemon_log.read_text()


def test_a_daemon_killed_takes_its_api_process_with_it(fleet):
    import psutil

    fleet.up()
    fleet.wait_until(lambda: _answers(fleet), what="the API to listen")
    child = _api_process(fleet)
    fleet.stop(signal.SIGKILL)
    fleet.wait_until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
                     timeout=30, what="the API process to stop after its daemon")
    assert not _answers(fleet)
