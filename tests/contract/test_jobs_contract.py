"""The job store contract: upsert, due query, the compare-and-set fire claim, settling fires,
run-now, enable/disable, delete and pruning. Runs against every store (conftest `store`)."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.jobs import FireClaim, JobDefinition, PlannedFire
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.queue import failure_backoff
from taskherd.store.jobs import JobNotFound, JobRefused

NOW = 1_000_000.0


def definition(name="j", **fields):
    values = {"template": {"role": "coder", "title": name},
              "trigger": {"cron": "0 * * * *", "timezone": "UTC"}, "timezone": "UTC"}
    return JobDefinition(name=name, **(values | fields))


def upsert(store, name="j", schedule_at=NOW + 60, source="cli", **fields):
    return store.upsert_job(definition(name, **fields), source=source, now=NOW,
                            schedule_at=schedule_at)


def fire_claim(job, at, title="t", **state):
    task = NewTask(role="coder", title=title, meta={"job": job.name})
    return FireClaim(job, {"schedule_at": at + 3600, "next_run_at": at + 3600, **state},
                     (PlannedFire(at, "schedule", task=task),))


def test_upsert_creates_updates_and_keeps_an_unchanged_job(store):
    created = upsert(store)
    assert created.change == "created" and created.job.next_run_at == NOW + 60
    assert upsert(store, schedule_at=NOW + 999).change == "unchanged"
    assert store.get_job("j").schedule_at == NOW + 60
    updated = upsert(store, trigger={"cron": "30 * * * *", "timezone": "UTC"},
                     schedule_at=NOW + 90)
    assert updated.change == "updated" and updated.job.schedule_at == NOW + 90
    with pytest.raises(JobRefused):
        upsert(store, source="config")
    with pytest.raises(JobNotFound):
        store.get_job("nope")


def test_due_jobs_are_enabled_jobs_whose_next_run_has_come(store):
    upsert(store, "early", schedule_at=NOW + 10)
    upsert(store, "late", schedule_at=NOW + 20)
    upsert(store, "off", schedule_at=NOW + 5, enabled=False)
    assert [j.name for j in store.due_jobs(NOW + 15, 10)] == ["early"]
    assert [j.name for j in store.due_jobs(NOW + 25, 10)] == ["early", "late"]
    assert [j.name for j in store.due_jobs(NOW + 25, 1)] == ["early"]
    assert store.earliest_next_run() == NOW + 10


def test_a_claim_enqueues_the_task_and_records_the_fire_in_one_step(store):
    job = upsert(store).job
    fires = store.claim_fire(fire_claim(job, NOW + 60), NOW + 60)
    assert len(fires) == 1 and fires[0].status == "open" and fires[0].task_id is not None
    assert store.get_task(fires[0].task_id).meta == {"job": "j"}
    after = store.get_job("j")
    assert after.next_run_at == NOW + 3660 and after.open_fires == 1
    # The same read claimed again: the compare-and-set refuses it.
    assert store.claim_fire(fire_claim(job, NOW + 60), NOW + 60) is None
    assert len(store.list_tasks()) == 1


def test_two_stores_on_one_database_claim_the_same_fire_exactly_once(store, reopen):
    other = reopen()
    try:
        job = upsert(store).job
        seen_by_other = other.due_jobs(NOW + 60, 10)[0]
        results = [store.claim_fire(fire_claim(job, NOW + 60), NOW + 60),
                   other.claim_fire(fire_claim(seen_by_other, NOW + 60), NOW + 60)]
    finally:
        other.close()
    assert sum(r is not None for r in results) == 1
    assert len(store.list_tasks()) == 1 and len(store.list_fires(job="j")) == 1


def test_a_duplicate_dedup_key_makes_a_skipped_fire(store):
    open_task = store.enqueue(NewTask(role="coder", title="x", dedup_key="k"), NOW).task
    job = upsert(store).job
    task = NewTask(role="coder", title="t", dedup_key="k")
    claim = FireClaim(job, {"next_run_at": None, "schedule_at": None},
                      (PlannedFire(NOW + 60, "schedule", task=task),))
    fire = store.claim_fire(claim, NOW + 60)[0]
    assert fire.status == "skipped" and f"task {open_task.id}" in fire.error
    assert fire.finished_at == NOW + 60


def run_fire_task(store, at: float, outcome: Outcome, summary: str | None = None) -> None:
    claim = store.claim(ClaimRequest("n1", at, 60.0))
    store.mark_spawned(claim.run.id, at, 60.0, pid=1, pid_started_at=1.0, log_path=None)
    store.finish_run(claim.run.id, RunResult(outcome, summary=summary),
                     RetryPolicy(backoff_base=1, backoff_cap=1), at + 10)


def test_settle_records_the_outcome_and_applies_the_job_policy(store):
    job = upsert(store).job
    fire = store.claim_fire(fire_claim(job, NOW + 60), NOW + 60)[0]
    run_fire_task(store, NOW + 70, Outcome.SUCCEEDED, "fine")
    settled = store.settle_fires(NOW + 90)
    assert [(f.id, f.status, f.summary, f.duration) for f in settled] == [
        (fire.id, "ok", "fine", 10.0)]
    assert store.get_job("j").failures == 0 and store.get_job("j").open_fires == 0
    assert store.settle_fires(NOW + 91) == []  # settled once


def test_a_dead_fire_backs_its_job_off(store):
    job = upsert(store).job
    fire = store.claim_fire(fire_claim(job, NOW + 60), NOW + 60)[0]
    for attempt in range(3):  # the task's default max_attempts
        run_fire_task(store, NOW + 100 * (attempt + 1), Outcome.FAILED)
    [settled] = store.settle_fires(NOW + 400)
    assert (settled.id, settled.status) == (fire.id, "error")
    job = store.get_job("j")
    assert job.failures == 1
    assert job.backoff_until == settled.finished_at + failure_backoff(1)


def test_run_now_enable_disable_and_delete(store):
    upsert(store, schedule_at=NOW + 3600)
    job = store.request_run_now("j", NOW + 5)
    assert job.run_now_at == NOW + 5 and job.next_run_at == NOW + 5
    assert job.schedule_at == NOW + 3600  # the schedule does not move
    off = store.set_job_enabled("j", False, NOW + 6)
    assert not off.enabled and store.due_jobs(NOW + 10, 10) == []
    with pytest.raises(JobRefused):
        store.request_run_now("j", NOW + 7)
    on = store.set_job_enabled("j", True, NOW + 8, schedule_at=NOW + 7200)
    assert on.enabled and on.schedule_at == NOW + 7200
    store.delete_job("j", NOW + 9)
    with pytest.raises(JobNotFound):
        store.get_job("j")


def test_fire_history_outlives_its_job_and_is_pruned(store):
    job = upsert(store).job
    claim = FireClaim(job, {"next_run_at": None, "schedule_at": None},
                      (PlannedFire(NOW + 60, "schedule", status="skipped", error="why"),))
    store.claim_fire(claim, NOW + 60)
    store.delete_job("j", NOW + 61)
    assert [f.status for f in store.list_fires(job="j")] == ["skipped"]
    assert store.prune_fires(NOW + 59) == 0
    assert store.prune_fires(NOW + 61) == 1


def test_deleting_a_job_ends_its_queued_fires(store):
    # They were left 'queued' (unfinished, never pruned) once no job could release them.
    job = upsert(store).job
    claim = FireClaim(job, {"next_run_at": None, "schedule_at": None, "queued": 1},
                      (PlannedFire(NOW + 60, "schedule", status="queued"),))
    store.claim_fire(claim, NOW + 60)
    store.delete_job("j", NOW + 70)
    [fire] = store.list_fires(job="j")
    assert (fire.status, fire.error, fire.finished_at) == (
        "skipped", "its job was deleted", NOW + 70)
