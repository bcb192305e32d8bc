"""The supervisor looks at a run when it could next cross a threshold, not on every round:
real agent processes, the store, and `now` passed in. A quiet run far from its thresholds
is not looked at; a question is timed from when it was written, however late it is read; a
pass stops at its budget and the next one goes on; a cancel is found at once when an event
tells of it, and by the sweep when none does; the running counts follow the runs."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from taskherd.config import parse_config
from taskherd.model import Event, EventKind, NewTask, Outcome, TaskState
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.liveness import QUIET_LOOK
from taskherd.services.supervisor import SWEEP_EVERY, Supervisor, SupervisorSettings
from taskherd.store import open_store
from tests.fleet import PYTHON, agent, until

ASKS = """
    import sys, time
    print("reading the config", flush=True)
    sys.stdout.write("Overwrite the existing config? [y/N] ")
    sys.stdout.flush()
    time.sleep(600)
"""


def supervisor_for(tmp_path: Path, settings: SupervisorSettings | None = None):
    asks = agent(tmp_path, "asks", ASKS)
    config = parse_config({
        "daemon": {"database": str(tmp_path / "q.db"), "data_dir": "data", "timezone": "UTC",
                   "path": "/usr/bin:/bin"},
        "pools": {"gpu": 1},
        "roles": {"sleeper": {"command": ["sleep", "600"], "idle_timeout": "10m",
                              "input_timeout": "1m"},
                  "gpu": {"command": ["sleep", "600"], "pool": "gpu"},
                  "asker": {"command": [PYTHON, "-S", asks], "input_timeout": "5s",
                            "idle_timeout": "10m"}},
    }, base_dir=tmp_path)
    store = open_store(str(tmp_path / "q.db"), durability="normal")
    return store, Supervisor(config, store, time.time,
                             settings=settings or SupervisorSettings())


def start(store, supervisor: Supervisor, role: str, now: float):
    task = store.enqueue(NewTask(role=role, title=role), now).task
    claim = store.claim(ClaimRequest("vm", now, 60.0, roles=[role]))
    live = supervisor.start(claim, now)
    assert live is not None
    return task, live


async def written(live, text: bytes = b"") -> float:
    """Once the agent has written `text` (its shim's header at least): the log's mtime."""
    path = live.handle.log_path
    await until(lambda: path.exists() and path.stat().st_size > 0
                and text in path.read_bytes())
    return os.stat(path).st_mtime


async def stop_all(supervisor: Supervisor) -> None:
    """No agent outlives its test, passed or failed."""
    for live in list(supervisor.live.values()):
        supervisor.kill(live, Outcome.LOST, "the test is over")
    await until(lambda: not supervisor.live)


async def stopping(supervisor: Supervisor, body):
    try:
        return await body()
    finally:
        await stop_all(supervisor)


def test_a_quiet_run_is_looked_at_only_when_a_threshold_could_fall(tmp_path):
    store, supervisor = supervisor_for(tmp_path)

    async def body():
        now = time.time()
        _, live = start(store, supervisor, "sleeper", now)
        await written(live)
        checked = {}
        for at in (0, 1, 5, 14, 16, 17, 16 + 0.8 * QUIET_LOOK - 0.1, 16 + QUIET_LOOK + 0.1):
            checked[at] = supervisor.check(now + at)["checked"]
        run = store.get_run(live.run.id)
        return checked, run

    try:
        checked, run = asyncio.run(stopping(supervisor, body))
    finally:
        store.close()
    # The first look reads what it wrote, the next round finds nothing more; then nothing
    # until it turns quiet (15 s), and nothing again until its log is due to be read once
    # more (within QUIET_LOOK): 10 minutes of idle_timeout need no look every second.
    assert list(checked.values()) == [1, 1, 0, 0, 1, 0, 0, 1]
    assert run.liveness == "quiet"


def test_a_question_read_late_is_timed_from_when_it_was_written(tmp_path):
    store, supervisor = supervisor_for(tmp_path)

    async def body():
        task, live = start(store, supervisor, "asker", time.time())
        asked_at = await written(live, b"[y/N]")
        # First read 4.5 s after the question was written: 0.5 s of input_timeout are left,
        # not 5 (as if it had been written when it was read).
        assert supervisor.check(asked_at + 4.5) == {"checked": 1, "stalled": 0,
                                                     "timed_out": 0, "cancelled": 0}
        ended = supervisor.check(asked_at + 5.5)
        run = await until(lambda: (r := store.get_run(live.run.id)).ended_at and r)
        return ended, run, store.get_task(task.id)

    try:
        ended, run, task = asyncio.run(stopping(supervisor, body))
    finally:
        store.close()
    assert ended["needs_input"] == 1
    assert run.outcome is Outcome.NEEDS_INPUT and task.state is TaskState.BLOCKED
    assert "Overwrite the existing config? [y/N]" in task.reason


def test_a_pass_stops_at_its_budget_and_the_next_goes_on_at_once(tmp_path):
    store, supervisor = supervisor_for(tmp_path, SupervisorSettings(pass_budget=0.0))

    async def body():
        now = time.time()
        lives = [start(store, supervisor, "sleeper", now)[1] for _ in range(3)]
        for live in lives:
            await written(live)
        passes = []
        for _ in range(4):
            passes.append((supervisor.check(now)["checked"], supervisor.next_wake(now) - now))
        return passes

    try:
        passes = asyncio.run(stopping(supervisor, body))
    finally:
        store.close()
    # One look a pass (a budget of nothing still allows one), the next pass at once while
    # looks are due; then the next round, a second later.
    assert passes == [(1, 0.0), (1, 0.0), (1, 1.0), (0, 1.0)]


def test_a_cancel_is_found_at_once_when_heard_and_by_the_sweep_when_not(tmp_path):
    store, supervisor = supervisor_for(tmp_path)

    async def body():
        now = time.time()
        heard_task, heard = start(store, supervisor, "sleeper", now)
        missed_task, _ = start(store, supervisor, "gpu", now)
        counts = {"before": (supervisor.view.running_per_role(),
                             supervisor.view.pools_in_use())}
        supervisor.run_once(now)  # the first sweep
        store.cancel(heard_task.id, now + 1)
        supervisor.hear(Event(EventKind.TASK_CHANGED, now + 1, task_id=heard_task.id,
                              state=TaskState.CANCELLED))
        counts["heard"] = supervisor.run_once(now + 2)["cancelled"]
        await until(lambda: heard.run.id not in supervisor.live)
        store.cancel(missed_task.id, now + 3)  # its event never arrives
        counts["unheard"] = supervisor.run_once(now + 4)["cancelled"]
        counts["swept"] = supervisor.run_once(now + 2 + SWEEP_EVERY)["cancelled"]
        await until(lambda: not supervisor.live)
        counts["after"] = (supervisor.view.running_per_role(), supervisor.view.pools_in_use())
        return counts, [store.runs_of_task(t.id)[-1] for t in (heard_task, missed_task)]

    try:
        counts, runs = asyncio.run(stopping(supervisor, body))
    finally:
        store.close()
    assert counts["before"] == ({"sleeper": 1, "gpu": 1}, {"gpu": 1})
    assert (counts["heard"], counts["unheard"], counts["swept"]) == (1, 0, 1)
    assert all(run.outcome is Outcome.CANCELLED for run in runs)
    assert counts["after"] == ({}, {})


def test_verdicts_changed_in_passes_close_together_are_written_in_one_transaction(tmp_path):
    # A thousand agents turning quiet over a few seconds changed a verdict in nearly every
    # pass, and each pass's write waited for the disk on the daemon's loop.
    store, supervisor = supervisor_for(tmp_path)
    writes = []
    set_liveness = store.set_liveness

    def counted(changes):
        changes = list(changes)
        writes.append(sorted(change.run_id for change in changes))
        return set_liveness(changes)

    store.set_liveness = counted

    async def body():
        now = time.time()
        _, first = start(store, supervisor, "sleeper", now)
        _, second = start(store, supervisor, "sleeper", now + 1.5)
        await written(first)
        await written(second)
        supervisor.check(now + 2)  # both active: written at once, none waiting before
        supervisor.check(now + 16)  # the first turns quiet: two seconds since the last write
        quiet_first = store.get_run(first.run.id).liveness
        supervisor.check(now + 17)  # the second turns quiet: kept for the next write
        kept = store.get_run(second.run.id).liveness
        supervisor.check(now + 18.5)
        return first.run.id, second.run.id, quiet_first, kept, store.get_run(second.run.id)

    try:
        first, second, quiet_first, kept, run = asyncio.run(stopping(supervisor, body))
    finally:
        store.close()
    assert quiet_first == "quiet" and kept == "active" and run.liveness == "quiet"
    assert writes == [[first, second], [first], [second]]
