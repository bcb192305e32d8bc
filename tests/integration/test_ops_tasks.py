"""The task operations and the Python API, on both stores: role policy applies exactly as
`taskherd task add` applies it, bad input names the field, hand transitions move tasks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import taskherd
from taskherd import BadInput, TaskState, TransitionRefused, open_queue
from taskherd.ops import tasks as task_ops
from taskherd.policy.admission import ClaimRequest

NOW = 1_800_000_000.0


def write_config(tmp_path: Path, database: str) -> Path:
    path = tmp_path / "taskherd.toml"
    path.write_text(f"""
[daemon]
database = "{database}"
data_dir = "{tmp_path / 'data'}"

[roles.coder]
command = ["true"]
max_attempts = 5
review = true

[roles.qa]
command = ["true"]

[pools]
gpu = 1
""")
    return path


@pytest.fixture
def queue(tmp_path: Path, database: str):
    with open_queue(write_config(tmp_path, database)) as opened:
        yield opened


def test_python_api_applies_role_policy_as_task_add_does(queue, tmp_path: Path) -> None:
    added = taskherd.add_task(queue, {"role": "coder", "title": "fix it"}, NOW)
    assert added.created
    assert added.task.max_attempts == 5
    assert added.task.review is True
    # the CLI gives the same task the same policy
    config = tmp_path / "taskherd.toml"
    out = subprocess.run([sys.executable, "-m", "taskherd", "--config", str(config), "task",
                          "add", "again", "-r", "coder", "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert '"max_attempts": 5' in out


def test_an_explicit_value_beats_the_role(queue) -> None:
    added = task_ops.add_task(queue, {"role": "coder", "title": "t", "max_attempts": 2,
                                      "review": False}, NOW)
    assert (added.task.max_attempts, added.task.review) == (2, False)


@pytest.mark.parametrize(("data", "words"), [
    ({"role": "writer", "title": "t"}, ["'writer'", "coder", "qa"]),
    ({"role": "coder", "title": "t", "pool": "tpu"}, ["'tpu'", "gpu"]),
    ({"role": "coder", "title": "t", "max_attempts": 0}, ["max_attempts", "0", "≥ 1"]),
    ({"role": "coder"}, ["title", "required"]),
])
def test_bad_input_names_field_value_and_what_is_accepted(queue, data, words) -> None:
    with pytest.raises(BadInput) as raised:
        task_ops.add_task(queue, data, NOW)
    for word in words:
        assert word in str(raised.value)
    assert task_ops.list_tasks(queue) == []


def test_import_is_all_or_nothing_and_names_the_line(queue) -> None:
    lines = ['{"role": "qa", "title": "one"}', "", '{"role": "qa", "title": 7}']
    with pytest.raises(BadInput, match="line 3: title"):
        task_ops.import_json_lines(queue, lines, NOW)
    assert task_ops.list_tasks(queue) == []
    result = task_ops.import_tasks(queue, [{"role": "qa", "title": "a", "dedup_key": "k"},
                                           {"role": "qa", "title": "b", "dedup_key": "k"}], NOW)
    assert (result["read"], result["created"]) == (2, 1)


def test_hand_transitions_and_reads(queue) -> None:
    task = task_ops.add_task(queue, {"role": "qa", "title": "t"}, NOW).task
    assert task_ops.block(queue, task.id, NOW, "wait").state is TaskState.BLOCKED
    assert task_ops.unblock(queue, task.id, NOW).state is TaskState.READY
    assert task_ops.cancel(queue, task.id, NOW, "no").state is TaskState.CANCELLED
    with pytest.raises(TransitionRefused):
        task_ops.approve(queue, task.id, NOW)
    assert task_ops.requeue(queue, task.id, NOW).state is TaskState.READY
    assert [t.id for t in task_ops.list_tasks(queue, state="ready")] == [task.id]
    assert task_ops.runs_of_task(queue, task.id) == []
    with pytest.raises(BadInput, match="state = 'bogus'"):
        task_ops.list_tasks(queue, state="bogus")


def test_import_taskherd_is_cheap() -> None:
    code = ("import sys, taskherd; heavy = [m for m in ('taskherd.store', 'httpx', 'psutil', "
            "'croniter', 'sqlite3', 'psycopg') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_counts_follow_settles_revivals_and_prunes(queue) -> None:
    store = queue.store
    first = task_ops.add_task(queue, {"role": "qa", "title": "a"}, NOW).task
    second = task_ops.add_task(queue, {"role": "qa", "title": "b"}, NOW).task

    def counts() -> dict[str, int]:
        return {c.state.value: c.count for c in store.counts() if c.role == "qa"}

    assert counts() == {"ready": 2}
    task_ops.cancel(queue, first.id, NOW)
    assert counts() == {"ready": 1, "cancelled": 1}
    task_ops.requeue(queue, first.id, NOW)
    assert counts() == {"ready": 2}
    task_ops.cancel(queue, first.id, NOW)
    task_ops.cancel(queue, second.id, NOW)
    assert counts() == {"cancelled": 2}
    store.prune(NOW + 10)
    assert counts() == {}


def test_status_board_sums_spend_by_role_in_the_database(queue) -> None:
    from taskherd.model import Outcome, RunResult
    from taskherd.model.settings import RetryPolicy
    from taskherd.ops.board import WEEK, status_board

    store = queue.store
    day = 86400.0
    for when, cost in ((NOW - 2 * day, 1.5), (NOW - 60, 0.25), (NOW - WEEK - day, 9.0)):
        task_ops.add_task(queue, {"role": "qa", "title": f"t {when}"}, when)
        claim = store.claim(ClaimRequest("n1", when, 60))
        store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, cost_usd=cost,
                                                 input_tokens=10, output_tokens=3),
                         RetryPolicy(), when + 1)
    board = status_board(queue, NOW)
    assert board["total"]["completed"] == 3
    assert board["by_role"]["qa"]["completed"] == 3
    [qa] = board["cost"]
    assert qa["runs_week"] == 2 and qa["runs_today"] == 1
    assert qa["cost_week"] == pytest.approx(1.75) and qa["cost_today"] == pytest.approx(0.25)
    assert (qa["input_tokens_today"], qa["output_tokens_today"]) == (10, 3)


def test_job_update_keeps_what_is_not_given_and_clears_what_is_named(queue) -> None:
    from taskherd.ops import jobs as job_ops
    from taskherd.store.jobs import JobRefused

    job_ops.add_job(queue, {"name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "role": "qa",
                            "title": "check", "pool": "gpu"}, NOW)
    with pytest.raises(JobRefused, match="already exists"):
        job_ops.add_job(queue, {"name": "nightly", "cron": "0 4 * * *", "timezone": "UTC",
                                "role": "qa", "title": "x"}, NOW)
    job = job_ops.update_job(queue, "nightly", {"title": "check again"}, NOW)
    assert (job.template["title"], job.template["pool"], job.trigger["cron"]) == (
        "check again", "gpu", "0 3 * * *")
    job = job_ops.update_job(queue, "nightly", {}, NOW, clear=["pool"])
    assert "pool" not in job.template
    with pytest.raises(BadInput, match="both sets it and removes it"):
        job_ops.update_job(queue, "nightly", {"pool": "gpu"}, NOW, clear=["pool"])
    assert job_ops.disable_job(queue, "nightly", NOW).enabled is False
    assert job_ops.enable_job(queue, "nightly", NOW).enabled is True
    job_ops.delete_job(queue, "nightly", NOW)
