"""The pool of spare shims in taskherd.spares, against real processes.

Spares are waited for with events (the pool's condition, pidfds, waitid), never by sleeping.
"""

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from taskherd import procs, spares

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 10.0


@pytest.fixture
def pool():
    """A pool of `size` started spares; back to the default single spare afterwards."""
    def resize(size):
        spares.prewarm(size)
        assert spares.wait_for_spares(TIMEOUT), "spares were not started"
        return spares.spare_pids()

    yield resize
    spares.prewarm(1)


@pytest.fixture
def spawn(tmp_path):
    env = procs.agent_env(os.environ["PATH"], {}, {"TASKHERD_RUN_ID": "1"})
    spawned = []

    def start(argv=("true",), name=None):
        name = name or f"run-{len(spawned)}"
        process = procs.spawn(list(argv), env=env, cwd=str(tmp_path),
                              log_path=tmp_path / f"{name}.log", header={"run": name})
        spawned.append(process)
        return process

    yield start
    for process in spawned:
        if process.handle.is_alive():
            procs.terminate(process.handle, grace=0.1)


def wait_exit(process):
    return asyncio.run(asyncio.wait_for(process.handle.wait_exit(), TIMEOUT))


def wait_child_dead(pid):
    """Block until our child `pid` has exited, leaving it unreaped (as the pool finds it)."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


def wait_gone(pid, timeout=TIMEOUT):
    """Block until `pid` (not our child) has exited: its pidfd turns readable."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(pidfd)


def test_max_spares_caps_the_pool(pool):
    assert spares.MAX_SPARES <= 4
    assert len(pool(spares.MAX_SPARES + 5)) == spares.MAX_SPARES


def test_a_burst_of_k_spawns_all_use_prestarted_spares(pool, spawn):
    waiting = pool(4)
    assert len(waiting) == 4
    burst = [spawn() for _ in waiting]
    assert [process.pid for process in burst] == waiting  # oldest spare first
    assert all(wait_exit(process).succeeded for process in burst)
    # Each one taken is replaced in the background, by new processes.
    assert spares.wait_for_spares(TIMEOUT)
    assert len(spares.spare_pids()) == 4 and not set(spares.spare_pids()) & set(waiting)


def test_a_run_in_a_spare_gets_its_own_log_env_and_status(pool, spawn):
    spare = pool(1)[0]
    script = 'echo "run $TASKHERD_RUN_ID in $(pwd -P): $1"; exit 3'
    process = spawn(["sh", "-c", script, "sh", "naïve ✓ \n line"], name="own")
    assert process.pid == spare
    assert wait_exit(process).code == 3
    lines = process.log_path.read_text().splitlines()
    assert procs.read_header(process.log_path)["pid"] == spare
    assert lines[1:] == [f"run 1 in {process.log_path.parent.resolve()}: naïve ✓ ", " line"]


def test_a_killed_spare_is_skipped_and_replaced_and_the_spawn_succeeds(pool, spawn):
    killed, live = pool(2)
    os.kill(killed, signal.SIGKILL)
    wait_child_dead(killed)
    process = spawn()
    assert process.pid == live  # the dead one was discarded, the next one used
    assert wait_exit(process).succeeded
    assert spares.wait_for_spares(TIMEOUT)
    assert killed not in spares.spare_pids() and live not in spares.spare_pids()


def test_with_every_spare_dead_a_cold_shim_runs_the_agent(pool, spawn):
    (killed,) = pool(1)
    os.kill(killed, signal.SIGKILL)
    wait_child_dead(killed)
    process = spawn()
    assert process.pid != killed
    assert wait_exit(process).succeeded
    assert spares.wait_for_spares(TIMEOUT) and spares.spare_pids() != [killed]


def test_a_spawn_never_waits_for_a_refill(pool, spawn, monkeypatch):
    waiting = pool(2)
    refill_started = threading.Event()
    release = threading.Event()
    real_start = spares._start_spare
    spawning_thread = threading.get_ident()

    def stuck_start():
        assert threading.get_ident() != spawning_thread, "a spawn started a spare itself"
        refill_started.set()
        release.wait(TIMEOUT)
        return real_start()

    monkeypatch.setattr(spares, "_start_spare", stuck_start)
    try:
        burst = [spawn() for _ in range(3)]  # the third finds no spare: a cold shim
        assert refill_started.wait(TIMEOUT)  # the refill is stuck, the spawns returned
        assert [process.pid for process in burst[:2]] == waiting
        assert burst[2].pid not in waiting
        assert all(wait_exit(process).succeeded for process in burst)
    finally:
        release.set()
    assert spares.wait_for_spares(TIMEOUT)


def test_shrinking_the_pool_stops_the_surplus(pool):
    waiting = pool(3)
    kept = pool(1)
    assert kept == waiting[:1]
    for pid in waiting[1:]:
        assert wait_gone(pid)
    assert pool(0) == []
    assert wait_gone(waiting[0])


SPARE_OWNER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from taskherd import spares
spares.prewarm(3)
assert spares.wait_for_spares(10)
print(json.dumps(spares.spare_pids()), flush=True)
sys.stdin.read()  # stay until killed, like a daemon
"""


@pytest.mark.parametrize("end", ["sigkill", "exit"])
def test_spares_exit_when_their_owner_exits(end):
    with subprocess.Popen([sys.executable, "-c", SPARE_OWNER, str(REPO_ROOT)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as owner:
        waiting = json.loads(owner.stdout.readline())
        assert len(waiting) == 3
        if end == "sigkill":
            owner.kill()
        else:
            owner.stdin.close()  # it returns from its script and exits normally
        owner.wait(TIMEOUT)
    for pid in waiting:
        assert wait_gone(pid), f"spare {pid} outlived its owner"


def test_a_forked_child_neither_takes_nor_keeps_alive_its_parents_spares(pool, spawn, tmp_path):
    first, second = pool(2)
    report_read, report_write = os.pipe()
    gate_read, gate_write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe, then waits
        try:
            os.close(report_read)
            os.close(gate_write)
            seen = spares.spare_pids()
            env = procs.agent_env(os.environ["PATH"], {}, {})
            process = procs.spawn(["true"], env=env, cwd=None, log_path=tmp_path / "child.log")
            os.write(report_write, json.dumps({"seen": seen, "pid": process.pid}).encode())
            os.close(report_write)
            os.read(gate_read, 1)  # alive until the parent is done checking
        finally:
            os._exit(0)
    os.close(report_write)
    os.close(gate_read)
    try:
        with os.fdopen(report_read) as report_file:
            report = json.loads(report_file.read())
        assert report["seen"] == [] and report["pid"] not in (first, second)
        # The spares are still the parent's to use...
        process = spawn()
        assert process.pid == first and wait_exit(process).succeeded
        # ...and to stop: the live child holds no copy of their pipes, or EOF never came.
        stopping = threading.Thread(target=spares.prewarm, args=(0,), daemon=True)
        stopping.start()
        assert wait_gone(second), "the forked child kept the parent's spare alive"
    finally:
        os.close(gate_write)
        os.waitpid(child, 0)
    stopping.join(TIMEOUT)


def test_a_spare_imports_no_module_that_would_cost_each_spawn_cpu():
    # `import json` (re, enum, functools...) cost a spare as much CPU as Python's own start-up;
    # with spawns back to back that CPU is taken from the runs on the same cores.
    shim = subprocess.run([sys.executable, *spares.SHIM_PYTHON_FLAGS, "-X", "importtime",
                           spares.SHIM_PATH, "--warm"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT, check=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in shim.stderr.splitlines()}
    assert not imported & {"json", "re", "enum", "signal"}
