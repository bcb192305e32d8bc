"""The shim fork server in taskherd.host.forkserver, against real processes.

Processes are waited for with events (pidfds, the server's condition), never by sleeping.
"""

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from taskherd.host import forkserver, procs
from tests.integration.fifo_gate import release

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 10.0


@pytest.fixture
def server():
    """A fork server up for this process; stopped afterwards."""
    forkserver.start()
    assert forkserver.wait_until_up(TIMEOUT), "the fork server did not start"
    yield forkserver.server_pid()
    forkserver.stop()


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


def wait_gone(pid, timeout=TIMEOUT):
    """Block until `pid` has exited: its pidfd turns readable."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(pidfd)


def until(condition, what, timeout=TIMEOUT):
    """Bounded polling for a condition no event announces (a line in a file)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def parent_of(pid):
    return psutil.Process(pid).ppid()


def test_a_burst_of_spawns_is_forked_by_one_server_each_shim_its_own_session(server, spawn):
    burst = [spawn(["sleep", "30"], name=f"burst-{index}") for index in range(6)]
    for process in burst:
        assert parent_of(process.pid) == server
        # Its header is written once it leads its session, before the agent starts.
        # until() calls the lambda within this turn of the loop (B023 cannot know).
        until(lambda: procs.read_header(process.log_path),  # noqa: B023
              what="the shim's header")
        assert os.getsid(process.pid) == os.getpgid(process.pid) == process.pid
        assert process.handle.is_alive()
    assert forkserver.server_pid() == server  # one server for all of them


def test_a_forked_run_gets_its_own_log_env_cwd_and_status(server, spawn):
    script = 'echo "run $TASKHERD_RUN_ID in $(pwd -P): $1"; exit 3'
    process = spawn(["sh", "-c", script, "sh", "naïve ✓ \n line"], name="own")
    assert not process.handle.is_child  # the server's child, watched by pidfd
    status = wait_exit(process)
    assert (status.code, status.source) == (3, "exit_file")
    lines = process.log_path.read_text().splitlines()
    assert procs.read_header(process.log_path)["pid"] == process.pid
    assert lines[1:] == [f"run 1 in {process.log_path.parent.resolve()}: naïve ✓ ", " line"]


