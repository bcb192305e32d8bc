"""taskherd.host.procs against real processes: spawn, exit capture, adopt, activity, kill."""

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from taskherd.host import activity, forkserver, procs
from tests.integration.fifo_gate import release

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADER = {"run_id": 11, "task_id": 7, "role": "coder"}


def wait_until(condition, timeout=3.0, what="condition"):
    """Bounded polling for a condition that no event announces."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def wait_exit(handle, timeout=3.0):
    return asyncio.run(asyncio.wait_for(handle.wait_exit(), timeout))


def agent_output(process):
    """The log's lines after the header (which quotes argv, so never search it)."""
    return process.log_path.read_text().splitlines()[1:]


def is_gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def env():
    return procs.agent_env(os.environ["PATH"], {}, {"TASKHERD_RUN_ID": "11"})


@pytest.fixture(params=["forked", "cold"])
def shims(request):
    """Every test of a spawn runs twice: shims forked by the fork server (as the daemon
    spawns them) and cold-started shims (its fallback), which must behave the same."""
    if request.param == "forked":
        forkserver.start()
        assert forkserver.wait_until_up(10), "the fork server did not start"
    else:
        forkserver.stop()
    yield request.param
    forkserver.stop()


@pytest.fixture
def run(tmp_path, env, shims):
    """Spawn agents in tmp_path; anything still running is killed at teardown."""
    spawned = []

    def start(argv, name="run", **kwargs):
        # Capped as every role's log is: the agent writes into the shim's pipe.
        kwargs.setdefault("max_log_bytes", 1 << 20)
        process = procs.spawn(argv, env=kwargs.pop("env", env), cwd=str(tmp_path),
                              log_path=tmp_path / f"{name}.log", header=HEADER, **kwargs)
        spawned.append(process.handle)
        # Forked shims are the server's children, cold ones ours: the path asked for was taken.
        assert process.handle.is_child == (shims == "cold")
        return process

    yield start
    for handle in spawned:
        if handle.is_alive():
            procs.terminate(handle, grace=0.1)


def test_log_starts_with_header_then_agent_output(run, tmp_path):
    process = run(["sh", "-c", "echo out; echo err >&2"])
    assert wait_exit(process.handle) == procs.ExitStatus(
        code=0, ended_at=procs.read_exit_file(process.exit_path).ended_at)
    lines = process.log_path.read_text().splitlines()
    assert lines[0].startswith("# taskherd {")
    header = procs.read_header(process.log_path)
    assert header["run_id"] == 11 and header["task_id"] == 7 and header["role"] == "coder"
    assert header["argv"] == ["sh", "-c", "echo out; echo err >&2"]
    assert header["pid"] == process.pid and abs(header["time"] - time.time()) < 60
    assert lines[1:] == ["out", "err"]
    assert stat.S_IMODE(process.log_path.stat().st_mode) == 0o600


def test_header_alone_proves_birth_of_a_silent_agent(run):
    process = run(["true"])
    wait_exit(process.handle)
    assert len(process.log_path.read_text().splitlines()) == 1
    assert procs.read_header(process.log_path)["pid"] == process.pid


@pytest.mark.parametrize("code", [0, 3])
def test_exit_code_is_captured(run, code):
    process = run(["sh", "-c", f"exit {code}"])
    status = wait_exit(process.handle)
    assert (status.code, status.signal, status.source) == (code, None, "exit_file")
    assert status.succeeded == (code == 0)


def test_death_by_signal_is_captured(run):
    process = run(["sh", "-c", "kill -KILL $$"])
    status = wait_exit(process.handle)
    assert (status.code, status.signal) == (None, signal.SIGKILL)


def test_stdin_comes_from_file(run, tmp_path):
    (tmp_path / "prompt.txt").write_text("the prompt\n")
    process = run(["cat"], stdin_path=tmp_path / "prompt.txt")
    wait_exit(process.handle)
    assert agent_output(process) == ["the prompt"]


