"""The board's numbers stay exact while the claim and the settle keep no counters: open tasks
are counted through the queue's own indexes, finished tasks and spend are rolled up by the
monitor behind a mark, and whatever lies past the mark is read live."""

from __future__ import annotations

from collections import Counter

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store.sql_history import ROLLUP_MARGIN

ONE_TRY = RetryPolicy()
LEASE = 60.0
T0 = 1_800_000_000.0  # an hour's start, so the spend windows below start exactly here


def counted(store) -> Counter:
    return Counter({(c.state, c.role): c.count for c in store.counts()})


def every_task(store) -> Counter:
    """What the counts must say, from the tasks themselves."""
    tasks = store.list_tasks(limit=10_000)
    return Counter((task.state, task.role) for task in tasks)


def spend(store, week_start: float = T0 - 86400, day_start: float = T0):
    return {row["role"]: (row["runs_week"], round(row["cost_week"], 5), row["runs_today"])
            for row in store.spend_by_role(week_start, day_start)}


def run_once(store, role: str, outcome: Outcome, now: float, cost: float = 0.0):
    # One attempt: a failure goes straight to the dead-letter set.
    store.enqueue(NewTask(role=role, title=f"{role} {outcome.value}", max_attempts=1), now)
    claimed = store.claim(ClaimRequest("n1", now, LEASE, roles=[role]))
    return store.finish_run(claimed.run.id, RunResult(outcome, cost_usd=cost), ONE_TRY, now + 1)


def test_counts_match_the_tasks_through_claims_settles_roll_ups_revivals_and_prunes(store):
    now = T0
    for role in ("coder", "qa"):
        for outcome in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.SUCCEEDED):
            run_once(store, role, outcome, now)
            now += 10
    assert counted(store) == every_task(store)

    # Open tasks of every kind: ready, claimed, running, blocked, pending, needs_review.
    store.enqueue(NewTask(role="coder", title="waits"), now)
    store.enqueue(NewTask(role="qa", title="pending", pending=True), now)
    blocked = store.enqueue(NewTask(role="coder", title="blocked"), now).task
    store.block(blocked.id, now, "a human must look")
    store.enqueue(NewTask(role="qa", title="reviewed", review=True), now)
    reviewed = store.claim(ClaimRequest("n1", now, LEASE, roles=["qa"]))
    store.finish_run(reviewed.run.id, RunResult(Outcome.SUCCEEDED), ONE_TRY, now + 1)
    store.enqueue(NewTask(role="coder", title="running"), now)
    running = store.claim(ClaimRequest("n1", now, LEASE, roles=["coder"]))
    store.mark_spawned(running.run.id, now, LEASE, pid=1, pid_started_at=1.0, log_path=None)
    store.enqueue(NewTask(role="qa", title="claimed"), now)
    store.claim(ClaimRequest("n1", now, LEASE, roles=["qa"]))
    assert counted(store) == every_task(store)
    assert counted(store)[(TaskState.NEEDS_REVIEW, "qa")] == 1

    # The roll-up moves the settled tasks into the counters; nothing changes on the board.
    now += ROLLUP_MARGIN + 60
    assert store.roll_up(now) > 0
    assert counted(store) == every_task(store)

    # A task finished before the mark comes back (requeue), or is pruned: the counters follow.
    dead = [t for t in store.list_tasks(state=TaskState.DEAD, limit=10)]
    store.requeue(dead[0].id, now)
    assert counted(store) == every_task(store)
    run_once(store, "coder", Outcome.SUCCEEDED, now)  # settles after the mark: read live
    assert counted(store) == every_task(store)
    assert store.prune(before=T0 + 25) > 0
    assert counted(store) == every_task(store)
    now += ROLLUP_MARGIN + 60
    store.roll_up(now)
    store.roll_up(now)  # a second roll-up with nothing new counts nothing twice
    assert counted(store) == every_task(store)


