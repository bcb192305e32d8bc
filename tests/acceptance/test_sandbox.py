"""A role's sandbox (`[roles.NAME.isolation] mode = "bwrap"`), with a real daemon and bwrap.

A boxed agent works in its workdir and reports through its door; the host's files are
read-only to it and the data dir, the config and the operator's keys are not there at all.
The box fails closed: when it cannot be made, the task waits blocked with the reason, no
strike, and its agent never runs unconfined. A daemon `kill -9`'d while a boxed agent works
re-adopts it, and the agent's report reaches the new daemon. (Each escape an agent might try
is in tests/security/.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import psutil
import pytest

from taskherd.host import procs
from taskherd.host.sandbox import STAGE_NAME
from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("CI"),
    reason="bubblewrap is not installed (apt install bubblewrap)")

LOOKS = """
    import json, os, subprocess, sys, time

    found, gate = sys.argv[1], sys.argv[2]
    home = os.environ["TASKHERD_HOME"]

    def attempt(action):
        try:
            action()
            return "done"
        except OSError as error:
            return type(error).__name__

    seen = {
        "data_dir": sorted(os.listdir(home)),
        "config": open(sys.argv[3]).read(),
        "ssh_key": attempt(lambda: open(sys.argv[4]).read()),
        "write_outside": attempt(lambda: open(sys.argv[5], "w").write("x")),
        "write_workdir": attempt(lambda: open("made-here", "w").write("x")),
        "pid": os.getpid(),
    }
    json.dump(seen, open(found + ".tmp", "w"))
    os.replace(found + ".tmp", found)
    while not os.path.exists(gate):  # works until the test lets it report
        time.sleep(0.05)
    sys.exit(subprocess.run([sys.executable, "-m", "taskherd", "done", "--summary",
                             "boxed"]).returncode)