def test_a_kept_open_stdin_takes_input_for_the_runs_life_and_then_refuses(run, tmp_path):
    # `cat` would end at the end of its input: with the input kept open it waits for more.
    process = run(["sh", "-c", "read first; echo got $first; read second; echo got $second"],
                  keep_input_open=True)
    channel = procs.input_path_for(process.log_path)
    # The shim holds the channel from before it writes the log's header line.
    wait_until(lambda: procs.read_header(process.log_path), timeout=30, what="the shim")
    assert stat.S_ISFIFO(channel.stat().st_mode) and stat.S_IMODE(channel.stat().st_mode) == 0o600
    procs.send_input(process.log_path, b"one\n")
    wait_until(lambda: agent_output(process) == ["got one"], timeout=30, what="the first answer")
    assert process.handle.is_alive()  # no end of input after the first line
    procs.send_input(process.log_path, b"two\n")
    assert wait_exit(process.handle, timeout=30).code == 0
    assert agent_output(process) == ["got one", "got two"]
    with pytest.raises(ProcessLookupError):  # nobody holds the other end any more
        procs.send_input(process.log_path, b"three\n")
    with pytest.raises(FileNotFoundError):  # a run without an input channel
        procs.send_input(tmp_path / "other.log", b"x\n")


def test_missing_program_fails_before_anything_starts(run, tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-agent"):
        run(["no-such-agent-xyz"])
    assert not (tmp_path / "run.log").exists()


def test_reused_log_path_does_not_report_previous_exit(run):
    first = run(["sh", "-c", "exit 4"], name="same")
    assert wait_exit(first.handle).code == 4
    second = run(["sh", "-c", "exit 0"], name="same")
    assert wait_exit(second.handle).code == 0


SPAWNER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from taskherd.host import forkserver
from taskherd.host import procs
forkserver.start()  # as the daemon does: its shims are forked by its server
assert forkserver.wait_until_up(10)
args = json.loads(sys.argv[2])
process = procs.spawn(args["argv"], env=args["env"], cwd=None,
                      log_path=Path(args["log"]), header={"run_id": 1})
print(json.dumps({"pid": process.pid, "started_at": process.started_at,
                  "forked": not process.handle.is_child}), flush=True)
sys.stdin.read()  # stay until killed, like a daemon
"""


def spawn_from_doomed_daemon(argv, log_path, env):
    """Spawn through procs in another process, then SIGKILL that process."""
    daemon = subprocess.Popen(
        [sys.executable, "-c", SPAWNER, str(REPO_ROOT),
         json.dumps({"argv": argv, "env": env, "log": str(log_path)})],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    record = json.loads(daemon.stdout.readline())
    assert record["forked"], "the shim was not forked by the spawner's fork server"
    daemon.kill()  # and its fork server with it (end of input)
    daemon.wait(timeout=5)
    return record



def test_adopt_live_agent_after_daemon_kill_learns_its_exit(tmp_path, env, gate):
    log_path = tmp_path / "adopted.log"
    record = spawn_from_doomed_daemon(["sh", "-c", f"read x < {gate}; exit 5"], log_path, env)
    handle = procs.adopt(record["pid"], record["started_at"], log_path)
    assert handle is not None and handle.is_alive() and not handle.is_child
    release(gate)
    started = time.monotonic()
    status = wait_exit(handle)
    assert time.monotonic() - started < 1.0  # death noticed within a second
    assert (status.code, status.source) == (5, "exit_file")


def test_adopt_agent_that_exited_while_no_daemon_ran(tmp_path, env, gate):
    log_path = tmp_path / "orphan.log"
    record = spawn_from_doomed_daemon(["sh", "-c", f"read x < {gate}; exit 6"], log_path, env)
    release(gate)
    wait_until(procs.exit_path_for(log_path).exists, what="the shim's exit file")
    wait_until(lambda: is_gone(record["pid"]), what="the shim to exit")
    handle = procs.adopt(record["pid"], record["started_at"], log_path)
    assert not handle.is_alive()
    assert handle.poll().code == 6


def test_adopt_without_exit_file_reports_unknown(run):
    process = run(["true"])
    wait_exit(process.handle)
    process.exit_path.unlink()  # as if the shim had been SIGKILLed
    handle = procs.adopt(process.pid, process.started_at, process.log_path)
    assert handle.poll() == procs.UNKNOWN_EXIT and not handle.poll().known


def test_adopt_nothing_ever_spawned_returns_none(tmp_path):
    assert procs.adopt(os.getpid(), 0.0, tmp_path / "never.log") is None


def test_pid_reuse_is_not_mistaken_for_life(run):
    process = run(["sleep", "30"])
    wrong = procs.adopt(process.pid, process.started_at - 10, process.log_path)
    assert not wrong.is_alive()
    assert wrong.poll() == procs.UNKNOWN_EXIT
    right = procs.adopt(process.pid, process.started_at, process.log_path)
    assert right.is_alive()


def agent_is_running(process, program):
    def check():
        try:
            children = psutil.Process(process.pid).children()
            return any(child.name() == program for child in children)
        except psutil.Error:
            return False
    return check


def test_activity_tells_busy_printing_and_idle_agents_apart(run):
    busy = run(["sh", "-c", "while :; do :; done"], name="busy")
    printer = run(["sh", "-c", "while :; do echo tick; sleep 0.02; done"], name="printer")
    idle = run(["sleep", "30"], name="idle")
    wait_until(agent_is_running(idle, "sleep"), what="sleep to be exec'd")
    wait_until(agent_is_running(busy, "sh"), what="busy loop to start")
    before = {p.pid: activity.activity(p.handle) for p in (busy, printer, idle)}

    wait_until(lambda: activity.activity(busy.handle).cpu_seconds
               > before[busy.pid].cpu_seconds + 0.05, what="busy CPU growth")
    wait_until(lambda: activity.activity(printer.handle).log_size
               > before[printer.pid].log_size, what="printer log growth")

    after_idle = activity.activity(idle.handle)
    assert after_idle.log_size == before[idle.pid].log_size
    assert after_idle.cpu_seconds == before[idle.pid].cpu_seconds
    assert after_idle.process_count == 2  # the shim and sleep
    assert activity.activity(busy.handle).log_size == before[busy.pid].log_size


def test_activity_of_finished_run_has_no_processes(run):
    process = run(["sh", "-c", "echo done"])
    wait_exit(process.handle)
    sample = activity.activity(process.handle)
    assert sample.process_count == 0 and sample.log_size > 0


def test_terminate_kills_group_including_grandchild_that_ignores_sigterm(run, tmp_path):
    grandchild = ("trap '' TERM; echo $$ > grandchild.pid; "
                  "while :; do sleep 1; done")
    process = run(["sh", "-c", f'sh -c "{grandchild}" & wait'])
    pid_file = tmp_path / "grandchild.pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(),
               what="grandchild pid")
    grandchild_pid = int(pid_file.read_text())

    status = procs.terminate(process.handle, grace=0.3)

    assert (status.signal, status.source) == (signal.SIGTERM, "exit_file")
    assert is_gone(grandchild_pid)
    assert procs.live_group_members(process.pid) == []


def test_terminate_records_sigkill_when_agent_ignores_sigterm(run):
    process = run(["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"])
    wait_until(lambda: "ready" in agent_output(process), what="agent ready")
    status = procs.terminate(process.handle, grace=0.2)
    assert (status.signal, status.source) == (signal.SIGKILL, "terminate")
    adopted = procs.adopt(process.pid, process.started_at, process.log_path)
    assert adopted.poll().signal == signal.SIGKILL  # a restarted daemon learns it too
    assert process.exit_path.stat().st_mode & 0o777 == 0o600  # was 0644, unlike every data file


def test_sigterm_to_shim_reaches_agent_once(run):
    agent = ("n=0; trap 'n=$((n+1)); echo term $n' TERM; echo ready; "
             "while [ $n -eq 0 ]; do sleep 0.05; done; sleep 0.1; exit 7")
    process = run(["sh", "-c", agent])
    wait_until(lambda: "ready" in agent_output(process), what="agent ready")
    os.kill(process.pid, signal.SIGTERM)
    assert wait_exit(process.handle).code == 7
    # The agent's own `sleep` child also got the group's SIGTERM (sh reports it
    # as "Terminated"); the agent itself must have been told exactly once.
    traps = [line for line in agent_output(process) if "term" in line]
    assert traps == ["term 1"]


def test_terminate_async_of_finished_run_returns_its_status(run):
    process = run(["sh", "-c", "exit 2"])
    wait_exit(process.handle)
    assert asyncio.run(procs.terminate_async(process.handle, grace=0.1)).code == 2


def test_agent_env_is_explicit_and_unnested():
    inherited = {"HOME": "/home/a", "LANG": "C.UTF-8", "CLAUDECODE": "1",
                 "CLAUDE_CODE_ENTRYPOINT": "cli", "SECRET_TOKEN": "x"}
    env = procs.agent_env("/usr/bin:/bin", {"ROLE_VAR": "r", "CLAUDECODE": "1"},
                          {"TASKHERD_RUN_ID": "11", "TASKHERD_TASK_ID": "7"},
                          inherit_from=inherited)
    assert env == {"HOME": "/home/a", "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin",
                   "ROLE_VAR": "r", "TASKHERD_RUN_ID": "11", "TASKHERD_TASK_ID": "7"}
    with pytest.raises(ValueError, match="RUN_ID"):
        procs.agent_env("/bin", {}, {"RUN_ID": "1"})


def test_agent_sees_its_env_without_claudecode(run, monkeypatch):
    monkeypatch.setenv("CLAUDECODE", "1")
    env = procs.agent_env(os.environ["PATH"], {}, {"TASKHERD_ROLE": "coder"})
    process = run(["env"], env=env)
    wait_exit(process.handle)
    seen = agent_output(process)
    assert "TASKHERD_ROLE=coder" in seen
    assert not any(line.startswith("CLAUDECODE=") for line in seen)


def test_agent_gets_default_sigpipe(run):
    # Python ignores SIGPIPE for itself; an agent inheriting that would make
    # `yes | head` spin on EPIPE errors instead of dying quietly.
    process = run(["sh", "-c", "yes | head -n 1"])
    assert wait_exit(process.handle).code == 0
    assert agent_output(process) == ["y"]


def test_shim_records_exec_failure(tmp_path):
    exit_path = tmp_path / "x.exit"
    shim = subprocess.run(forkserver.shim_command(str(exit_path), "{", str(tmp_path / "x.log"),
                                                  "0", "0", "--", str(tmp_path / "missing")),
                          check=False, capture_output=True, text=True)
    assert shim.returncode == 127
    assert procs.read_exit_file(exit_path).code == 127
    assert shim.stdout.startswith("# taskherd {") and "exec failed" in shim.stderr


def test_many_waiters_on_one_handle_all_wake(run, gate):
    process = run(["sh", "-c", f"read x < {gate}; exit 9"])

    async def wait_from_several_tasks():
        waiters = [asyncio.create_task(process.handle.wait_exit()) for _ in range(3)]
        await asyncio.sleep(0)  # let every waiter register before the exit
        waiters[0].cancel()
        release(gate)
        return await asyncio.wait_for(asyncio.gather(*waiters[1:]), 3)

    assert [status.code for status in asyncio.run(wait_from_several_tasks())] == [9, 9]


def test_an_uncapped_agent_writes_its_log_itself(run):
    process = run(["sh", "-c", "echo out; ls -l /proc/$$/fd/1"], max_log_bytes=None)
    wait_exit(process.handle)
    out, fd_line = agent_output(process)
    assert out == "out" and fd_line.endswith(str(process.log_path))  # no pipe between


def test_a_capped_log_keeps_head_cut_line_and_tail(run):
    process = run([sys.executable, "-S", "-c",
                   "import sys\nfor i in range(100000): print(f'line {i:06d}')\nsys.exit(4)"],
                  max_log_bytes=32 << 10)
    assert wait_exit(process.handle).code == 4
    log = process.log_path.read_bytes()
    assert len(log) <= 32 << 10
    lines = log.decode().splitlines()
    assert lines[1] == "line 000000" and lines[-1] == "line 099999"
    cut = [index for index, line in enumerate(lines) if line.startswith("# taskherd cut ")]
    assert len(cut) == 1
    kept = lines[cut[0] + 1:]
    assert kept == [f"line {i:06d}" for i in range(100000 - len(kept), 100000)]
    left_out = int(lines[cut[0]].split()[3])
    head = sum(len(line) + 1 for line in lines[1:cut[0]])
    tail = sum(len(line) + 1 for line in kept)
    # + 1: the head's cut line starts with its newline
    assert left_out == 100000 * len("line 000000\n") - head - tail + 1


def test_a_process_the_agent_left_holding_its_output_does_not_hold_its_exit(run, gate):
    # The agent starts a child that writes after the agent has ended, once the gate opens.
    process = run(["sh", "-c", f"(read x < {gate}; echo late words) & echo early words; exit 3"])
    assert wait_exit(process.handle).code == 3  # the exit file is there, the child still runs
    release(gate)
    wait_until(lambda: "late words" in agent_output(process), what="the late words copied")
    assert agent_output(process) == ["early words", "late words"]


def test_an_agent_whose_shim_is_killed_gets_sigpipe_at_its_next_write(run, gate, tmp_path):
    # The writer is a subshell, so that the agent can note how it ended (in a file).
    status = tmp_path / "status"
    script = f"echo started; read x < {gate}; (while :; do echo more; done); echo $? > {status}"
    process = run(["sh", "-c", script])
    wait_until(lambda: "started" in agent_output(process), what="the agent's first line")
    os.kill(process.pid, signal.SIGKILL)
    wait_exit(process.handle)
    release(gate)
    wait_until(lambda: status.exists() and status.read_text().endswith("\n"),
               what="the writer's end")
    assert status.read_text().strip() == str(128 + signal.SIGPIPE)
