"""The scheduler against a real store, each test once per store (`database`: a SQLite file,
then a PostgreSQL database), with time passed in: nothing here sleeps.

Each test drives `Scheduler.run_once(now)` at chosen instants and finishes the tasks it made
through the store's worker path, as an agent would.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from taskherd.config import parse_config
from taskherd.model import Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.jobs import parse_job
from taskherd.policy.schedules import schedule_start
from taskherd.services.scheduler import Scheduler
from taskherd.store import JobNotFound, open_store
from tests.interleave import pause_before, wait_for_lock_wait_or

T0 = datetime(2026, 6, 16, 12, 0, tzinfo=ZoneInfo("UTC")).timestamp()  # a plain Tuesday noon


def local(text: str, zone: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


class Rig:
    def __init__(self, tmp_path, database, jobs=(), tz="UTC"):
        self.tmp_path, self.database, self.tz = tmp_path, database, tz
        self.store = open_store(database, durability="normal")
        self.configure(jobs)

    def configure(self, jobs):
        raw = {"daemon": {"database": self.database, "timezone": self.tz},
               "roles": {"worker": {"command": ["true"], "max_attempts": 1}},
               "jobs": [{"role": "worker", **job} for job in jobs]}
        self.config = parse_config(raw, base_dir=self.tmp_path)
        if hasattr(self, "scheduler"):
            return self.scheduler.reload(self.config, now=self.now)
        self.scheduler = Scheduler(self.config, self.store)
        return None

    def sync(self, now):
        self.now = now
        return self.scheduler.sync_config(now=now)

    def tick(self, now):
        self.now = now
        return self.scheduler.run_once(now)

    def tasks(self, job=None):
        tasks = self.store.list_tasks(limit=10_000)
        return sorted((t for t in tasks if job is None or t.meta.get("job") == job),
                      key=lambda t: t.id)

    def fires(self, job):
        return list(reversed(self.store.list_fires(job=job, limit=10_000)))

    def finish(self, now, outcome=Outcome.SUCCEEDED, summary="done", started=None):
        """Claim (at `started`) and finish (at `now`) the oldest ready task."""
        started = now if started is None else started
        claim = self.store.claim(ClaimRequest("n1", started, 60.0))
        assert claim is not None, "no ready task to finish"
        self.store.mark_spawned(claim.run.id, started, 60.0, pid=1, pid_started_at=1.0,
                                log_path=None)
        result = RunResult(outcome, summary=summary if outcome is Outcome.SUCCEEDED else None,
                           error=None if outcome is Outcome.SUCCEEDED else "it broke")
        self.store.finish_run(claim.run.id, result, RetryPolicy(), now)
        return claim.task

    def add_cli_job(self, now, **table):
        spec = parse_job({"role": "worker", **table}, self.config)
        return self.store.upsert_job(spec.definition(), source="cli", now=now,
                                     schedule_at=schedule_start(spec.trigger, now)).job


@pytest.fixture
def rig(tmp_path, database):
    made = []

    def make(jobs=(), tz="UTC"):
        made.append(Rig(tmp_path, database, jobs, tz))
        return made[-1]

    yield make
    for r in made:
        r.store.close()


# --- daylight saving: a daily 02:30 job fires exactly once a day ----------------------------


@pytest.mark.parametrize("zone, change_day", [
    ("America/New_York", "2026-03-08"),  # spring forward: 02:30 does not exist
    ("America/New_York", "2026-11-01"),  # fall back: 01:00-02:00 happens twice
    ("Europe/Berlin", "2026-03-29"),  # spring forward: 02:30 does not exist
    ("Europe/Berlin", "2026-10-25"),  # fall back: 02:30 happens twice
])
def test_daily_0230_fires_once_per_day_across_dst(rig, zone, change_day):
    r = rig([{"name": "nightly", "cron": "30 2 * * *", "overlap": "allow"}], tz=zone)
    start = local(f"{change_day}T00:00", zone) - 86400  # midnight the day before, give or take
    start = local(datetime.fromtimestamp(start, ZoneInfo(zone)).strftime("%Y-%m-%dT00:00"), zone)
    r.sync(start)
    now = start
    while now < start + 3 * 86400:  # the day before, the change day, the day after
        r.tick(now)
        now += 300
    fired = [datetime.fromtimestamp(t.meta["scheduled_for"], ZoneInfo(zone)) for t in r.tasks()]
    per_day = Counter(f.date().isoformat() for f in fired)
    assert len(fired) == 3 and set(per_day.values()) == {1}, fired
    change = [f for f in fired if f.date().isoformat() == change_day][0]
    # In the spring gap 02:30 is shifted by the gap's length; on fall-back days it is 02:30.
    assert (change.hour, change.minute) in {(2, 30), (3, 30)}
    assert all(f.status == "open" for f in r.fires("nightly"))


# --- overlap ----------------------------------------------------------------------------------


def test_overlap_skip_records_a_skipped_fire_while_the_task_is_open(rig):
    r = rig([{"name": "poll", "every": "10m"}])
    r.sync(T0)
    r.tick(T0 + 600)
    r.tick(T0 + 1200)
    fires = r.fires("poll")
    assert [f.status for f in fires] == ["open", "skipped"]
    assert "still open (overlap = skip)" in fires[1].error
    assert len(r.tasks()) == 1
    r.finish(T0 + 1300)
    r.tick(T0 + 1800)
    assert [f.status for f in r.fires("poll")] == ["ok", "skipped", "open"]


def test_overlap_allow_makes_a_task_every_time(rig):
    r = rig([{"name": "poll", "every": "10m", "overlap": "allow"}])
    r.sync(T0)
    for k in range(1, 4):
        r.tick(T0 + 600 * k)
    assert len(r.tasks()) == 3


def test_overlap_queue_counts_fires_and_releases_one_per_finished_task(rig):
    r = rig([{"name": "poll", "every": "10m", "overlap": "queue"}])
    r.sync(T0)
    for k in range(1, 4):
        r.tick(T0 + 600 * k)
    job = r.store.get_job("poll")
    assert job.queued == 2 and len(r.tasks()) == 1
    assert [f.status for f in r.fires("poll")] == ["open", "queued", "queued"]
    r.finish(T0 + 1900)
    r.tick(T0 + 1901)  # settles the first fire and releases one queued fire
    assert r.store.get_job("poll").queued == 1
    assert [f.status for f in r.fires("poll")] == ["ok", "open", "queued"]
    r.finish(T0 + 1950)
    r.tick(T0 + 1951)
    assert r.store.get_job("poll").queued == 0
    assert [f.status for f in r.fires("poll")] == ["ok", "ok", "open"]
    assert len(r.tasks()) == 3


def test_a_released_queued_fire_carries_the_time_it_was_scheduled_for(rig):
    # Its task said it was scheduled for its release time: an agent reporting on "the 12:20
    # run" was told 12:31, and a time-of-day variant was picked by the wrong clock.
    r = rig([{"name": "poll", "every": "10m", "overlap": "queue"}])
    r.sync(T0)
    r.tick(T0 + 600)
    r.tick(T0 + 1200)  # held behind the first fire's open task
    r.finish(T0 + 1850)
    r.tick(T0 + 1860)  # releases it, 11 minutes late
    released = r.tasks()[1]
    assert released.meta["scheduled_for"] == T0 + 1200
    assert released.created_at == T0 + 1860
    fire = r.fires("poll")[1]
    assert (fire.status, fire.task_id) == ("open", released.id)
    assert fire.scheduled_for == T0 + 1200 and fire.fired_at == T0 + 1860


def test_a_released_queued_fire_picks_the_variant_of_its_planned_time(rig):
    r = rig([{"name": "post", "cron": "0 * * * *", "overlap": "queue", "variants": [
        {"from": "06:00", "prompt": "day"}, {"from": "18:00", "prompt": "evening"}]}])
    hour = 3600
    r.sync(T0 + 3 * hour)
    r.tick(T0 + 4 * hour)  # 16:00: a day post that runs long
    r.tick(T0 + 5 * hour)  # 17:00: held behind it
    r.finish(T0 + 6 * hour + 600)
    r.tick(T0 + 6 * hour + 600)  # 18:10: releases the 17:00 fire and holds the 18:00 one
    assert [t.prompt for t in r.tasks()] == ["day", "day"]
    assert r.tasks()[1].meta["scheduled_for"] == T0 + 5 * hour


def test_overlap_queue_holds_a_queued_fire_while_a_run_now_task_is_open(rig):
    # A run-now made in the same pass as a release used to make two tasks at once.
    r = rig([{"name": "poll", "every": "10m", "overlap": "queue"}])
    r.sync(T0)
    r.tick(T0 + 600)
    r.tick(T0 + 1200)  # queued behind the first
    r.finish(T0 + 1250)
    r.store.request_run_now("poll", T0 + 1250)
    r.tick(T0 + 1251)
    assert [(f.kind, f.status) for f in r.fires("poll")] == [
        ("schedule", "ok"), ("schedule", "queued"), ("run_now", "open")]
    r.finish(T0 + 1300)
    r.tick(T0 + 1301)
    assert [f.status for f in r.fires("poll")] == ["ok", "open", "ok"]


def test_a_queued_fire_whose_task_cannot_be_made_ends_as_an_error(rig):
    # It stayed 'queued' forever while a second, error fire was recorded beside it.
    r = rig([{"name": "poll", "every": "10m", "overlap": "queue"}])
    r.sync(T0)
    r.tick(T0 + 600)
    r.tick(T0 + 1200)
    # The job's role goes away with its file entry; the job stays, disabled, and is enabled.
    r.scheduler.reload(parse_config({"daemon": {"database": r.database, "timezone": "UTC"},
                                     "roles": {"other": {"command": ["true"]}}},
                                    base_dir=r.tmp_path), now=T0 + 1205)
    r.store.set_job_enabled("poll", True, T0 + 1210, schedule_at=T0 + 3600)
    r.finish(T0 + 1250)
    r.tick(T0 + 1251)
    fires = r.fires("poll")
    assert [f.status for f in fires] == ["ok", "error"]
    assert "cannot make its task" in fires[1].error and fires[1].scheduled_for == T0 + 1200
    assert r.store.get_job("poll").queued == 0


# --- missed fires after downtime --------------------------------------------------------------


@pytest.mark.parametrize("policy, tasks", [("skip", 0), ("once", 1), ("all", 10)])
def test_missed_fire_policies_after_downtime(rig, policy, tasks):
    r = rig([{"name": "hourly", "cron": "0 * * * *", "missed_fire": policy,
              "overlap": "allow"}])
    r.sync(T0)
    down_until = T0 + 24 * 3600 + 1800  # a day and a half hour later: 24 fires were missed
    counts = r.tick(down_until)
    assert len(r.tasks()) == tasks
    skipped = [f for f in r.fires("hourly") if f.status == "skipped"]
    assert len(skipped) == 1 and f"{24 - tasks} fire(s)" in skipped[0].error
    assert f"missed_fire = {policy}" in skipped[0].error
    assert counts.get("skipped") == 1
    job = r.store.get_job("hourly")
    assert job.schedule_at == T0 + 25 * 3600  # the schedule continues from now, not from then
    if policy == "all":  # bounded: the newest 10, oldest first
        times = [t.meta["scheduled_for"] for t in r.tasks()]
        assert times == [T0 + h * 3600 for h in range(15, 25)]


def test_missed_fire_skip_still_fires_a_slightly_late_tick(rig):
    r = rig([{"name": "hourly", "cron": "0 * * * *", "missed_fire": "skip"}])
    r.sync(T0)
    r.tick(T0 + 3600 + 20)
    assert len(r.tasks()) == 1 and not [f for f in r.fires("hourly") if f.status == "skipped"]


# --- failure backoff and retries --------------------------------------------------------------


def test_consecutive_failures_delay_the_next_fire_30s_1m_5m_15m_60m_and_reset(rig):
    r = rig([{"name": "flaky", "every": "1s"}])
    r.sync(T0)
    now = T0 + 1
    delays = []
    for _ in range(6):
        r.tick(now)
        r.finish(now + 0.5, Outcome.FAILED)
        r.tick(now + 0.5)
        job = r.store.get_job("flaky")
        delays.append(job.backoff_until - (now + 0.5))
        assert job.next_run_at == job.backoff_until
        assert r.tick(job.backoff_until - 0.1).get("fired") is None  # nothing before it ends
        now = job.backoff_until
    assert delays == [30, 60, 300, 900, 3600, 3600]
    r.tick(now)
    r.finish(now + 1)
    r.tick(now + 1)
    job = r.store.get_job("flaky")
    assert job.failures == 0 and job.backoff_until is None
    skipped = [f for f in r.fires("flaky") if f.status == "skipped"]
    assert skipped and "held back by failure backoff" in skipped[0].error


def test_max_retries_retry_a_failed_fire_with_lineage_and_growing_delay(rig):
    r = rig([{"name": "report", "cron": "0 6 * * *", "max_retries": 2}])
    r.sync(T0)
    first = T0 + 18 * 3600  # 06:00 the next day
    r.tick(first)
    ended = first + 10
    r.finish(ended, Outcome.FAILED)
    r.tick(ended)
    job = r.store.get_job("report")
    assert job.retry_at == ended + 30 and job.retry_count == 1
    r.tick(ended + 30)
    r.finish(ended + 40, Outcome.FAILED)
    r.tick(ended + 40)
    assert r.store.get_job("report").retry_at == ended + 40 + 60  # 30 s × 2^(2−1)
    r.tick(ended + 100)
    r.finish(ended + 110, Outcome.FAILED)
    r.tick(ended + 110)
    fires = r.fires("report")
    assert [(f.kind, f.status, f.retry_count) for f in fires] == [
        ("schedule", "error", 0), ("retry", "error", 1), ("retry", "error", 2)]
    assert fires[1].retry_of == fires[0].id and fires[2].retry_of == fires[1].id
    job = r.store.get_job("report")
    assert job.retry_at is None and job.failures == 3  # retries exhausted
    assert all(t.meta["job"] == "report" for t in r.tasks())


def test_a_successful_retry_resets_the_failure_count(rig):
    r = rig([{"name": "report", "cron": "0 6 * * *", "max_retries": 1}])
    r.sync(T0)
    r.tick(T0 + 18 * 3600)
    r.finish(T0 + 18 * 3600 + 5, Outcome.FAILED)
    r.tick(T0 + 18 * 3600 + 5)
    r.tick(T0 + 18 * 3600 + 35)
    r.finish(T0 + 18 * 3600 + 40)
    r.tick(T0 + 18 * 3600 + 40)
    job = r.store.get_job("report")
    assert job.failures == 0 and job.backoff_until is None
    assert [f.status for f in r.fires("report")] == ["error", "ok"]


def test_a_timed_out_task_is_recorded_as_timeout(rig):
    r = rig([{"name": "slow", "every": "10m"}])
    r.sync(T0)
    r.tick(T0 + 600)
    r.finish(T0 + 700, Outcome.TIMED_OUT, started=T0 + 600)
    r.tick(T0 + 700)
    fire = r.fires("slow")[0]
    assert fire.status == "timeout" and fire.duration == pytest.approx(100, abs=1)


def test_history_records_duration_summary_and_the_task(rig):
    r = rig([{"name": "digest", "every": "10m", "prompt": "write it"}])
    r.sync(T0)
    r.tick(T0 + 600)
    task = r.finish(T0 + 642, summary="wrote the digest", started=T0 + 600)
    r.tick(T0 + 650)
    fire = r.fires("digest")[0]
    assert (fire.status, fire.task_id, fire.summary) == ("ok", task.id, "wrote the digest")
    assert fire.duration == pytest.approx(42, abs=0.01)  # from its first run's start to its end


def test_cancelled_task_records_a_cancelled_fire(rig):
    r = rig([{"name": "digest", "every": "10m"}])
    r.sync(T0)
    r.tick(T0 + 600)
    r.store.cancel(r.tasks()[0].id, T0 + 610, reason="not today")
    r.tick(T0 + 611)
    fire = r.fires("digest")[0]
    assert (fire.status, fire.error) == ("cancelled", "not today")
    assert r.store.get_job("digest").failures == 0


# --- variants, run-now, one-shot --------------------------------------------------------------


def test_variants_rotate_in_order(rig):
    r = rig([{"name": "social", "every": "10m", "overlap": "allow",
              "variants": [{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}]}])
    r.sync(T0)
    for k in range(1, 6):
        r.tick(T0 + 600 * k)
    assert [t.prompt for t in r.tasks()] == ["a", "b", "c", "a", "b"]


def test_variants_by_time_of_day(rig):
    r = rig([{"name": "social", "every": "4h", "overlap": "allow", "variants": [
        {"from": "06:00", "prompt": "morning"}, {"from": "18:00", "prompt": "evening"}]}],
        tz="Europe/Berlin")
    start = local("2026-06-16T00:30", "Europe/Berlin")
    r.sync(start)
    now = start
    while now < start + 86400:
        now += 3600
        r.tick(now)
    by_hour = {datetime.fromtimestamp(t.meta["scheduled_for"], ZoneInfo("Europe/Berlin")).hour:
               t.prompt for t in r.tasks()}
    assert by_hour == {4: "evening", 8: "morning", 12: "morning", 16: "morning", 20: "evening",
                       0: "evening"}


def test_run_now_fires_at_the_next_tick_without_moving_the_schedule(rig):
    r = rig([{"name": "nightly", "cron": "0 3 * * *"}])
    r.sync(T0)
    schedule_at = r.store.get_job("nightly").schedule_at
    r.store.request_run_now("nightly", T0 + 10)
    assert r.scheduler.next_wake(T0 + 10) == T0 + 10
    r.tick(T0 + 11)
    job = r.store.get_job("nightly")
    assert job.schedule_at == schedule_at and job.next_run_at == schedule_at
    assert [f.kind for f in r.fires("nightly")] == ["run_now"]
    assert r.tick(T0 + 12).get("fired") is None  # once


def test_manual_job_fires_only_on_run_now(rig):
    r = rig([{"name": "by-hand"}])
    r.sync(T0)
    assert r.store.get_job("by-hand").next_run_at is None
    assert r.scheduler.next_wake(T0) is None
    r.store.request_run_now("by-hand", T0 + 5)
    r.tick(T0 + 5)
    assert len(r.tasks()) == 1


def test_at_job_fires_once_and_is_deleted_after_its_run(rig):
    r = rig([{"name": "launch", "at": "2026-06-16T15:00", "delete_after_run": True}],
            tz="Europe/Berlin")
    r.sync(T0)
    at = local("2026-06-16T15:00", "Europe/Berlin")
    assert r.scheduler.next_wake(T0) == at
    r.tick(at)
    r.tick(at + 3600)
    assert len(r.tasks()) == 1
    r.finish(at + 3700)
    r.tick(at + 3700)
    with pytest.raises(JobNotFound):
        r.store.get_job("launch")
    assert [f.status for f in r.fires("launch")] == ["ok"]  # the history stays
    # The file still names it: a restart or reload does not bring back a job that never fires.
    assert r.sync(at + 3800)["spent"] == ["launch"]
    with pytest.raises(JobNotFound):
        r.store.get_job("launch")


# --- exactly once: compare-and-set --------------------------------------------------------------


def test_two_schedulers_on_one_database_fire_each_time_once(rig):
    r = rig([{"name": f"job{i}", "every": "1m", "overlap": "allow"} for i in range(20)])
    r.sync(T0)
    other_store = open_store(r.database, durability="normal")
    try:
        other = Scheduler(r.config, other_store)
        for k in range(1, 6):
            now = T0 + 60 * k
            due = r.store.due_jobs(now, 100)
            # Both plan from the same read; both claim; the CAS lets one of them through.
            claims_a = [r.scheduler._plan(job, now) for job in due]
            claims_b = [other._plan(job, now) for job in due]
            won_b = other_store.claim_fires(claims_b, now)
            won_a = r.store.claim_fires(claims_a, now)
            assert all(x is None for x in won_a) and all(x is not None for x in won_b)
    finally:
        other_store.close()
    assert len(r.tasks()) == 20 * 5
    assert Counter(t.meta["scheduled_for"] for t in r.tasks()) == {T0 + 60 * k: 20
                                                                   for k in range(1, 6)}


def test_two_schedulers_settling_one_jobs_fires_at_once_both_finish_their_pass(tmp_path, pg_url):
    # PostgreSQL only: SQLite has one writer at a time, so two settle passes never interleave.
    # Here two nodes read the finished fires at different moments: one held the job's second
    # fire and waited for the job, the other (having settled the first fire) held the job and
    # waited for that second fire. The server broke the deadlock and one node lost its pass.
    config = parse_config({"daemon": {"database": pg_url, "timezone": "UTC"},
                           "roles": {"worker": {"command": ["true"]}},
                           "jobs": [{"name": "poll", "role": "worker", "every": "10m",
                                     "overlap": "allow"}]}, base_dir=tmp_path)
    succeeded = RunResult(Outcome.SUCCEEDED, summary="done")
    with open_store(pg_url, durability="normal") as first, \
            open_store(pg_url, durability="normal") as second:
        one, other = Scheduler(config, first), Scheduler(config, second)
        one.sync_config(now=T0)
        one.run_once(T0 + 600)
        one.run_once(T0 + 1200)  # two open fires of the job
        early = first.claim(ClaimRequest("n1", T0 + 1210, 60.0))
        late = first.claim(ClaimRequest("n1", T0 + 1210, 60.0))
        first.finish_run(late.run.id, succeeded, RetryPolicy(), T0 + 1220)
        holds_the_second_fire, go_on = pause_before(second, "get_job_by_id")
        with ThreadPoolExecutor(2) as threads:
            try:
                settling = threads.submit(other.run_once, T0 + 1230)  # sees one fire finished
                assert holds_the_second_fire.wait(10)
                first.finish_run(early.run.id, succeeded, RetryPolicy(), T0 + 1225)
                passing = threads.submit(one.run_once, T0 + 1231)  # sees both
                wait_for_lock_wait_or(passing.done, pg_url)
            finally:
                go_on.set()
            counts = [passing.result(10), settling.result(10)]
        assert counts[0]["settled"] + counts[1]["settled"] == 2
        assert [f.status for f in first.list_fires(job="poll")] == ["ok", "ok"]


# --- config sync --------------------------------------------------------------------------------


def test_config_sync_creates_updates_disables_and_leaves_cli_jobs_alone(rig):
    r = rig([{"name": "a", "cron": "0 * * * *"}, {"name": "b", "every": "30m"}])
    first = r.sync(T0)
    assert sorted(first["created"]) == ["a", "b"]
    r.add_cli_job(T0, name="mine", cron="*/5 * * * *")
    assert r.sync(T0 + 1)["unchanged"] == ["a", "b"]
    result = r.configure([{"name": "a", "cron": "30 * * * *"}, {"name": "c", "every": "1h"}])
    assert result["created"] == ["c"] and result["updated"] == ["a"] and result["disabled"] == ["b"]
    assert r.store.get_job("a").schedule_at == T0 + 1800  # rescheduled by the new trigger
    assert not r.store.get_job("b").enabled
    mine = r.store.get_job("mine")
    assert mine.enabled and mine.source == "cli"
    # A config job may not take a CLI job's name: it is reported, the CLI job stays.
    result = r.configure([{"name": "mine", "every": "1h"}])
    assert result["conflicts"] == ["mine"]
    assert r.store.get_job("mine").trigger["cron"] == "*/5 * * * *"
    # Back in the file: enabled again, scheduled from now.
    result = r.configure([{"name": "b", "every": "30m"}])
    assert "b" in result["updated"] and r.store.get_job("b").enabled


def test_an_unchanged_sync_keeps_the_schedule_in_place(rig):
    r = rig([{"name": "hourly", "cron": "0 * * * *"}])
    r.sync(T0)
    r.sync(T0 + 3 * 3600)  # a restart after three hours down
    assert r.store.get_job("hourly").schedule_at == T0 + 3600
    r.tick(T0 + 3 * 3600)
    assert len(r.tasks()) == 1  # missed_fire = once: one catch-up


def test_fire_history_is_pruned_after_retention(rig):
    r = rig([{"name": "poll", "every": "10m", "overlap": "allow"}])
    r.sync(T0)
    r.tick(T0 + 600)
    r.store.cancel(r.tasks()[0].id, T0 + 601)
    r.tick(T0 + 602)
    assert r.store.prune_fires(T0 + 603) == 1
    assert r.fires("poll") == []


def test_the_scheduler_sleeps_until_the_earliest_next_run(rig):
    r = rig([{"name": "a", "cron": "0 * * * *"}, {"name": "b", "every": "5m"}])
    r.sync(T0)
    assert r.scheduler.next_wake(T0) == T0 + 300
    r.tick(T0 + 300)
    assert r.scheduler.next_wake(T0 + 300) == T0 + 600


def test_deleting_a_job_while_a_scheduler_settles_its_fire_lets_both_finish(tmp_path, pg_url):
    # PostgreSQL only, as above: the settle held the fire and waited for the job, the delete
    # held the job and waited for the fire (to set its job_id to NULL); one of them failed.
    config = parse_config({"daemon": {"database": pg_url, "timezone": "UTC"},
                           "roles": {"worker": {"command": ["true"]}},
                           "jobs": [{"name": "poll", "role": "worker", "every": "10m"}]},
                          base_dir=tmp_path)
    with open_store(pg_url, durability="normal") as first, \
            open_store(pg_url, durability="normal") as second:
        scheduler = Scheduler(config, second)
        scheduler.sync_config(now=T0)
        scheduler.run_once(T0 + 600)
        claim = first.claim(ClaimRequest("n1", T0 + 610, 60.0))
        first.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), T0 + 620)
        holds_the_fire, go_on = pause_before(second, "get_job_by_id")
        with ThreadPoolExecutor(2) as threads:
            try:
                settling = threads.submit(scheduler.run_once, T0 + 630)
                assert holds_the_fire.wait(10)
                deleting = threads.submit(first.delete_job, "poll", T0 + 631)
                wait_for_lock_wait_or(deleting.done, pg_url)
            finally:
                go_on.set()
            assert settling.result(10)["settled"] == 1
            deleting.result(10)
        [fire] = first.list_fires(job="poll")
        assert (fire.status, fire.job_id) == ("ok", None)
        assert first.list_jobs() == []