"""


def boxed_fleet(root, isolation: str = 'mode = "bwrap"', path: str = "/usr/bin:/bin") -> Fleet:
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (root / "work").mkdir()
    program = agent(root, "looks", LOOKS)
    fleet = Fleet(root, f"""
        [daemon]
        data_dir = "data"
        timezone = "UTC"
        path = "{path}"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "{root / 'work' / 'found'}",
                   "{root / 'work' / 'gate'}", "{root / 'taskherd.toml'}",
                   "{home / '.ssh' / 'id_ed25519'}", "{root / 'outside'}"]
        workdir = "work"
        idle_timeout = "1h"

        [roles.worker.isolation]
        {isolation}
    """)
    fleet.env["HOME"] = str(home)
    fleet.env["PATH"] = f"{path}:{os.environ['PATH']}"
    return fleet


@pytest.fixture
def fleet(host_dir):
    made = boxed_fleet(host_dir)
    yield made
    made.close()


def test_a_boxed_agent_works_in_its_workdir_and_reports_through_its_door(fleet):
    fleet.up()
    task = fleet.add("look around")
    found = fleet.root / "work" / "found"
    seen = json.loads(fleet.wait_until(lambda: found.exists() and found.read_text(),
                                       what="the agent to look around"))
    (fleet.root / "work" / "gate").write_text("go")
    done = fleet.wait_final(task.id)
    assert done.state is TaskState.COMPLETED and done.summary == "boxed"
    # Of the data dir, only its door and its own run files are there (and, through a box
    # spare, the covered folder its run files were bound in from: empty, unreadable).
    assert [name for name in seen["data_dir"] if name != STAGE_NAME] == [
        "agent.sock", "door", "logs"]
    assert seen["config"] == ""  # /dev/null over it
    assert seen["ssh_key"] == "PermissionError" or seen["ssh_key"] == "FileNotFoundError"
    assert seen["write_outside"] == "OSError"  # EROFS
    assert seen["write_workdir"] == "done" and (fleet.root / "work" / "made-here").exists()
    assert not (fleet.root / "outside").exists()
    assert seen["pid"] < 10  # its own PID namespace


def test_a_daemon_killed_while_a_boxed_agent_works_readopts_it_and_gets_its_report(fleet):
    fleet.up()
    task = fleet.add("work through a restart")
    found = fleet.root / "work" / "found"
    fleet.wait_until(found.exists, what="the agent to start")
    [run] = fleet.wait_until(lambda: [r for r in fleet.store.open_runs() if r.pid],
                             what="the spawn on record")
    fleet.stop(signal.SIGKILL)
    fleet.up()
    fleet.wait_until(lambda: "re-adopted pid" in fleet.daemon_log.read_text(),
                     what="the new daemon to re-adopt the agent")
    (fleet.root / "work" / "gate").write_text("go")  # it reports to the new daemon, through its box
    done = fleet.wait_final(task.id)
    assert done.state is TaskState.COMPLETED and done.attempts == 0
    [only] = fleet.store.runs_of_task(task.id)
    assert only.id == run.id and only.outcome is Outcome.SUCCEEDED and only.report == "done"


def test_a_box_that_cannot_be_made_blocks_the_task_without_a_strike(host_dir):
    # A host whose user namespaces are off: bwrap answers as it does there.
    fake = host_dir / "fakebin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' "
                                ">&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    fleet = boxed_fleet(host_dir, path=f"{fake}:/usr/bin:/bin")
    try:
        fleet.env["PATH"] = f"{fake}:{fleet.env['PATH']}"
        fleet.up()
        task = fleet.add("never unconfined")
        blocked = fleet.wait_until(
            lambda: (t := fleet.store.get_task(task.id)).state is TaskState.BLOCKED and t,
            what="the task to be blocked")
        assert blocked.attempts == 0
        assert "sandbox cannot be made" in blocked.last_error
        assert "setting up uid map: Permission denied" in blocked.last_error
        assert not (host_dir / "work" / "found").exists()  # its agent never ran
        doctor = fleet.cli("doctor", check=False)
        assert "bwrap: setting up uid map" in doctor.stdout + doctor.stderr
    finally:
        fleet.close()


def test_a_missing_writable_path_blocks_the_task_naming_it(host_dir):
    missing = host_dir / "not-made"
    fleet = boxed_fleet(host_dir, isolation=f'mode = "bwrap"\nwritable = ["{missing}"]')
    try:
        fleet.up()
        task = fleet.add("needs a path")
        blocked = fleet.wait_until(
            lambda: (t := fleet.store.get_task(task.id)).state is TaskState.BLOCKED and t,
            what="the task to be blocked")
        assert blocked.attempts == 0
        assert f"writable path {missing} does not exist" in blocked.last_error
        assert not (host_dir / "work" / "found").exists()
    finally:
        fleet.close()


NETWORK = """
    import json, os, socket, subprocess, sys

    found, host_port = sys.argv[1], int(sys.argv[2])

    def attempt(action):
        try:
            action()
            return "done"
        except OSError as error:
            return type(error).__name__ + (f" {error.errno}" if error.errno else "")

    def own_loopback():
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        socket.create_connection(server.getsockname(), timeout=2).close()

    seen = {"host": attempt(lambda: socket.create_connection(("127.0.0.1", host_port),
                                                             timeout=2).close()),
            "own_loopback": attempt(own_loopback)}
    json.dump(seen, open(found, "w"))
    sys.exit(subprocess.run([sys.executable, "-m", "taskherd", "done"]).returncode)
