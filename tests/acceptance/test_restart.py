"""`kill -9` the daemon while 50 agents run, start it again: nothing is lost or done twice.

The daemon issue's acceptance test. 50 agents each wait for a release file (polling for it is
the agent's behaviour; the test never sleeps). The daemon is SIGKILLed once all 50 have
started; half the agents are released while no daemon runs, and the test waits until their
shims have written exit files; then a new daemon starts and must re-adopt the 25 live agents
and settle the 25 dead ones from their exit files. The rest are released after the restart.

Half the agents of each group exit 0 with TASK_COMPLETE, the others exit with their own
non-zero code (3..6): those tasks fail, are retried once after the (short) backoff, and the
retry succeeds. The database must then show, per task, exactly the runs the plan asks for,
each ended once with the exit code its agent chose, and the agents' own start records must
match the runs one for one.
"""

from __future__ import annotations

import signal
import time

import pytest

from taskherd.host import procs
from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

AGENTS = 50
BACKOFF = 0.2

AGENT = """
    import os, sys, time
    task = os.environ["TASKHERD_TASK_ID"]
    gate, code = sys.stdin.read().split("\\n\\n## ")[0].split()  # the task's own words
    with open(f"starts-{task}", "a") as starts:  # one line per agent process started
        starts.write(os.environ["TASKHERD_RUN_ID"] + "\\n")
    while not os.path.exists(gate):  # the agent's own wait for its release
        time.sleep(0.05)
    failed_before = os.path.exists(f"failed-{task}")
    if int(code) == 0 or failed_before:
        print("TASK_COMPLETE: released")
        sys.exit(0)
    open(f"failed-{task}", "w").close()
    print(f"failing on purpose with {code}", file=sys.stderr)
    sys.exit(int(code))
"""


def planned_code(index: int) -> int:
    """Even agents succeed; odd ones fail once with their own code, 3 to 6."""
    return 0 if index % 2 == 0 else 3 + index % 4


@pytest.fixture
def fleet(tmp_path):
    program = agent(tmp_path, "agent", AGENT)
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        node = "n1"
        max_concurrent = {AGENTS}
        path = "/usr/bin:/bin"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}"]
        workdir = "{tmp_path}"
        max_attempts = 3
        backoff = "{BACKOFF}s"
        idle_timeout = "1h"
    """)
    yield node
    for run in node.store.open_runs():  # a failed test must not leave 50 pollers behind
        if run.pid:
            procs._kill_group(run.pid, signal.SIGKILL)
    node.close()


def test_kill_9_with_50_running_agents_loses_nothing_and_finishes_each_task_once(
        fleet: Fleet, tmp_path):
    gates = {"early": tmp_path / "release-early", "late": tmp_path / "release-late"}
    group = {index: "early" if index < AGENTS // 2 else "late" for index in range(AGENTS)}
    fleet.up()
    tasks = {}
    for index in range(AGENTS):
        task = fleet.add(f"agent {index}", prompt=f"{gates[group[index]]} {planned_code(index)}")
        tasks[task.id] = index

    def started() -> bool:
        runs = fleet.store.open_runs()
        return (len(runs) == AGENTS and all(run.pid for run in runs)
                and all((tmp_path / f"starts-{task_id}").exists() for task_id in tasks))

    fleet.wait_until(started, timeout=30, what="50 agents spawned and waiting")
    first_runs = {run.task_id: run for run in fleet.store.open_runs()}

    fleet.stop(signal.SIGKILL)
    killed_at = time.time()
    log_before_restart = fleet.daemon_log.stat().st_size

    # While no daemon runs: release the early half and wait for their shims' exit files.
    gates["early"].write_text("go")
    early_exits = [procs.exit_path_for(first_runs[t].log_path) for t in tasks
                   if group[tasks[t]] == "early"]
    fleet.wait_until(lambda: all(path.exists() for path in early_exits), timeout=20,
                     what="the released agents to exit while the daemon is down")
    assert len(fleet.store.open_runs()) == AGENTS  # nobody settled them: no daemon runs

    fleet.up()
    restarted_at = time.time()
    # The late half is released only once reconciliation is over, so that every one of
    # them is alive when the new daemon looks at it.
    fleet.wait_until(
        lambda: "agent(s) left by an earlier daemon" in fleet.daemon_log.read_text()[
            log_before_restart:],
        timeout=20, what="the new daemon's start-up reconciliation")
    late_released_at = time.time()
    gates["late"].write_text("go")

    def all_completed() -> bool:
        return all(fleet.store.get_task(t).state is TaskState.COMPLETED for t in tasks)

    fleet.wait_until(all_completed, timeout=40, what="all 50 tasks to complete")
    assert fleet.store.open_runs() == []

    for task_id, index in tasks.items():
        code = planned_code(index)
        task = fleet.store.get_task(task_id)
        runs = fleet.store.runs_of_task(task_id)
        first = runs[0]
        assert first.id == first_runs[task_id].id  # the adopted run, not a replacement
        assert first.pid == first_runs[task_id].pid and first.spawned_at < killed_at
        assert first.ended_at is not None and first.ended_at > killed_at
        assert first.exit_code == code, (index, first)
        assert first.outcome is (Outcome.SUCCEEDED if code == 0 else Outcome.FAILED)
        exit_file = procs.read_exit_file(procs.exit_path_for(first.log_path))
        assert exit_file.code == code
        assert first.ended_at == exit_file.ended_at  # its true end, even if no daemon watched
        if group[index] == "early":
            assert exit_file.ended_at < restarted_at  # died while no daemon ran
        else:
            assert exit_file.ended_at > late_released_at  # was alive, re-adopted
        if code == 0:
            assert len(runs) == 1 and task.attempts == 0, (index, runs)
        else:
            # Exactly one retry, after the backoff, and it succeeded.
            assert len(runs) == 2 and task.attempts == 1, (index, runs)
            retry = runs[1]
            assert retry.outcome is Outcome.SUCCEEDED and retry.exit_code == 0
            assert retry.claimed_at >= first.ended_at + BACKOFF - 0.01
        assert task.summary == "released"
        # Each run's agent was started exactly once, and no agent ran without a run.
        starts = (tmp_path / f"starts-{task_id}").read_text().split()
        assert starts == [str(run.id) for run in runs], (index, starts)

    new_log = fleet.daemon_log.read_text()[log_before_restart:]
    assert f"re-adopted {AGENTS} agent(s)" in new_log
    assert new_log.count("re-adopted pid") == AGENTS
    assert new_log.count("(already ended)") == AGENTS // 2
    assert new_log.count("(alive)") == AGENTS // 2
    assert "could not be settled" not in new_log and "killing pid" not in new_log
    assert fleet.stop() == 0
