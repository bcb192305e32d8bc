"""Schedule benchmark: taskherd's cron triggers beside APScheduler 3's CronTrigger.

    python bench/schedules.py                  # 10,000 jobs, best of 5 rounds
    python bench/schedules.py --jobs 2000 --rounds 3

Both contenders run in this one process on the same jobs: a seeded, realistic mix of cron
expressions (every few minutes, hourly, daily, weekdays, business hours, monthly, quarterly)
spread over several time zones. Measured:

1. next fire time of every job from one `now`: `trigger.next_after(now)` against APScheduler's
   `CronTrigger.get_next_fire_time(None, now)` (what its scheduler calls when a job is added
   to the memory job store). Building the triggers is timed too, apart. Both answers are
   compared job by job; any disagreement is printed, since a fast wrong answer is no answer.
2. find due jobs: see `find_due_jobs_comparison`, a hook for whoever builds the scheduler's
   store part; this file does not fake that figure.

Weekdays are written as names: APScheduler 3 reads a numeric 0 as Monday, cron as Sunday.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger as APSCronTrigger

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taskherd.policy import schedules
from taskherd.policy.schedules import CronTrigger

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Los_Angeles",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Australia/Sydney",
    "Europe/London",
]
# (weight, template); {m} a minute, {h} an hour, {d} a day of month.
TEMPLATES = [
    (20, "*/5 * * * *"),
    (10, "*/15 * * * *"),
    (15, "{m} * * * *"),
    (20, "{m} {h} * * *"),
    (12, "{m} {h} * * mon-fri"),
    (8, "*/10 8-18 * * mon-fri"),
    (5, "{m} */2 * * *"),
    (5, "{m} {h} {d} * *"),
    (3, "{m} {h} * * sun"),
    (2, "0 9 1 jan,apr,jul,oct *"),
]
# A plain Tuesday afternoon: no DST change within days, where the two are known to differ.
NOW = datetime(2026, 6, 16, 14, 23, 17, tzinfo=UTC)


def make_jobs(count: int, seed: int = 7) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    weights, templates = zip(*TEMPLATES, strict=True)
    jobs = []
    for _ in range(count):
        template = rng.choices(templates, weights)[0]
        expr = template.format(m=rng.randrange(60), h=rng.randrange(24), d=rng.randrange(1, 29))
        jobs.append((expr, rng.choice(ZONES)))
    return jobs


def best_of(rounds: int, work: Callable[[], object]) -> tuple[float, object]:
    # The collector is paused so a stray collection does not land in one contender's timing.
    best, result = float("inf"), None
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            result = work()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best, result


def build_taskherd(jobs: list[tuple[str, str]]) -> list[CronTrigger]:
    # Cold every round: taskherd shares a compiled expression between jobs that repeat it,
    # and a cache left warm by the previous round would time nothing but a dict lookup.
    schedules._compile_cron_text.cache_clear()
    return [CronTrigger(expr, ZoneInfo(zone)) for expr, zone in jobs]


def find_due_jobs_comparison(jobs: list[tuple[str, str]], now: datetime) -> tuple[float, float]:
    """Figure (2): seconds to find the due jobs among `jobs` at `now`, taskherd's store query
    (`due_jobs`, a range scan of the partial index on next_run_at in SQLite) and APScheduler 3's
    `MemoryJobStore.get_due_jobs(now)`, in that order, best of 5 each.

    Both stores hold the same jobs with the same next fire times: each job's next fire after
    `now - 1h`, so the jobs that fire within the hour before `now` are due (a catch-up-sized
    answer, not an empty one). Both answers are checked to name the same jobs.
    """
    import tempfile

    from apscheduler.job import Job as APSJob
    from apscheduler.jobstores.memory import MemoryJobStore

    from taskherd.model.jobs import JobDefinition
    from taskherd.store.sqlite import SQLiteStore

    since = now - timedelta(hours=1)
    triggers = build_taskherd(jobs)
    nexts = [t.next_after(since) for t in triggers]
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "q.db", durability="normal")
        for i, ((expr, zone), nxt) in enumerate(zip(jobs, nexts, strict=True)):
            definition = JobDefinition(f"job{i}", {"role": "r", "title": "t"},
                                       {"cron": expr, "timezone": zone}, zone)
            store.upsert_job(definition, source="cli", now=since.timestamp(),
                             schedule_at=nxt.timestamp())
        ours, due_ours = best_of(5, lambda: store.due_jobs(now.timestamp(), len(jobs)))
        # The common wake-up: nothing due yet (a minute before the earliest next fire).
        quiet = min(nexts) - timedelta(minutes=1)
        idle_ours, _ = best_of(5, lambda: store.due_jobs(quiet.timestamp(), len(jobs)))
        store.close()

    # No scheduler object: a Job only keeps a reference to it, and reads nothing else of it.
    scheduler = SimpleNamespace(timezone=UTC)  # all Job reads of it: next_run_time's zone
    memory = MemoryJobStore()
    for i, ((expr, zone), nxt) in enumerate(zip(jobs, nexts, strict=True)):
        trigger = APSCronTrigger.from_crontab(expr, timezone=ZoneInfo(zone))
        memory.add_job(APSJob(scheduler, id=f"job{i}", func=print, trigger=trigger,
                              executor="default", args=(), kwargs={}, name=f"job{i}",
                              misfire_grace_time=1, coalesce=True, max_instances=1,
                              next_run_time=nxt))
    theirs, due_aps = best_of(5, lambda: memory.get_due_jobs(now))
    idle_aps, _ = best_of(5, lambda: memory.get_due_jobs(quiet))
    report("none due", idle_ours, idle_aps, len(jobs))
    names_ours = sorted(job.name for job in due_ours)
    names_aps = sorted(job.id for job in due_aps)
    print(f"  due at now: taskherd {len(names_ours)} jobs, apscheduler {len(names_aps)} jobs"
          f"{'' if names_ours == names_aps else '  (THEY DIFFER)'}")
    return ours, theirs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    jobs = make_jobs(args.jobs)
    distinct = len({expr for expr, _ in jobs})
    print(
        f"{len(jobs)} cron jobs ({distinct} distinct expressions) over {len(ZONES)} zones, "
        f"now = {NOW.isoformat()}, best of {args.rounds}"
    )

    build_ours, ours = best_of(args.rounds, lambda: build_taskherd(jobs))
    build_aps, theirs = best_of(
        args.rounds, lambda: [APSCronTrigger.from_crontab(e, timezone=ZoneInfo(z)) for e, z in jobs]
    )
    next_ours, ours_next = best_of(args.rounds, lambda: [t.next_after(NOW) for t in ours])
    next_aps, aps_next = best_of(
        args.rounds, lambda: [t.get_next_fire_time(None, NOW) for t in theirs]
    )

    report("build triggers", build_ours, build_aps, len(jobs))
    report("next fire time", next_ours, next_aps, len(jobs))
    differ = [(job, a, b) for job, a, b in zip(jobs, ours_next, aps_next, strict=True) if a != b]
    print(f"answers that differ: {len(differ)} of {len(jobs)}")
    for (expr, zone), a, b in differ[:5]:
        print(f"  {expr!r} {zone}: taskherd {a}  apscheduler {b}")

    try:
        due_ours, due_aps = find_due_jobs_comparison(jobs, NOW)
        report("find due jobs", due_ours, due_aps, len(jobs))
    except NotImplementedError:
        print(
            "  find due jobs: not measured yet (find_due_jobs_comparison is a hook for the "
            "scheduler's store)"
        )
    return 1 if differ else 0


def report(what: str, ours: float, theirs: float, count: int) -> None:
    print(
        f"{what:>15}: taskherd {ours * 1e3:8.1f} ms ({ours / count * 1e6:5.1f} µs/job)   "
        f"apscheduler 3 {theirs * 1e3:8.1f} ms ({theirs / count * 1e6:5.1f} µs/job)   "
        f"taskherd is {theirs / ours:.2f}× apscheduler's speed"
    )


if __name__ == "__main__":
    sys.exit(main())
