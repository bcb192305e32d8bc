"""An agent's command waits for a daemon that is away, for up to `[daemon] agent_report_wait`.

With a real daemon `kill -9`'d while its agent works: the agent's `taskherd done`, made while
no daemon runs, says once that it waits, and lands when the daemon is back (no strike, one
run); with a short wait and no daemon back, it fails with the one-line error after the wait.
Over HTTP (an agent whose daemon is on another host), a proxy's 503 and a refused connection
are waited through the same way. Each try of one request carries the same request id.
"""

from __future__ import annotations

import json
import signal
import socket
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from taskherd.agent import door as agent_door
from taskherd.agent.door import DoorError
from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

AGENT = """
    import json, os, subprocess, sys, time

    gate, out, python = sys.argv[1], sys.argv[2], sys.argv[3]
    open(out + ".started", "w").close()
    while not os.path.exists(gate):  # the agent's work, until the test lets it report
        time.sleep(0.05)
    # Its stderr goes to the run's log: what the command says while it waits is read there.
    said = subprocess.run([python, "-m", "taskherd", "done", "--summary", "reported"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    with open(out + ".tmp", "w") as written:
        json.dump({"code": said.returncode}, written)
    os.replace(out + ".tmp", out)
    sys.exit(said.returncode)
"""
WAITING = "waiting up to"


def fleet_waiting(root: Path, wait: str | None) -> Fleet:
    program = agent(root, "agent", AGENT)
    setting = f'agent_report_wait = "{wait}"' if wait is not None else ""
    return Fleet(root, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        node = "n1"
        path = "/usr/bin:/bin"
        {setting}

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "{root / 'gate'}", "{root / 'out'}",
                   "{PYTHON}"]
        workdir = "{root}"
        idle_timeout = "1h"
    """)


def report_while_killed(fleet: Fleet) -> tuple[int, Path]:
    """Start the daemon and one agent, kill the daemon, let the agent report: the task's id
    and its run's log."""
    fleet.up()
    task = fleet.add("report while the daemon is away")
    fleet.wait_until((fleet.root / "out.started").exists, what="the agent to start")
    [run] = fleet.wait_until(lambda: [run for run in fleet.store.open_runs() if run.pid],
                             what="the agent's spawn on record")
    fleet.stop(signal.SIGKILL)
    (fleet.root / "gate").write_text("go")
    return task.id, Path(run.log_path)


@pytest.fixture
def fleets(tmp_path):
    made: list[Fleet] = []

    def make(wait: str | None) -> Fleet:
        made.append(fleet_waiting(tmp_path, wait))
        return made[-1]

    yield make
    for fleet in made:
        fleet.close()


def test_a_report_made_while_the_daemon_restarts_lands_when_it_is_back(fleets):
    fleet = fleets(None)  # the default wait, 60 s
    task_id, log = report_while_killed(fleet)
    fleet.wait_until(lambda: WAITING in log.read_text(), what="the agent's command to wait")
    fleet.up()
    task = fleet.wait_final(task_id)
    assert task.state is TaskState.COMPLETED and task.attempts == 0
    assert task.summary == "reported"
    [run] = fleet.store.runs_of_task(task_id)
    assert run.outcome is Outcome.SUCCEEDED and run.report == "done"
    assert json.loads((fleet.root / "out").read_text()) == {"code": 0}
    said = [line for line in log.read_text().splitlines() if WAITING in line]
    assert said == [(f"taskherd: no daemon answers at {fleet.data_dir / 'agent.sock'}: "
                     f"Connection refused; {WAITING} 60s for the daemon to come back")]
    assert fleet.stop() == 0


def test_a_daemon_that_stays_away_gets_the_one_line_error_after_the_wait(fleets):
    fleet = fleets("1s")
    _, log = report_while_killed(fleet)
    out = fleet.root / "out"
    fleet.wait_until(out.exists, what="the agent's command to give up")
    assert json.loads(out.read_text()) == {"code": 1}
    address = fleet.data_dir / "agent.sock"
    said = log.read_text().splitlines()[-2:]
    assert said == [
        (f"taskherd: no daemon answers at {address}: Connection refused; {WAITING} 1s for the "
         "daemon to come back"),
        (f"Error: no daemon answers at {address}: Connection refused (waited 1s: [daemon] "
         "agent_report_wait)")]


class Proxy(BaseHTTPRequestHandler):
    """A reverse proxy before an API whose daemon is restarting: 503 twice, then the answer."""

    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        Proxy.seen.append(parse_qs(urlsplit(self.path).query)["request_id"][0])
        status, body = (503, {"error": "no upstream"}) if len(Proxy.seen) <= 2 else (
            200, {"run_id": 7, "verdict": "done"})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_over_http_a_503_is_waited_through_and_every_try_is_the_same_request(tmp_path):
    Proxy.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {"TASKHERD_RUN_TOKEN": "t", "TASKHERD_URL": f"http://127.0.0.1:{server.server_port}",
           "TASKHERD_HOME": str(tmp_path / "elsewhere"), "TASKHERD_REPORT_WAIT": "30"}
    try:
        answer = agent_door.call("report", {"verdict": "done"}, env)
    finally:
        server.shutdown()
        server.server_close()
    assert answer == {"run_id": 7, "verdict": "done"}
    assert len(Proxy.seen) == 3 and len(set(Proxy.seen)) == 1


def test_over_http_nobody_listening_is_unreachable_after_the_wait(tmp_path):
    with socket.socket() as taken:  # a port nothing listens on
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    env = {"TASKHERD_RUN_TOKEN": "t", "TASKHERD_URL": f"http://127.0.0.1:{port}",
           "TASKHERD_REPORT_WAIT": "0.3"}
    with pytest.raises(DoorError) as raised:
        agent_door.call("heartbeat", {}, env)
    assert raised.value.kind == "unreachable"
    assert str(raised.value).endswith("(waited 0.3s: [daemon] agent_report_wait)")


def test_a_connection_dropped_before_the_answer_is_tried_again_as_the_same_request():
    """A daemon killed while it served a request: the connection ends without an answer."""
    # A short folder: a socket's address holds 108 bytes, and pytest's folders can be longer.
    with tempfile.TemporaryDirectory(prefix="door-") as home:
        dropped_then_answered(Path(home))


def dropped_then_answered(home: Path) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(agent_door.socket_path(home)))
    listener.listen()
    listener.settimeout(20)  # a client that never tries again fails the test, not hangs it
    requests: list[dict] = []

    def serve() -> None:
        for answered in (False, True):
            connection, _ = listener.accept()
            with connection:
                requests.append(json.loads(connection.makefile("rb").readline()))
                if answered:
                    connection.sendall(b'{"ok": true, "result": {"run_id": 7}}\n')

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    env = {"TASKHERD_RUN_TOKEN": "t", "TASKHERD_HOME": str(home),
           "TASKHERD_REPORT_WAIT": "30"}
    try:
        assert agent_door.call("heartbeat", {}, env) == {"run_id": 7}
    finally:
        server.join(10)
        listener.close()
    assert [r["op"] for r in requests] == ["heartbeat", "heartbeat"]
    assert requests[0]["request_id"] == requests[1]["request_id"]
