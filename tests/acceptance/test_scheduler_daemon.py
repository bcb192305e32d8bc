"""The scheduler inside a real daemon: an `every = "1s"` job's tasks are done by a real agent
and every fire is recorded `ok` with its summary; `taskherd reload` syncs an edited file.
Each test runs once per store (`database`: a SQLite file, then a PostgreSQL database)."""

from __future__ import annotations

import pytest

from tests.fleet import PYTHON, Fleet, agent

AGENT = """
import os
print("TASK_COMPLETE: fired by " + os.environ["TASKHERD_TASK_ID"])
"""


def config(tmp_path, database: str, jobs: str) -> str:
    program = agent(tmp_path, "agent", AGENT)
    return f"""
[daemon]
database = "{database}"
data_dir = "data"
timezone = "UTC"
path = "/usr/bin:/bin"

[roles.worker]
command = ["{PYTHON}", "{program}"]
workdir = "{tmp_path}"
{jobs}
"""


EVERY_SECOND = """
[[jobs]]
name = "tick"
role = "worker"
every = "1s"
"""


@pytest.fixture
def fleet(tmp_path, database):
    made = Fleet(tmp_path, config(tmp_path, database, EVERY_SECOND))
    yield made
    made.close()


def test_every_second_job_creates_tasks_that_an_agent_completes(fleet):
    fleet.up()
    ok = fleet.wait_until(
        lambda: [f for f in fleet.store.list_fires(job="tick", limit=100) if f.status == "ok"][2:],
        timeout=30, what="three ok fires")
    for fire in ok:
        assert fire.summary.startswith("fired by ") and fire.task_id is not None
        assert fire.duration is not None
    # Each fire is one scheduled second: none twice.
    times = [f.scheduled_for for f in fleet.store.list_fires(job="tick", limit=1000)]
    assert len(times) == len(set(times))
    assert fleet.stop() == 0


def test_reload_syncs_jobs_from_the_edited_file(fleet, tmp_path, database):
    fleet.up()
    fleet.wait_until(lambda: fleet.store.list_jobs(), what="the config job")
    fleet.config_path.write_text(config(tmp_path, database, """
[[jobs]]
name = "nightly"
role = "worker"
cron = "0 3 * * *"
"""))
    fleet.cli("reload")
    fleet.wait_until(lambda: {j.name: j.enabled for j in fleet.store.list_jobs()}
                     == {"nightly": True, "tick": False}, what="the reloaded jobs")
    assert fleet.stop() == 0