def test_spend_counts_each_ended_run_once_whether_rolled_up_or_read_live(store):
    run_once(store, "coder", Outcome.SUCCEEDED, T0 + 10, cost=0.5)
    store.enqueue(NewTask(role="coder", title="long"), T0 + 20)
    long_run = store.claim(ClaimRequest("n1", T0 + 20, LEASE))  # open: it holds the runs' mark back
    run_once(store, "coder", Outcome.FAILED, T0 + 30, cost=0.25)
    assert spend(store) == {"coder": (2, 0.75, 2)}

    store.roll_up(T0 + 3600)
    assert spend(store) == {"coder": (2, 0.75, 2)}
    # It ends after the roll-up passed the runs after it: counted once, by itself.
    store.finish_run(long_run.run.id, RunResult(Outcome.SUCCEEDED, cost_usd=2.0), ONE_TRY,
                     T0 + 3700)
    assert spend(store) == {"coder": (3, 2.75, 3)}
    store.roll_up(T0 + 7200)
    assert spend(store) == {"coder": (3, 2.75, 3)}
    run_once(store, "qa", Outcome.SUCCEEDED, T0 + 7300, cost=1.0)
    assert spend(store) == {"coder": (3, 2.75, 3), "qa": (1, 1.0, 1)}
    # A day window that starts after the coder's runs: they count for the week only.
    assert spend(store, day_start=T0 + 7200) == {"coder": (3, 2.75, 0), "qa": (1, 1.0, 1)}

    assert store.prune(before=T0 + 8000) == 4
    assert spend(store) == {}


def test_a_roll_up_committed_while_the_board_counts_is_not_counted_twice(store, reopen):
    for i in range(3):
        run_once(store, "coder", Outcome.SUCCEEDED, T0 + i, cost=0.5)
    other = reopen()  # another process's monitor
    read = store._all
    rolled = []

    def read_while_another_rolls_up(name, params=None):
        # Between reading the marks and counting past them, another monitor rolls up.
        if name in ("count_by_state_and_role", "spend_by_role") and len(rolled) < 2:
            rolled.append(other.roll_up(T0 + 3600 * (len(rolled) + 1)))
        return read(name, {} if params is None else params)

    store._all = read_while_another_rolls_up
    try:
        assert counted(store) == every_task(store)
        assert spend(store) == {"coder": (3, 1.5, 3)}
    finally:
        store._all = read
        other.close()
    assert rolled[0] > 0  # the first read really raced a roll-up that folded rows


def test_each_roles_latest_run_is_found_before_and_after_the_roll_up(store):
    """The agents registry shows a role's last run and last outcome; the roll-up takes the
    runs it passes out of the live walk, and the role's latest run must not go with them."""
    now = T0
    assert store.latest_run_of_role("coder") is None
    first = run_once(store, "coder", Outcome.SUCCEEDED, now).run
    qa_run = run_once(store, "qa", Outcome.FAILED, now + 1).run
    last_coder = run_once(store, "coder", Outcome.FAILED, now + 2).run

    def latest(role):
        found, ended = store.latest_run_of_role(role), store.latest_run_of_role(role, ended=True)
        return (found and found.id, ended and ended.id)

    assert latest("coder") == (last_coder.id, last_coder.id) and first.id < last_coder.id
    assert store.roll_up(now + ROLLUP_MARGIN + 60) > 0
    assert latest("coder") == (last_coder.id, last_coder.id)
    assert latest("qa") == (qa_run.id, qa_run.id)
    assert store.latest_run_of_role("qa", ended=True).outcome is Outcome.FAILED

    # A run open past the mark is the latest; the latest ended one is still the rolled-up one.
    store.enqueue(NewTask(role="coder", title="running"), now + 3)
    running = store.claim(ClaimRequest("n1", now + 3, LEASE, roles=["coder"])).run
    assert latest("coder") == (running.id, last_coder.id)
    store.roll_up(now + 2 * (ROLLUP_MARGIN + 60))  # the open run holds the mark below it
    assert latest("coder") == (running.id, last_coder.id)
    store.finish_run(running.id, RunResult(Outcome.SUCCEEDED), ONE_TRY, now + 4)
    store.roll_up(now + 3 * (ROLLUP_MARGIN + 60))
    assert latest("coder") == (running.id, running.id)
    assert latest("reviewer") == (None, None)