"""


@pytest.mark.parametrize("network", ["host", "loopback", "none"])
def test_the_network_a_box_gives(host_dir, network):
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    (host_dir / "work").mkdir()
    program = agent(host_dir / "work", "network", NETWORK)
    fleet = Fleet(host_dir, f"""
        [daemon]
        data_dir = "data"
        timezone = "UTC"
        path = "/usr/bin:/bin"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "found", "{listener.getsockname()[1]}"]
        workdir = "work"

        [roles.worker.isolation]
        mode = "bwrap"
        network = "{network}"
    """)
    try:
        fleet.up()
        task = fleet.add("reach out")
        done = fleet.wait_final(task.id)
        assert done.state is TaskState.COMPLETED  # the door is a socket file: always there
        seen = json.loads((host_dir / "work" / "found").read_text())
        assert seen == {
            "host": {"host": "done", "loopback": "ConnectionRefusedError 111",
                     "none": "OSError 97"}[network],  # 97: EAFNOSUPPORT, no socket at all
            "own_loopback": "OSError 97" if network == "none" else "done"}
    finally:
        listener.close()
        fleet.close()


PLANTS_A_CHECK = """
    import subprocess, sys

    # The agent's code, which the role's gate runs: it tries to write outside the workdir.
    open("check.py", "w").write(
        "import sys\\n"
        "try:\\n"
        f"    open({sys.argv[1]!r}, 'w').write('escaped')\\n"
        "except OSError as error:\\n"
        "    print('refused:', error)\\n")
    sys.exit(subprocess.run([sys.executable, "-m", "taskherd", "done"]).returncode)
