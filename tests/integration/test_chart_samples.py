"""The charts' sampler, with time passed in: one sample a minute of the queue's depth by role
(the config's idle roles as 0), kept a week, whatever the number of passes or nodes; and the
past hours summed once an hour, the week's chart then read from the sums."""

from __future__ import annotations

import pytest

from taskherd.config import parse_config
from taskherd.model import NewTask
from taskherd.services.chart_samples import ChartSampler
from taskherd.store import open_store
from taskherd.store.charts import Buckets

T0 = 1_800_000_000.0  # a minute's start
WEEK = 7 * 86400


@pytest.fixture
def store(database):
    with open_store(database, durability="normal") as opened:
        yield opened


def sampler_for(tmp_path, store) -> ChartSampler:
    config = parse_config({"daemon": {"data_dir": str(tmp_path / "data"), "node": "n1"},
                           "roles": {"coder": {"command": ["true"]},
                                     "idle": {"command": ["true"]}}}, base_dir=tmp_path)
    return ChartSampler(config, store)


def depth(store, start: float, minutes: int) -> dict:
    return {(row["bucket"], row["role"]): row["ready"]
            for row in store.queue_depth_buckets(Buckets(start, 60.0, minutes))}


def test_each_minute_is_sampled_once_with_idle_roles_as_zero(tmp_path, store):
    sampler = sampler_for(tmp_path, store)
    store.enqueue(NewTask(role="coder", title="waits"), T0)
    assert sampler.run_once(T0 + 5) == {"sampled": 2, "pruned": 0,
                                           "quarters_summed": 672}
    store.enqueue(NewTask(role="coder", title="waits too"), T0 + 6)
    # A second pass in the same minute samples nothing; the next minute's does.
    assert sampler.run_once(T0 + 30)["sampled"] == 0
    assert sampler.next_wake(T0 + 30) == T0 + 60
    assert sampler.run_once(T0 + 61)["sampled"] == 2
    assert depth(store, T0, 2) == {(0, "coder"): 1, (0, "idle"): 0, (1, "coder"): 2,
                                   (1, "idle"): 0}


def test_samples_older_than_a_week_are_pruned(tmp_path, store):
    sampler = sampler_for(tmp_path, store)
    sampler.run_once(T0)
    sampler.run_once(T0 + 60)
    counts = sampler.run_once(T0 + WEEK + 60)
    assert counts["sampled"] == 2 and counts["pruned"] == 2  # T0's rows: older than a week
    assert set(depth(store, T0, 2)) == {(1, "coder"), (1, "idle")}


def test_past_quarters_are_summed_once_each_with_the_last_hour_or_day_again(tmp_path, store):
    sampler = sampler_for(tmp_path, store)
    assert sampler.run_once(T0 + 5)["quarters_summed"] == 672  # the week, the first time
    assert sampler.run_once(T0 + 65)["quarters_summed"] == 0  # the same quarter
    assert sampler.run_once(T0 + 905)["quarters_summed"] == 5  # the new one, the hour before
    # The 23 quarters since the last mark, and the day before it.
    assert sampler.run_once(T0 + 6 * 3600 + 5)["quarters_summed"] == 23 + 96


def test_a_running_daemon_samples_the_queue_and_sums_the_past(tmp_path):
    """`taskherd up` runs the sampler: its first pass samples this minute (a role nobody runs
    shows its waiting task, an idle role of the config 0) and sums the past week."""
    import sqlite3
    import time

    from tests.fleet import Fleet

    fleet = Fleet(tmp_path, """
        [daemon]
        database = "q.db"

        [roles.idle]
        command = ["true"]
        """)
    try:
        fleet.store.enqueue(NewTask(role="unrun", title="waits for a role"), time.time())
        fleet.up()
        minute = time.time() // 60 * 60

        def sampled() -> dict:
            return {row["role"]: row["ready"]
                    for row in fleet.store.queue_depth_buckets(Buckets(minute, 60.0, 2))}

        assert fleet.wait_until(lambda: len(sampled()) == 2 and sampled(), 20,
                                "the queue sampled") == {"idle": 0, "unrun": 1}
        def summed_through() -> float | None:
            with sqlite3.connect(tmp_path / "q.db") as db:
                row = db.execute("SELECT sums_through FROM chart_marks").fetchone()
            return row and row[0]

        # The week is summed a day at a time, the mark moving with each day.
        quarter = minute // 900 * 900
        assert fleet.wait_until(lambda: (summed_through() or 0) >= quarter, 20,
                                "the past summed")
        assert fleet.stop() == 0
    finally:
        fleet.close()
