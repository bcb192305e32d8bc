"""Quality gates supervised like agents, with the real daemon and real gate processes: a gate
silent and idle past its window is ended as stalled (the run fails naming it), a silent
CPU-bound gate (a compile printing nothing) is left to finish, and a daemon SIGKILLed while
gates run does not run again the gates that passed: the one still running is re-adopted, a
gate whose process died with the daemon is the only one run again, and each task settles
once."""

from __future__ import annotations

import signal

import pytest

from taskherd.host import procs
from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

DONE = """
    print("TASK_COMPLETE: tests: passed")
"""

HANGS = """
    import time
    time.sleep(600)  # a test runner stuck on a lock: no output, no CPU
"""

COMPILES = """
    import time
    end = time.time() + 5  # several idle windows of work, printing nothing
    total = 0
    while time.time() < end:
        total += sum(range(1000))
"""

COUNTS = """
    import os, sys
    with open(f"{sys.argv[1]}-{os.environ['TASKHERD_TASK_ID']}", "a") as runs:
        runs.write(os.environ["TASKHERD_RUN_ID"] + "\\n")  # one line per time this gate ran
"""

WAITS = """
    import os, sys, time
    with open(f"{sys.argv[1]}-{os.environ['TASKHERD_TASK_ID']}", "a") as runs:
        runs.write(os.environ["TASKHERD_RUN_ID"] + "\\n")
    while not os.path.exists("release"):  # the gate's own wait for its release
        time.sleep(0.05)
    print("all checks passed")
"""


def gated_fleet(tmp_path, gates: str, database: str = "q.db") -> Fleet:
    done = agent(tmp_path, "done", DONE)
    return Fleet(tmp_path, f"""
        [daemon]
        database = "{database}"
        data_dir = "data"
        node = "n1"
        path = "/usr/bin:/bin"
        max_concurrent = 4

        [roles.coder]
        command = ["{PYTHON}", "-S", "{done}"]
        workdir = "{tmp_path}"
        max_attempts = 1
        idle_timeout = "1h"
        {gates}

        [[roles.coder.chain]]
        role = "shipper"
        title = "Ship {{parent_title}}"

        [roles.shipper]
        command = ["true"]
        """)


@pytest.fixture
def fleets():
    made: list[Fleet] = []
    yield made
    for fleet in made:
        for task in fleet.store.list_tasks(role="coder", limit=100):
            for check in fleet.store.gates_of_task(task.id):
                if check.pid and check.ended_at is None:  # a failed test leaves no poller
                    procs._kill_group(check.pid, signal.SIGKILL)
        fleet.close()


def test_a_gate_idle_past_its_window_is_ended_as_stalled_naming_the_gate(tmp_path, fleets):
    hangs = agent(tmp_path, "hangs", HANGS)
    fleets.append(fleet := gated_fleet(tmp_path, f"""
        [[roles.coder.gates]]
        name = "tests"
        argv = ["{PYTHON}", "-S", "{hangs}"]
        idle_timeout = "2s"
        """))
    fleet.up()
    task = fleet.add("fix the login", role="coder")
    dead = fleet.wait_final(task.id, timeout=60)
    assert dead.state is TaskState.DEAD
    [run] = fleet.store.runs_of_task(task.id)
    assert run.outcome is Outcome.FAILED  # a gate's failure: a strike, the gate named
    assert run.error.startswith("quality gate 'tests' failed: stalled: no output or CPU for")
    assert "(idle_timeout 2s)" in run.error
    [check] = fleet.store.gates_of_task(task.id)
    assert check.passed is False and check.error == run.error
    assert check.ended_at - check.started_at < 60  # ended by its idle window, not its timeout
    assert procs.live_group_members(check.pid) == []  # its process group is gone
    assert fleet.store.list_tasks(role="shipper") == []  # the chain did not fire
    shown = fleet.cli("task", "show", str(task.id)).stdout
    assert "stalled: no output or CPU" in shown


def test_a_silent_cpu_bound_gate_is_never_stalled(tmp_path, fleets):
    compiles = agent(tmp_path, "compiles", COMPILES)
    fleets.append(fleet := gated_fleet(tmp_path, f"""
        [[roles.coder.gates]]
        name = "compile"
        argv = ["{PYTHON}", "-S", "{compiles}"]
        idle_timeout = "2s"
        """))
    fleet.up()
    task = fleet.add("fix the build", role="coder")
    done = fleet.wait_final(task.id, timeout=60)
    [check] = fleet.store.gates_of_task(task.id)
    assert check.passed, check.error
    assert check.ended_at - check.started_at > 2 + 1  # it outlived its idle window, working
    assert done.state is TaskState.COMPLETED


def test_a_daemon_killed_during_the_second_gate_runs_no_passed_gate_again(tmp_path, fleets):
    counts = agent(tmp_path, "counts", COUNTS)
    waits = agent(tmp_path, "waits", WAITS)
    fleets.append(fleet := gated_fleet(tmp_path, f"""
        [[roles.coder.gates]]
        name = "compile"
        argv = ["{PYTHON}", "-S", "{counts}", "compiled"]

        [[roles.coder.gates]]
        name = "tests"
        argv = ["{PYTHON}", "-S", "{waits}", "tested"]
        idle_timeout = "1h"
        """))
    fleet.up()
    kept, lost = fleet.add("kept", role="coder"), fleet.add("lost", role="coder")

    def second_gates_running() -> dict[int, object] | None:
        running = {}
        for task in (kept, lost):
            checks = fleet.store.gates_of_task(task.id)
            if len(checks) < 2 or not (tmp_path / f"tested-{task.id}").exists():
                return None
            running[task.id] = checks[1]
        return running

    second = fleet.wait_until(second_gates_running, timeout=60,
                              what="both tasks' second gates to run")
    fleet.stop(signal.SIGKILL)
    # While no daemon runs, one task's gate dies too (its machine's OOM killer, say).
    procs._kill_group(second[lost.id].pid, signal.SIGKILL)
    fleet.wait_until(lambda: not procs.live_group_members(second[lost.id].pid), timeout=20,
                     what="the killed gate to be gone")
    log_before = fleet.daemon_log.stat().st_size
    fleet.up()
    fleet.wait_until(lambda: "agent(s) left by an earlier daemon" in
                     fleet.daemon_log.read_text()[log_before:], timeout=30,
                     what="the new daemon's start-up reconciliation")
    (tmp_path / "release").write_text("go")
    for task in (kept, lost):
        done = fleet.wait_final(task.id, timeout=60)
        assert done.state is TaskState.COMPLETED, done.last_error
        [run] = fleet.store.runs_of_task(task.id)  # settled once, by one run
        assert run.outcome is Outcome.SUCCEEDED
        assert (tmp_path / f"compiled-{task.id}").read_text() == f"{run.id}\n"  # ran once
        assert [child.title for child in fleet.store.list_tasks(role="shipper")
                if child.parent_id == task.id] == [f"Ship {task.title}"]
    # The living gate was re-adopted, not started again; the dead one alone ran again.
    assert (tmp_path / f"tested-{kept.id}").read_text().count("\n") == 1
    assert (tmp_path / f"tested-{lost.id}").read_text().count("\n") == 2
    assert [(c.name, c.passed) for c in fleet.store.gates_of_task(kept.id)] == [
        ("compile", True), ("tests", True)]
    checks = fleet.store.gates_of_task(lost.id)
    assert [(c.name, c.passed) for c in checks] == [
        ("compile", True), ("tests", False), ("tests", True)]
    assert "interrupted" in checks[1].error
