"""The daemon with real agent processes: completion, failure, liveness tiers, limits, cancel.

Every test runs once per store (`database`: a SQLite file, then a PostgreSQL database).
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import time

import psutil
import pytest

from taskherd.config import load_config
from taskherd.model import NewTask, Outcome, TaskState
from taskherd.policy.admission import ClaimRequest
from tests.fleet import PYTHON, Fleet, agent, kill_machine

AGENT = """
    import os, subprocess, sys, time
    given = sys.stdin.read()
    prompt = given.split("\\n\\n## ")[0].strip()  # the task's own words, before added context
    print("started", os.environ["TASKHERD_TASK_ID"], flush=True)
    if prompt == "complete":
        print("TASK_COMPLETE: wrote the report")
    elif prompt == "exit0":
        pass
    elif prompt == "fail":
        if "## Previous attempt failed" in given:
            print("told how the last attempt failed")
        print("something broke", file=sys.stderr)
        sys.exit(3)
    elif prompt == "done-cli":
        subprocess.run(["taskherd", "done", "--summary", "reported"], check=True)
    elif prompt == "block-cli":
        subprocess.run(["taskherd", "block", "--summary", "need a token"], check=True)
    elif prompt == "silent":
        with open("pid-" + os.environ["TASKHERD_RUN_ID"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    elif prompt == "busy":
        end = time.time() + 3
        while time.time() < end:
            pass
        print("TASK_COMPLETE: computed")
    elif prompt == "heartbeats":
        for _ in range(6):
            subprocess.run(["taskherd", "heartbeat", "--progress", "step"], check=True)
            time.sleep(0.5)
        print("TASK_COMPLETE: kept beating")
    elif prompt == "env":
        ours = (k for k in os.environ if k.startswith(("TASKHERD_", "CLAUDE")))
        print("ENV", " ".join(sorted(ours)))
        print("PATH", os.environ["PATH"])
        print("TASK_COMPLETE: env")
    elif prompt == "leave-child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open("leftover-pid", "w") as f:
            f.write(str(child.pid))
        print("TASK_COMPLETE: left a child behind")
    elif prompt.startswith("hold"):
        while not os.path.exists(prompt.split()[1]):
            time.sleep(0.05)
        print("TASK_COMPLETE: released")
"""


def config(tmp_path, database: str, worker_options: str = "", daemon_options: str = "") -> str:
    """The test config; `worker_options` lines replace the defaults of the same key."""
    program = agent(tmp_path, "agent", AGENT)
    worker = {
        "command": f'["{PYTHON}", "{program}"]',
        "workdir": f'"{tmp_path}"',
        "max_attempts": "2",
        "backoff": '"0.2s"',
        "idle_timeout": '"2s"',
    }
    for line in filter(None, (line.strip() for line in worker_options.splitlines())):
        key, value = (part.strip() for part in line.split("=", 1))
        worker[key] = value
    worker_lines = "\n".join(f"{key} = {value}" for key, value in worker.items())
    return f"""
[daemon]
database = "{database}"
data_dir = "data"
timezone = "UTC"
max_concurrent = 4
path = "/usr/bin:/bin"
{daemon_options}

[roles.worker]
{worker_lines}
"""


@pytest.fixture
def fleet(tmp_path, database):
    created = []

    def make(worker_options: str = "", daemon_options: str = "") -> Fleet:
        node = Fleet(tmp_path, config(tmp_path, database, worker_options, daemon_options))
        created.append(node)
        return node

    yield make
    for node in created:
        node.close()


def last_run(fleet: Fleet, task_id: int):
    return fleet.store.runs_of_task(task_id)[-1]


def test_agents_finish_by_marker_by_exit_and_by_report(fleet):
    f = fleet()
    f.up()
    tasks = {p: f.add(p, prompt=p) for p in ["complete", "exit0", "done-cli", "block-cli"]}
    complete = f.wait_final(tasks["complete"].id)
    assert complete.state is TaskState.COMPLETED and complete.summary == "wrote the report"
    assert f.wait_final(tasks["exit0"].id).state is TaskState.COMPLETED
    assert f.wait_final(tasks["done-cli"].id).summary == "reported"
    blocked = f.wait_until(lambda: (t := f.store.get_task(tasks["block-cli"].id)).state
                           is TaskState.BLOCKED and t, what="block")
    assert blocked.reason == "need a token"
    run = last_run(f, tasks["complete"].id)
    assert run.exit_code == 0 and run.pid and run.pid_started_at
    log = open(run.log_path).read().splitlines()
    assert log[0].startswith("# taskherd ") and f'"task": {tasks["complete"].id}' in log[0]
    assert log[1] == f"started {tasks['complete'].id}"


def test_require_marker_turns_a_bare_exit_into_a_failure(fleet):
    f = fleet('require_marker = true\nmax_attempts = 1')
    f.up()
    task = f.add("bare exit", prompt="exit0")
    dead = f.wait_final(task.id)
    assert dead.state is TaskState.DEAD and "TASK_COMPLETE" in dead.last_error


def test_failures_retry_with_backoff_then_go_dead_with_the_log_tail(fleet):
    f = fleet()
    f.up()
    task = f.add("always fails", prompt="fail")
    dead = f.wait_final(task.id)
    assert dead.state is TaskState.DEAD and dead.attempts == 2
    assert dead.last_error == "exited with code 3" and "something broke" in dead.error_tail
    runs = f.store.runs_of_task(task.id)
    assert [r.outcome for r in runs] == [Outcome.FAILED, Outcome.FAILED]
    assert runs[1].claimed_at - runs[0].ended_at >= 0.2  # the backoff was waited
    # The retry's prompt says how the first attempt ended.
    assert "told how the last attempt failed" not in open(runs[0].log_path).read()
    assert "told how the last attempt failed" in open(runs[1].log_path).read()


def test_a_silent_agent_is_stalled_and_its_process_group_killed(fleet, tmp_path):
    f = fleet("max_attempts = 1")
    f.up()
    task = f.add("hangs", prompt="silent")
    dead = f.wait_final(task.id, timeout=30)
    run = last_run(f, task.id)
    assert run.outcome is Outcome.STALLED and dead.state is TaskState.DEAD
    # Killed within idle_timeout (2 s) + 2 s of its last sign of life.
    assert run.ended_at - run.spawned_at <= 2 + 2 + 0.5
    agent_pid = int((tmp_path / f"pid-{run.id}").read_text())
    assert not psutil.pid_exists(agent_pid) or psutil.Process(agent_pid).status() == "zombie"


def test_cpu_time_and_heartbeats_count_as_life(fleet):
    f = fleet("idle_timeout = \"1.5s\"")
    f.up()
    busy = f.add("busy but silent", prompt="busy")
    beating = f.add("heartbeats", prompt="heartbeats")
    assert f.wait_final(busy.id).state is TaskState.COMPLETED
    assert f.wait_final(beating.id).state is TaskState.COMPLETED
    assert last_run(f, beating.id).progress == "step"


def test_hard_timeout(fleet):
    f = fleet('timeout = "1s"\nidle_timeout = "1h"\nmax_attempts = 1')
    f.up()
    task = f.add("slow", prompt="silent")
    f.wait_final(task.id)
    assert last_run(f, task.id).outcome is Outcome.TIMED_OUT


def test_agent_environment_is_explicit(fleet, monkeypatch):
    f = fleet('env = { ROLE_SETTING = "x" }')
    f.env["CLAUDECODE"] = "1"  # a daemon started from inside Claude Code
    f.up()
    task = f.add("env", prompt="env")
    f.wait_final(task.id)
    lines = open(last_run(f, task.id).log_path).read().splitlines()
    names = next(line for line in lines if line.startswith("ENV")).split()[1:]
    assert "CLAUDECODE" not in names
    assert {"TASKHERD_TASK_ID", "TASKHERD_RUN_ID", "TASKHERD_ROLE", "TASKHERD_HOME"} <= set(names)
    path = next(line for line in lines if line.startswith("PATH")).split()[1]
    assert path.startswith("/usr/bin:/bin")


def test_role_max_concurrent_and_stagger_hold(fleet, tmp_path):
    gate = tmp_path / "go"
    f = fleet('max_concurrent = 1\nstagger = "0.5s"')
    f.up()
    tasks = [f.add(f"t{i}", prompt=f"hold {gate}") for i in range(3)]
    f.wait_until(lambda: f.store.open_runs(), what="a first run")
    gate.write_text("go")
    for task in tasks:
        f.wait_final(task.id)
    runs = sorted((r for t in tasks for r in f.store.runs_of_task(t.id)),
                  key=lambda r: r.spawned_at)
    for earlier, later in itertools.pairwise(runs):
        assert later.spawned_at >= earlier.ended_at  # never two at once
        assert later.spawned_at - earlier.spawned_at >= 0.5


def test_pool_capacity_is_shared(fleet, tmp_path):
    gate = tmp_path / "go"
    f = fleet(daemon_options="")
    f.config_path.write_text(f.config_path.read_text() + "\n[pools]\ngit = 1\n")
    f.up()
    tasks = [f.add(f"t{i}", prompt=f"hold {gate}", pool="git") for i in range(2)]
    free = f.add("no pool", prompt="complete")
    f.wait_final(free.id)  # the pool does not hold back tasks outside it
    assert len(f.store.open_runs()) == 1
    gate.write_text("go")
    for task in tasks:
        f.wait_final(task.id)


def test_cancel_stops_a_running_agent(fleet, tmp_path):
    f = fleet('idle_timeout = "1h"')
    f.up()
    task = f.add("long", prompt="silent")
    run = f.wait_until(lambda: (r := f.store.open_runs()) and r[0].pid and r[0], what="spawn")
    f.cli("task", "cancel", str(task.id), "--reason", "changed my mind")
    ended = f.wait_until(lambda: (r := f.store.get_run(run.id)).ended_at and r, what="kill")
    assert ended.outcome is Outcome.CANCELLED
    assert f.store.get_task(task.id).reason == "changed my mind"
    assert not psutil.pid_exists(int((tmp_path / f"pid-{run.id}").read_text()))


def test_a_second_daemon_on_the_same_node_refuses(fleet):
    f = fleet()
    f.up()
    f.wait_until(lambda: "taskherd up: node" in f.daemon_log.read_text(), what="daemon start")
    second = f.cli("up", check=False)
    assert second.returncode == 1 and "another taskherd daemon already runs" in second.stderr
    # The first named as a person reads it, not as the lock file's JSON.
    assert f"(pid {f.daemon.pid}, up since " in second.stderr and "{" not in second.stderr


def test_on_shutdown_kill_returns_tasks_to_ready_without_a_strike(fleet):
    f = fleet('idle_timeout = "1h"', daemon_options='on_shutdown = "kill"')
    f.up()
    task = f.add("long", prompt="silent")
    f.wait_until(lambda: f.store.get_task(task.id).state is TaskState.RUNNING, what="running")
    assert f.stop(signal.SIGTERM) == 0
    after = f.store.get_task(task.id)
    assert after.state is TaskState.READY and after.attempts == 0
    assert last_run(f, task.id).outcome is Outcome.LOST


def test_stop_command_and_detach_leave_agents_running(fleet, tmp_path):
    gate = tmp_path / "go"
    # The held agent is silent: an idle_timeout of seconds would end it as stalled if the
    # stop came late on a loaded machine, which this test is not about.
    f = fleet('idle_timeout = "1h"')
    f.up()
    task = f.add("held", prompt=f"hold {gate}")
    run = f.wait_until(lambda: (r := f.store.open_runs()) and r[0].pid and r[0], what="spawn")
    assert f.cli("stop").returncode == 0
    assert f.daemon.wait(10) == 0
    assert psutil.pid_exists(run.pid)  # detached: still working
    gate.write_text("go")
    f.daemon = None
    f.up()  # the next daemon adopts it and records its exit
    finished = f.wait_final(task.id)
    assert finished.state is TaskState.COMPLETED
    assert len(f.store.runs_of_task(task.id)) == 1


def test_a_readopted_run_keeps_its_true_end_time_and_its_runtime(fleet, tmp_path):
    gate = tmp_path / "go"
    # The held agent is silent: an idle_timeout of seconds would end it as stalled if the
    # stop came late on a loaded machine, which this test is not about.
    f = fleet('idle_timeout = "1h"')
    f.up()
    task = f.add("held", prompt=f"hold {gate}")
    run = f.wait_until(lambda: (r := f.store.open_runs()) and r[0].pid and r[0], what="spawn")
    assert f.cli("stop").returncode == 0
    assert f.daemon.wait(10) == 0
    gate.write_text("go")  # the agent ends while no daemon watches
    exit_file = f"{run.log_path}.exit"
    deadline = time.monotonic() + 20
    while not os.path.exists(exit_file):  # no daemon to wait on: the file itself
        assert time.monotonic() < deadline, "the shim wrote no exit file"
        time.sleep(0.02)
    ended_at = json.loads(open(exit_file).read())["ended_at"]
    f.daemon = None
    f.up()
    f.wait_final(task.id)
    [settled] = f.store.runs_of_task(task.id)
    assert settled.ended_at == pytest.approx(ended_at, abs=1e-6)  # not when the new daemon saw it
    assert settled.runtime == "command"


def test_an_agent_gone_with_its_machine_is_lost_without_a_strike_when_the_node_returns(
        fleet, tmp_path):
    # The machine died with the agent on it, and the node came back before another could
    # declare it down: its new daemon finds the run's process gone, without an exit status.
    # Had the node stayed down, another would have ended the run `lost` (no strike, ready at
    # once); the node coming back first must not make it the agent's crash, a strike and a
    # backoff (here, with one attempt allowed, a dead task).
    gate = tmp_path / "go"
    f = fleet("max_attempts = 1")
    f.up()
    task = f.add("held", prompt=f"hold {gate}")
    f.wait_until(lambda: (r := f.store.open_runs()) and r[0].pid, what="spawn")
    kill_machine(f.daemon)
    gate.write_text("go")  # the next run finds it and completes
    f.up()
    assert f.wait_final(task.id).state is TaskState.COMPLETED
    first, second = f.store.runs_of_task(task.id)
    assert first.outcome is Outcome.LOST and "while no daemon ran on this node" in first.error
    assert second.outcome is Outcome.SUCCEEDED


def test_an_open_run_nobody_watches_is_adopted_not_renewed_forever(fleet, tmp_path):
    # A run of this node whose watcher died (an error while settling it) used to stay open
    # with its lease renewed by the node every few seconds: `running` forever.
    f = fleet()
    f.up()
    f.wait_until(lambda: "taskherd up: node" in f.daemon_log.read_text(), what="daemon start")
    node = load_config(f.config_path).daemon.node
    gone = subprocess.Popen([PYTHON, "-c", "pass"])
    started = psutil.Process(gone.pid).create_time()
    gone.wait()
    log_path = tmp_path / "orphan.log"
    log_path.write_text("# taskherd {}\nhalf way\n")
    task = f.store.enqueue(NewTask(role="elsewhere", title="orphan"), time.time()).task
    claim = f.store.claim(ClaimRequest(node, time.time(), 60.0, roles=["elsewhere"]))
    f.store.mark_spawned(claim.run.id, time.time(), 60.0, pid=gone.pid, pid_started_at=started,
                         log_path=str(log_path))
    ended = f.wait_until(lambda: (r := f.store.get_run(claim.run.id)).ended_at and r,
                         what="the orphan run settled")
    assert ended.outcome is Outcome.CRASHED
    assert f.store.get_task(task.id).state is TaskState.READY



def test_processes_an_agent_leaves_behind_are_stopped_after_it_exits(fleet, tmp_path):
    f = fleet()
    f.up()
    task = f.add("leaves a child", prompt="leave-child")
    assert f.wait_final(task.id).state is TaskState.COMPLETED
    child = int((tmp_path / "leftover-pid").read_text())
    f.wait_until(lambda: not psutil.pid_exists(child)
                 or psutil.Process(child).status() == psutil.STATUS_ZOMBIE,
                 what="the left-behind child to be stopped")


def test_on_shutdown_wait_still_watches_the_agents_it_waits_for(fleet):
    f = fleet('max_attempts = 1', daemon_options='on_shutdown = "wait"\nshutdown_grace = "30s"')
    f.up()
    task = f.add("hangs", prompt="silent")
    f.wait_until(lambda: f.store.get_task(task.id).state is TaskState.RUNNING, what="running")
    f.daemon.send_signal(signal.SIGTERM)
    # The agent is silent: the stall is still noticed (idle_timeout 2 s) during the wait.
    assert f.daemon.wait(20) == 0
    assert last_run(f, task.id).outcome is Outcome.STALLED


def fork_servers(daemon: subprocess.Popen) -> list[int]:
    """Pids of the daemon's `shim.py --serve` children."""
    servers = []
    for child in psutil.Process(daemon.pid).children():
        try:
            if "--serve" in child.cmdline():
                servers.append(child.pid)
        except psutil.Error:  # exited while being looked at
            continue
    return servers


def test_one_fork_server_forks_every_shim_and_dies_with_the_daemon(fleet, tmp_path):
    f = fleet()  # max_concurrent = 4
    daemon = f.up()
    [server] = f.wait_until(lambda: fork_servers(daemon), what="the fork server")
    release = tmp_path / "release"
    tasks = [f.add(f"burst {index}", prompt=f"hold {release}") for index in range(4)]
    runs = f.wait_until(lambda: len(r := [last_run(f, task.id) for task in tasks
                                          if f.store.get_task(task.id).state
                                          is TaskState.RUNNING]) == 4 and r,
                        what="4 running")
    for run in runs:  # every shim forked by the one server, none started cold
        assert psutil.Process(run.pid).ppid() == server
    release.touch()
    assert all(f.wait_final(task.id).state is TaskState.COMPLETED for task in tasks)
    assert fork_servers(daemon) == [server]
    pidfd = os.pidfd_open(server)
    try:
        daemon.kill()  # even SIGKILL: the server sees its input close and exits
        daemon.wait(10)
        readable, _, _ = select.select([pidfd], [], [], 10)
        assert readable, "the fork server outlived its daemon"
    finally:
        os.close(pidfd)


def test_a_backlog_at_start_gets_forked_shims_not_cold_ones(fleet, tmp_path):
    # Tasks waiting when the daemon starts (a restart with a backlog) are claimed in its
    # first pass: their shims are the fork server's, not interpreters of their own (~10 ms
    # of CPU each before the agent starts, and ~3 MB for the run's whole life).
    f = fleet()  # max_concurrent = 4
    release = tmp_path / "release"
    tasks = [f.add(f"backlog {index}", prompt=f"hold {release}") for index in range(4)]
    daemon = f.up()
    runs = f.wait_until(lambda: len(r := [last_run(f, task.id) for task in tasks
                                          if f.store.get_task(task.id).state
                                          is TaskState.RUNNING]) == 4 and r,
                        what="4 running")
    [server] = fork_servers(daemon)
    assert [psutil.Process(run.pid).ppid() for run in runs] == [server] * 4
    release.touch()
    assert all(f.wait_final(task.id).state is TaskState.COMPLETED for task in tasks)


def test_the_daemon_indexes_the_tasks_added_for_the_search(fleet, database):
    """A task is found by its text as soon as it is added, and the daemon's text_index
    service takes it into the search's index behind it (SQLite; PostgreSQL indexes it as it
    is added)."""
    import sqlite3

    from taskherd.store.task_lists import TaskFilter

    f = fleet()
    f.up()
    added = f.add("calibrate the kestrel", prompt="complete")
    assert [t.id for t in f.store.filter_tasks(TaskFilter(text="KESTREL"))] == [added.id]
    if database.endswith(".db"):
        def mark() -> int:
            with sqlite3.connect(database) as db:
                return db.execute("SELECT indexed_to FROM tasks_fts_mark").fetchone()[0]

        f.wait_until(lambda: mark() >= added.id, what="the daemon's indexer")
        with sqlite3.connect(database) as db:
            assert db.execute("SELECT rowid FROM tasks_fts WHERE tasks_fts MATCH '\"kes\"'"
                              ).fetchall() == [(added.id,)]
    assert [t.id for t in f.store.filter_tasks(TaskFilter(text="KESTREL"))] == [added.id]