def test_a_run_without_a_cwd_runs_in_the_spawners_as_a_cold_one_does(server, tmp_path,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = procs.agent_env(os.environ["PATH"], {}, {})
    process = procs.spawn(["pwd", "-P"], env=env, cwd=None, log_path=tmp_path / "where.log")
    assert not process.handle.is_child and wait_exit(process).succeeded
    assert process.log_path.read_text().splitlines()[1:] == [str(tmp_path.resolve())]


def test_a_killed_server_sends_the_spawn_cold_and_is_replaced(server, spawn):
    os.kill(server, signal.SIGKILL)
    assert wait_gone(server)
    process = spawn()
    assert process.handle.is_child  # started cold, at once
    assert wait_exit(process).succeeded
    assert forkserver.wait_until_up(TIMEOUT) and forkserver.server_pid() != server
    assert parent_of(spawn(["sleep", "5"]).pid) == forkserver.server_pid()


def spare_of(server, running=()):
    """The shim the server forked ahead for the next run: its one child not in `running`."""
    def waiting():
        children = [child for child in psutil.Process(server).children()
                    if child.pid not in running and child.status() != psutil.STATUS_ZOMBIE]
        return children[0].pid if len(children) == 1 else None
    until(waiting, what="the server's spare shim")
    return waiting()


def test_a_run_takes_the_shim_forked_before_it_was_asked_for(server, spawn):
    spare = spare_of(server)
    process = spawn(["sleep", "30"])
    assert process.pid == spare and process.handle.is_alive()
    until(lambda: procs.read_header(process.log_path), what="the shim's header")
    assert procs.read_header(process.log_path)["pid"] == spare
    # The next one is forked soon after its agent started, while nobody waits.
    assert spare_of(server, running={spare}) not in (spare, None)


def pidfds_of(pid):
    """The pids that `pid`'s pidfds name."""
    named = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[pidfd]":
                with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                    named += [int(line.split()[1]) for line in info if line.startswith("Pid:")]
        except FileNotFoundError:  # closed since the listing
            pass
    return named


def signal_masks(pid):
    with open(f"/proc/{pid}/status") as status:
        return {line.split(":")[0]: int(line.split()[1], 16) for line in status
                if line.startswith(("SigIgn", "SigCgt", "SigBlk"))}


def test_a_starter_looks_at_its_server_by_pidfd_that_neither_shim_nor_agent_keeps(server,
                                                                                 spawn):
    # Whether the server outlived a starter's answer was read from its shim's /proc stat
    # (three system calls and a line's parsing on the way to the exec): one poll of the
    # server's pidfd now. The agent must not get it: it would see (and pin) the server.
    spare = spare_of(server)
    until(lambda: psutil.Process(spare).children(), what="the spare's starter")
    starter, = psutil.Process(spare).children()
    assert pidfds_of(starter.pid) == [server]
    until(lambda: pidfds_of(spare) == [], what="the shim's copy closed")  # (after its fork)
    process = spawn(["sleep", "30"])
    assert process.pid == spare

    def agent():
        try:  # (its starter is mid-exec: its name, or the process, may be read in between)
            children = psutil.Process(spare).children()
            return children[0].pid if children and children[0].name() == "sleep" else None
        except psutil.Error:
            return None

    until(agent, what="the agent's exec")
    agent_pid = agent()
    assert sorted(os.listdir(f"/proc/{agent_pid}/fd")) == ["0", "1", "2"]
    assert pidfds_of(spare) == []
    # What the starter rehearsed before its run (the header, the signals' reset) left
    # nothing behind: one header, and none of the signals it touched ignored or blocked (an
    # ignore and the blocked mask outlive an exec; a handler does not, and what the program
    # catches once it runs, or what the test's environment ignores, is not the starter's).
    masks = signal_masks(agent_pid)
    touched = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    assert masks["SigBlk"] == 0
    assert [s for s in touched if masks["SigIgn"] >> (s - 1) & 1] == []
    assert [line for line in process.log_path.read_text().splitlines()
            if line.startswith(procs.HEADER_PREFIX)] == [
        process.log_path.read_text().splitlines()[0]]


@pytest.fixture
def lazy_server(monkeypatch):
    """A fork server that forks its next spare only when a run waits for one: its delay after
    a spare took its run is longer than any test, and no run is seen as part of a burst."""
    monkeypatch.setattr(forkserver, "NEXT_SPARE_DELAY", 100 * TIMEOUT)
    monkeypatch.setattr(forkserver, "BURST_WINDOW", 0)
    forkserver.stop()
    forkserver.start()
    assert forkserver.wait_until_up(TIMEOUT), "the fork server did not start"
    yield forkserver.server_pid()
    forkserver.stop()


def live_children(pid):
    live = []
    for child in psutil.Process(pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                live.append(child.pid)
        except psutil.NoSuchProcess:  # gone (and reaped) since the listing: not live
            pass
    return live


def test_the_next_spare_is_forked_after_the_agents_exec_when_a_run_waits(lazy_server, spawn):
    # Forked as soon as a spare took its run, the next one was forked beside that run's
    # exec, which it slowed by ~1 ms on a 2-core machine.
    first = spawn(["true"])
    assert wait_exit(first).succeeded
    asyncio.run(first.handle.wait_reaped(TIMEOUT))
    assert live_children(lazy_server) == []  # no run waits, and its delay has not passed
    second = spawn(["sleep", "30"])  # alive while its parent is looked at
    assert not second.handle.is_child and parent_of(second.pid) == lazy_server
    procs.terminate(second.handle, grace=0)


def test_in_a_burst_the_next_spare_is_forked_at_once(monkeypatch, spawn):
    # Each run of a burst waited for a fork of its own: 300 agents started in 4.5 s, not 1.9.
    monkeypatch.setattr(forkserver, "NEXT_SPARE_DELAY", 100 * TIMEOUT)
    monkeypatch.setattr(forkserver, "BURST_WINDOW", 100 * TIMEOUT)
    forkserver.stop()
    forkserver.start()
    try:
        assert forkserver.wait_until_up(TIMEOUT), "the fork server did not start"
        server = forkserver.server_pid()
        first = spawn(["sleep", "30"])  # taken within the burst window of its spare's fork
        assert spare_of(server, running={first.pid}) != first.pid  # the next, not delayed
    finally:
        forkserver.stop()


def test_a_starter_held_before_its_exec_holds_up_no_other_run(lazy_server, spawn, tmp_path,
                                                              gate):
    env = procs.agent_env(os.environ["PATH"], {}, {})
    held_at = tmp_path / "held"
    os.mkfifo(held_at)  # its starter's write to "join a cgroup" waits for our read
    held = procs.spawn(["true"], env=env, cwd=str(tmp_path), log_path=tmp_path / "held.log",
                       cgroups=[str(held_at)])
    try:
        # It stays until the gate opens: its parent is read while it is surely alive.
        other = spawn(["sh", "-c", 'read go < "$1"; echo not held up', "sh", str(gate)])
        assert not other.handle.is_child and parent_of(other.pid) == lazy_server
        release(gate)
        assert wait_exit(other).succeeded
        assert other.log_path.read_text().splitlines()[1:] == ["not held up"]
        assert held.handle.is_alive()
        with open(held_at, "rb") as joined:
            assert joined.read() == b"0"
        assert wait_exit(held).succeeded
    finally:
        if held.handle.is_alive():  # failed above: its starter would wait on the FIFO forever
            procs.terminate(held.handle, grace=0)


def test_a_killed_spare_is_replaced_when_a_run_comes_and_the_run_starts_once(server, spawn,
                                                                            tmp_path):
    spare = spare_of(server)
    os.kill(spare, signal.SIGKILL)
    assert wait_gone(spare)
    marks = tmp_path / "marks"
    process = spawn(["sh", "-c", f"echo started >> {marks}"])
    assert not process.handle.is_child and process.pid != spare  # forked, not cold
    assert wait_exit(process).succeeded
    assert marks.read_text() == "started\n"


def test_a_spare_whose_server_died_exits_without_starting_anything(server):
    spare = spare_of(server)
    os.kill(server, signal.SIGKILL)
    assert wait_gone(server) and wait_gone(spare), "the spare outlived its server"


def test_a_run_terminated_at_once_is_stopped_before_its_agent_starts(server, spawn, tmp_path):
    marks = tmp_path / "marks"
    process = spawn(["sh", "-c", f"echo started >> {marks}; exec sleep 30"])
    status = procs.terminate(process.handle, grace=5)  # maybe before it leads its group
    assert not process.handle.is_alive() and status is not None
    assert procs.live_group_members(process.pid) == []


def test_a_stopped_server_is_replaced_and_each_run_starts_once(server, spawn, tmp_path,
                                                               monkeypatch):
    monkeypatch.setattr(forkserver, "REPLY_TIMEOUT", 0.3)
    spare = spare_of(server)
    os.kill(server, signal.SIGSTOP)  # it can fork no spare after the one waiting
    marks = [tmp_path / "first", tmp_path / "second"]
    first = spawn(["sh", "-c", f"echo started >> {marks[0]}"])
    assert first.pid == spare  # the spare takes its run itself
    second = spawn(["sh", "-c", f"echo started >> {marks[1]}"])
    assert second.handle.is_child  # no spare answered: the spawn went cold after the timeout
    assert wait_exit(first).succeeded and wait_exit(second).succeeded
    assert wait_gone(server)  # killed, not left stopped
    assert [mark.read_text() for mark in marks] == ["started\n", "started\n"]


def test_a_spawn_never_waits_for_a_server_to_start(spawn, monkeypatch):
    # Up first: no start of an earlier test still under way (a server says it is up tens of
    # milliseconds after its process starts), which the start below would then install.
    forkserver.start()
    assert forkserver.wait_until_up(TIMEOUT)
    forkserver.stop()
    starting = threading.Event()
    release_start = threading.Event()
    real_start = forkserver._start_server
    spawning_thread = threading.get_ident()

    def stuck_start():
        assert threading.get_ident() != spawning_thread, "a spawn started the server itself"
        starting.set()
        release_start.wait(TIMEOUT)
        return real_start()

    monkeypatch.setattr(forkserver, "_start_server", stuck_start)
    try:
        forkserver.start()
        assert starting.wait(TIMEOUT)  # the start is stuck; spawns go on without it
        burst = [spawn() for _ in range(3)]
        assert all(process.handle.is_child for process in burst)
        assert all(wait_exit(process).succeeded for process in burst)
    finally:
        release_start.set()
    assert forkserver.wait_until_up(TIMEOUT)
    forkserver.stop()


OWNER = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from taskherd.host import forkserver
from taskherd.host import procs
forkserver.start()
assert forkserver.wait_until_up(10)
env = procs.agent_env(os.environ["PATH"], {}, {})
process = procs.spawn(["sh", "-c", "read x < " + sys.argv[2] + "; exit 7"], env=env, cwd=None,
                      log_path=Path(sys.argv[3]))
print(json.dumps({"server": forkserver.server_pid(), "shim": process.pid,
                  "started_at": process.started_at}), flush=True)
sys.stdin.read()  # stay until killed, like a daemon
"""


@pytest.mark.parametrize("end", ["sigkill", "exit"])
def test_the_server_dies_with_its_owner_and_its_shims_run_on(end, tmp_path, gate):
    log_path = tmp_path / "survivor.log"
    with subprocess.Popen([sys.executable, "-c", OWNER, str(REPO_ROOT), str(gate), str(log_path)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as owner:
        record = json.loads(owner.stdout.readline())
        if end == "sigkill":
            owner.kill()
        else:
            owner.stdin.close()  # it returns from its script and exits normally
        owner.wait(TIMEOUT)
    assert wait_gone(record["server"]), "the fork server outlived its owner"
    # The run goes on without daemon or server, and a new daemon learns how it ended.
    handle = procs.adopt(record["shim"], record["started_at"], log_path)
    assert handle is not None and handle.is_alive()
    release(gate)
    status = asyncio.run(asyncio.wait_for(handle.wait_exit(), TIMEOUT))
    assert (status.code, status.source) == (7, "exit_file")


def test_a_forked_child_neither_uses_nor_keeps_alive_its_parents_server(server, spawn, tmp_path):
    report_read, report_write = os.pipe()
    gate_read, gate_write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe, then waits
        try:
            os.close(report_read)
            os.close(gate_write)
            env = procs.agent_env(os.environ["PATH"], {}, {})
            process = procs.spawn(["true"], env=env, cwd=None, log_path=tmp_path / "child.log")
            os.write(report_write, json.dumps({"seen": forkserver.server_pid(),
                                               "cold": process.handle.is_child}).encode())
            os.close(report_write)
            os.read(gate_read, 1)  # alive until the parent is done checking
        finally:
            os._exit(0)
    os.close(report_write)
    os.close(gate_read)
    try:
        with os.fdopen(report_read) as report_file:
            report = json.loads(report_file.read())
        assert report == {"seen": None, "cold": True}
        # The server is still the parent's to use...
        process = spawn(["sleep", "30"])  # alive while its parent is looked at
        assert parent_of(process.pid) == server
        procs.terminate(process.handle, grace=0)
        # ...and to stop: the live child holds no copy of its input, or EOF never came.
        with forkserver._server._changed:
            forkserver._server._server.stdin.close()  # what the parent's exit would do
        assert wait_gone(server), "the forked child kept the parent's server alive"
    finally:
        os.close(gate_write)
        os.waitpid(child, 0)


def test_a_server_is_up_once_its_first_spare_waits(server):
    # Runs go to a server only once it is up: one sent during its start-up (an interpreter,
    # its warm-ups: tens of milliseconds) waited for it between its claim and its agent's
    # exec, and held the daemon's loop meanwhile.
    assert psutil.Process(server).children(), "said up before its first spare was forked"


def test_the_server_imports_no_module_that_its_shims_would_carry():
    # Every module the server holds is memory in each shim it forks, and json (re, enum,
    # functools...) would also cost each cold spawn as much CPU as Python's own start-up.
    server = subprocess.run([*forkserver.shim_command("--serve")[:-2], "-X", "importtime",
                             forkserver.SHIM_PATH, "--serve"], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=TIMEOUT, check=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in server.stderr.splitlines()}
    assert not imported & {"json", "re", "enum", "signal", "threading", "subprocess"}



def test_an_ended_forked_shim_is_reaped_so_its_group_is_gone(server, spawn):
    # Until the server reaps it, a shim's zombie keeps its process group in existence, and
    # the daemon's look for leftovers would walk every process for nothing.
    process = spawn(["true"])
    assert wait_exit(process).succeeded
    asyncio.run(process.handle.wait_reaped(TIMEOUT))
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)


def test_a_process_behind_a_descriptor_past_1024_is_still_seen_ending():
    """A thousand agents watched by pidfd put descriptors past select()'s limit of 1024; the
    daemon must still see each one end (select() raised ValueError for them)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2100:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} leaves no descriptor past 2048")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2100), hard))
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    pidfd = os.pidfd_open(child.pid)
    high = os.dup2(pidfd, 2048)
    try:
        assert not procs._is_readable(high)  # alive: not readable
        child.stdin.close()  # it ends
        assert forkserver.wait_readable(high, TIMEOUT)
        assert procs._is_readable(high)
    finally:
        child.kill()
        child.wait()
        os.close(high)
        os.close(pidfd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_forked_runs_with_a_capped_log_each_get_their_output_and_status(server, tmp_path):
    # The shim opens the log to copy a capped log into; its agent's starter makes the log
    # and writes its header, so the shim must learn of the run only once the log exists.
    env = procs.agent_env(os.environ["PATH"], {}, {})
    burst = [procs.spawn(["sh", "-c", f"echo out {index}; exit {index}"], env=env,
                         cwd=str(tmp_path), log_path=tmp_path / f"capped-{index}.log",
                         header={"run": index}, max_log_bytes=1 << 20)
             for index in range(12)]
    for index, process in enumerate(burst):
        assert not process.handle.is_child  # forked
        status = wait_exit(process)
        assert (status.code, status.source) == (index, "exit_file")
        assert process.log_path.read_text().splitlines()[1:] == [f"out {index}"]


def test_stop_ends_the_server_at_once():
    # (It was kept, and ended only by the next start: a box spare waiting on its input too.)
    forkserver.start()
    assert forkserver.wait_until_up(TIMEOUT)
    pid = forkserver.server_pid()
    forkserver.stop()
    assert forkserver.server_pid() is None
    assert wait_gone(pid), "the server outlived stop()"


def test_a_server_whose_start_began_before_a_stop_is_not_used_after_it(monkeypatch):
    # stop() then start() (new settings, say) must not be served by a server whose start
    # was under way before the stop: it was started with the old ones.
    forkserver.start()
    assert forkserver.wait_until_up(TIMEOUT)  # no earlier start under way
    forkserver.stop()
    started: list[int] = []
    first_begun, release_first = threading.Event(), threading.Event()
    real_start = forkserver._start_server

    def start_server():
        if not started:
            first_begun.set()
            release_first.wait(TIMEOUT)
        server = real_start()
        started.append(server.pid)
        return server

    monkeypatch.setattr(forkserver, "_start_server", start_server)
    forkserver.start()
    assert first_begun.wait(TIMEOUT)
    forkserver.stop()
    forkserver.start()
    release_first.set()
    try:
        assert forkserver.wait_until_up(TIMEOUT)
        assert len(started) == 2 and forkserver.server_pid() == started[1]
    finally:
        forkserver.stop()
