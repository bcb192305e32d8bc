"""`taskherd reload` reaches every service, not only the scheduler: a reloaded role and a job
naming it make tasks the daemon runs; a job naming a role the node does not define is refused
and the running config stays whole. Once per store (`database`)."""

from __future__ import annotations

import signal

import pytest

from taskherd.model import TaskState
from tests.fleet import PYTHON, Fleet, agent

AGENT = """
import os
print("TASK_COMPLETE: done as " + os.environ["TASKHERD_ROLE"])
"""


def config(tmp_path, database: str, extra: str = "") -> str:
    program = agent(tmp_path, "agent", AGENT)
    return f"""
[daemon]
database = "{database}"
data_dir = "data"
timezone = "UTC"
path = "/usr/bin:/bin"

[roles.worker]
command = ["{PYTHON}", "{program}"]
{extra}
"""


def writer(tmp_path, job_role: str) -> str:
    program = agent(tmp_path, "agent", AGENT)
    return f"""
[roles.writer]
command = ["{PYTHON}", "{program}"]

[[jobs]]
name = "words"
role = "{job_role}"
every = "1s"
"""


@pytest.fixture
def fleet(tmp_path, database):
    made = Fleet(tmp_path, config(tmp_path, database))
    yield made
    made.close()


def up(fleet: Fleet) -> None:
    fleet.up()
    fleet.wait_until(lambda: "taskherd up" in fleet.daemon_log.read_text(), what="the daemon")


def test_a_reloaded_role_and_its_job_make_tasks_that_run(fleet, tmp_path, database):
    up(fleet)
    fleet.config_path.write_text(config(tmp_path, database, writer(tmp_path, "writer")))
    fleet.cli("reload")
    done = fleet.wait_until(
        lambda: [t for t in fleet.store.list_tasks(state=TaskState.COMPLETED)
                 if t.role == "writer"], timeout=60, what="a task of the reloaded role done")
    assert done[0].summary == "done as writer"
    assert fleet.stop() == 0


def test_a_job_naming_an_unknown_role_is_refused_and_nothing_changes(fleet, tmp_path, database):
    up(fleet)
    fleet.config_path.write_text(config(tmp_path, database, writer(tmp_path, "ghost")))
    by_cli = fleet.cli("reload", check=False)
    assert by_cli.returncode == 2 and "'ghost' is not defined" in by_cli.stderr
    fleet.daemon.send_signal(signal.SIGHUP)  # the daemon itself refuses it too
    refused = fleet.wait_until(
        lambda: [line for line in fleet.daemon_log.read_text().splitlines()
                 if "reload refused" in line], what="the refusal")
    assert "role 'ghost' is not defined" in refused[0] and "(job 'words')" in refused[0]
    assert fleet.store.list_jobs() == []  # neither the job nor the writer role came in
    assert fleet.stop() == 0
