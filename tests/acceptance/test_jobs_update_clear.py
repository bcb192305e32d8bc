"""`taskherd jobs update NAME --no-pool | --no-dedup-key | --no-variants`, as subprocesses.

Options not given keep their value, so a pool, dedup key or variants, once set, could only be
replaced: these flags remove one. Each test fires the job with the scheduler (time passed in)
and checks the task a user gets, not just the stored row.
"""

from __future__ import annotations

import pytest

from taskherd.config import load_config
from taskherd.services.scheduler import Scheduler
from tests.fleet import Fleet

CONFIG = """
[daemon]
database = "q.db"
data_dir = "data"
timezone = "Europe/Berlin"

[roles.worker]
command = ["true"]

[pools]
gpu = 1
"""


@pytest.fixture
def fleet(tmp_path):
    made = Fleet(tmp_path, CONFIG)
    made.cli("jobs", "add", "digest", "-r", "worker", "--every", "1h", "--overlap", "allow",
             "--prompt", "the job's own prompt", "--pool", "gpu", "--dedup-key", "digest",
             "--variant", "a", "--variant", "b")
    yield made
    made.close()


def fire(fleet, times=1):
    """Run the scheduler at the job's next fire times; the tasks of the job, oldest first."""
    scheduler = Scheduler(load_config(fleet.config_path), fleet.store)
    for _ in range(times):
        scheduler.run_once(fleet.store.get_job("digest").next_run_at)
    tasks = fleet.store.list_tasks(limit=100)
    return sorted((t for t in tasks if t.meta.get("job") == "digest"), key=lambda t: t.id)


def test_no_pool_removes_the_pool_and_keeps_the_rest(fleet):
    fleet.cli("jobs", "update", "digest", "--no-pool")
    job = fleet.store.get_job("digest")
    assert "pool" not in job.template
    assert job.template["dedup_key"] == "digest" and len(job.template["variants"]) == 2
    [task] = fire(fleet)
    assert task.pool is None and task.dedup_key == "digest" and task.prompt == "a"


def test_no_dedup_key_lets_a_fire_make_a_task_while_the_last_one_is_open(fleet):
    fleet.cli("jobs", "update", "digest", "--no-dedup-key")
    assert "dedup_key" not in fleet.store.get_job("digest").template
    tasks = fire(fleet, times=2)
    assert [t.dedup_key for t in tasks] == [None, None]
    assert [f.status for f in fleet.store.list_fires(job="digest")] == ["open", "open"]


def test_with_its_dedup_key_the_second_fire_is_skipped(fleet):
    # The behaviour --no-dedup-key removes, so the test above means something.
    assert len(fire(fleet, times=2)) == 1
    assert [f.status for f in fleet.store.list_fires(job="digest")] == ["skipped", "open"]


def test_no_variants_makes_every_fire_use_the_jobs_prompt(fleet):
    fleet.cli("jobs", "update", "digest", "--no-variants")
    assert "variants" not in fleet.store.get_job("digest").template
    fleet.cli("jobs", "update", "digest", "--no-dedup-key")  # so both fires make a task
    assert [t.prompt for t in fire(fleet, times=2)] == ["the job's own prompt"] * 2


def test_all_three_at_once_and_the_schedule_keeps_its_place(fleet):
    before = fleet.store.get_job("digest")
    fleet.cli("jobs", "update", "digest", "--no-pool", "--no-dedup-key", "--no-variants",
              "--prompt", "new words")
    job = fleet.store.get_job("digest")
    assert job.template == {"role": "worker", "title": "digest", "prompt": "new words"}
    assert job.schedule_at == before.schedule_at and job.trigger == before.trigger
    [task] = fire(fleet)
    assert (task.pool, task.dedup_key, task.prompt) == (None, None, "new words")


def test_a_set_value_can_be_set_again_after_it_was_removed(fleet):
    fleet.cli("jobs", "update", "digest", "--no-pool", "--no-variants")
    fleet.cli("jobs", "update", "digest", "--pool", "gpu", "--variant", "c")
    job = fleet.store.get_job("digest")
    assert job.template["pool"] == "gpu" and job.template["variants"] == [{"prompt": "c"}]


@pytest.mark.parametrize("args, names", [
    (["--pool", "gpu", "--no-pool"], ("--pool", "--no-pool")),
    (["--dedup-key", "other", "--no-dedup-key"], ("--dedup-key", "--no-dedup-key")),
    (["--variant", "c", "--no-variants"], ("--variant", "--no-variants")),
    (["--no-pool", "--pool", ""], ("--pool", "--no-pool")),
])
def test_setting_and_removing_one_field_together_is_refused(fleet, args, names):
    before = fleet.store.get_job("digest")
    result = fleet.cli("jobs", "update", "digest", *args, check=False)
    assert result.returncode == 2, result.stderr
    assert "not both" in result.stderr and all(name in result.stderr for name in names)
    assert fleet.store.get_job("digest") == before


@pytest.mark.parametrize("args, why", [
    (["--pool", "nope"], "pool 'nope' is not defined in [pools] (gpu)"),
    (["--pool", ""], "--pool '': expected a non-empty pool"),
    (["--dedup-key", " "], "--dedup-key ' ': expected a non-empty dedup_key"),
    (["--no-pool", "--priority", "P9"], "priority"),
])
def test_bad_input_names_the_field_exits_2_and_changes_nothing(fleet, args, why):
    before = fleet.store.get_job("digest")
    result = fleet.cli("jobs", "update", "digest", *args, check=False)
    assert result.returncode == 2, result.stderr
    assert why in result.stderr
    assert fleet.store.get_job("digest") == before


def test_an_empty_value_points_to_the_flag_that_removes_it(fleet):
    result = fleet.cli("jobs", "update", "digest", "--dedup-key", "", check=False)
    assert result.returncode == 2 and "--no-dedup-key" in result.stderr


def test_the_flags_belong_to_update_not_add(fleet):
    result = fleet.cli("jobs", "add", "other", "-r", "worker", "--every", "1h", "--no-pool",
                       check=False)
    assert result.returncode == 2 and "--no-pool" in result.stderr
    assert [job.name for job in fleet.store.list_jobs()] == ["digest"]


def test_a_config_job_is_not_changed_by_the_flags(fleet):
    fleet.config_path.write_text(CONFIG + '\n[[jobs]]\nname = "filed"\nrole = "worker"\n'
                                 'pool = "gpu"\ncron = "@daily"\n')
    Scheduler(load_config(fleet.config_path), fleet.store).sync_config()
    result = fleet.cli("jobs", "update", "filed", "--no-pool", check=False)
    assert result.returncode == 1 and "config file" in result.stderr
    assert fleet.store.get_job("filed").template["pool"] == "gpu"