"""


@pytest.mark.parametrize("mode", ["bwrap", "off"])
def test_a_gate_runs_the_agents_code_in_the_agents_box(host_dir, mode):
    (host_dir / "work").mkdir()
    escaped = host_dir / "escaped"
    program = agent(host_dir / "work", "plants", PLANTS_A_CHECK)
    fleet = Fleet(host_dir, f"""
        [daemon]
        data_dir = "data"
        timezone = "UTC"
        path = "/usr/bin:/bin"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "{escaped}"]
        workdir = "work"

        [[roles.worker.gates]]
        name = "tests"
        argv = ["{PYTHON}", "-S", "check.py"]

        [roles.worker.isolation]
        mode = "{mode}"
    """)
    try:
        fleet.up()
        task = fleet.add("plant a check")
        assert fleet.wait_final(task.id).state is TaskState.COMPLETED
        # Off, the escape happens: the test would catch a gate run outside the box.
        assert escaped.exists() is (mode == "off")
    finally:
        fleet.close()


def test_the_liveness_verdicts_see_into_the_box(host_dir):
    """The box's parent is the shim: a silent CPU-bound agent's CPU is still counted (never
    stalled), a question is still read (blocked, no strike), a loop still ended."""
    from tests.integration.test_liveness_daemon import ASKS, COMPUTES, LOOPS

    (host_dir / "work").mkdir()
    programs = {name: agent(host_dir / "work", name, body)
                for name, body in (("cruncher", COMPUTES), ("asker", ASKS), ("looper", LOOPS))}
    roles = "".join(f"""
        [roles.{name}]
        command = ["{PYTHON}", "-S", "{program}"]
        workdir = "work"
        idle_timeout = "2s"
        input_timeout = "1s"
        loop_window = "30s"
        max_attempts = 1
        isolation = {{ mode = "bwrap" }}
    """ for name, program in programs.items())
    fleet = Fleet(host_dir, f"""
        [daemon]
        data_dir = "data"
        timezone = "UTC"
        path = "/usr/bin:/bin"
        max_concurrent = 3
        {roles}
    """)
    try:
        fleet.up()
        tasks = {name: fleet.add(name, role=name) for name in programs}
        crunched = fleet.wait_final(tasks["cruncher"].id, timeout=60)
        assert crunched.state is TaskState.COMPLETED
        asked = fleet.wait_until(
            lambda: (t := fleet.store.get_task(tasks["asker"].id)).state is TaskState.BLOCKED
            and t, what="the question to block its task")
        assert asked.attempts == 0 and "[y/N]" in asked.last_error
        [looped] = fleet.wait_until(
            lambda: [r for r in fleet.store.runs_of_task(tasks["looper"].id) if r.ended_at],
            timeout=40, what="the loop to be ended")
        assert looped.outcome is Outcome.LOOPING
    finally:
        fleet.close()


def test_a_boxed_agent_is_capped_too(host_dir):
    from tests.acceptance.test_caps import EATS

    (host_dir / "work").mkdir()
    program = agent(host_dir / "work", "eats", EATS)
    fleet = Fleet(host_dir, f"""
        [daemon]
        data_dir = "data"
        timezone = "UTC"
        path = "/usr/bin:/bin"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}"]
        workdir = "work"
        max_attempts = 1

        [roles.worker.isolation]
        mode = "bwrap"
        memory = "64M"
    """)
    try:
        fleet.up()
        task = fleet.add("eat in a box")
        done = fleet.wait_final(task.id)
        assert done.state is TaskState.DEAD
        assert done.last_error.startswith("out of memory: 64.0 MiB cap")
    finally:
        fleet.close()


def test_a_program_installed_in_tmp_still_runs_in_the_box(host_dir, tmp_path):
    """A checkout in /tmp (a CI's): the box's /tmp is private, but the agent's own program's
    folder there is given back, read-only; the rest of /tmp stays out of sight."""
    import tempfile

    installed = Path(tempfile.mkdtemp(prefix="taskherd-installed-", dir="/tmp"))
    try:
        program = installed / "bin" / "agent"
        program.parent.mkdir()
        program.write_text(f"#!/bin/sh\nls {tmp_path} 2>&1\necho 'TASK_COMPLETE: ran'\n")
        program.chmod(0o755)
        (tmp_path / "elsewhere-in-tmp").write_text("not for the agent")
        (host_dir / "work").mkdir()
        fleet = Fleet(host_dir, f"""
            [daemon]
            data_dir = "data"
            timezone = "UTC"
            path = "/usr/bin:/bin"

            [roles.worker]
            command = ["{program}"]
            workdir = "work"
            isolation = {{ mode = "bwrap" }}
        """)
        try:
            fleet.up()
            task = fleet.add("run from /tmp")
            done = fleet.wait_final(task.id)
            assert done.state is TaskState.COMPLETED and done.summary == "ran"
            [run] = fleet.store.runs_of_task(task.id)
            log = Path(run.log_path).read_text()
            assert "elsewhere-in-tmp" not in log and "No such file or directory" in log
        finally:
            fleet.close()
    finally:
        shutil.rmtree(installed, ignore_errors=True)


def box_spares(fleet: Fleet) -> list[psutil.Process]:
    """The bwrap processes of the daemon's box spares (their box's starter waiting in there)."""
    daemon = psutil.Process(fleet.daemon.pid)
    return [process for process in daemon.children(recursive=True)
            if process.name() == "bwrap" and "--in-box" in process.cmdline()
            and process.parent().name() != "bwrap"]


def test_a_boxed_role_waits_in_a_box_spare_and_a_reload_that_changes_its_box_remakes_it(
        fleet):
    fleet.up()
    [old] = fleet.wait_until(lambda: box_spares(fleet), what="the role's box spare")
    assert "--unshare-net" not in old.cmdline()
    text = fleet.config_path.read_text()
    fleet.config_path.write_text(text.replace('[roles.worker.isolation]\n',
                                              '[roles.worker.isolation]\nnetwork = "loopback"\n'))
    fleet.cli("reload")
    [new] = fleet.wait_until(lambda: [spare for spare in box_spares(fleet)
                                      if spare.pid != old.pid], what="a spare of the new box")
    assert "--unshare-net" in new.cmdline()
    old.wait(10)  # the old box gone with its spare
    task = fleet.add("look around")
    fleet.wait_until((fleet.root / "work" / "found").exists, what="the agent to look around")
    (fleet.root / "work" / "gate").write_text("go")
    assert fleet.wait_final(task.id).state is TaskState.COMPLETED
    [run] = fleet.store.runs_of_task(task.id)
    assert procs.read_header(Path(run.log_path))["box"] == "spare"
