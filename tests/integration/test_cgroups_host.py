"""taskherd.host.cgroups on this host's real cgroups, without a daemon: a process that joins a run's
cgroup the way the shim's child does (writing 0 to each join file before its exec) is held by
the caps written there, and `release` stops what is left and removes the cgroup. The layouts
of hosts this one is not (v2, a controller missing) are in tests/unit/test_cgroups.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from taskherd.host import cgroups
from taskherd.host.cgroups import Caps, CgroupUnavailable

HOST = cgroups.host()
pytestmark = pytest.mark.skipif(
    not HOST.bases and not os.environ.get("CI"),
    reason=f"this host has no cgroup this user may write: {HOST.missing}")

EAT_200_MIB = """
import sys
eaten = [bytearray(4 << 20) for _ in range(50)]  # every page touched (zeroed)
print("ate 200 MiB", flush=True)
"""

FORK_100 = """
import os, sys
read, write = os.pipe()
forked = refused = 0
for _ in range(100):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        os.close(write)
        os.read(read, 1)  # until the parent goes: then this one ends too
        os._exit(0)
    forked += 1
print(forked, refused, flush=True)
sys.stdin.read()  # stays, with its children, until killed
"""

BUSY = """
import time
start, cpu = time.monotonic(), time.process_time()
while time.monotonic() - start < 0.5:
    pass
print((time.process_time() - cpu) / (time.monotonic() - start), flush=True)
"""


def needs(*controllers: str) -> None:
    missing = [name for name in controllers if name not in HOST.bases]
    if missing and not os.environ.get("CI"):
        pytest.skip(f"this host cannot cap {', '.join(missing)}: "
                    f"{'; '.join(HOST.missing[name] for name in missing)}")


@pytest.fixture
def data_dir(tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    yield path
    cgroups.release_stale(path, keep=set(), where=HOST)


def joined(group: cgroups.RunCgroup, program: str, **popen) -> subprocess.Popen:
    """`program` started inside `group`, as the shim starts an agent: it joins before its
    exec, so it is counted from its first instruction."""
    join_then_exec = 'for f; do echo 0 > "$f" || exit 97; done; exec "$PY" -S -c "$PROGRAM"'
    return subprocess.Popen(["/bin/sh", "-c", join_then_exec, "sh", *group.join_files],
                            env={**os.environ, "PY": sys.executable, "PROGRAM": program},
                            stdout=subprocess.PIPE, text=True, **popen)


def members(folder: Path) -> list[int]:
    return [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]


def test_a_process_past_its_memory_cap_is_killed_and_counted(data_dir):
    needs("memory")
    group = cgroups.create(data_dir, 1, Caps(memory=32 << 20), HOST)
    eater = joined(group, EAT_200_MIB)
    out, _ = eater.communicate(timeout=60)
    assert eater.returncode == -9 and "ate" not in out  # not swapped out of its cap either
    assert cgroups.memory_killed(data_dir, 1, HOST) == 1


def test_a_set_made_ahead_becomes_the_runs_with_its_cap_in_force(data_dir):
    needs("pids")
    ready = cgroups.prepare(data_dir, Caps(pids=16), HOST)
    group = cgroups.create(data_dir, 3, Caps(pids=16), HOST, ready)
    forker = joined(group, FORK_100, stdin=subprocess.PIPE)
    forked, refused = map(int, forker.stdout.readline().split())
    assert (forked, refused) == (15, 85)  # its cap, written before the run was claimed
    assert cgroups.pids_refused(data_dir, 3, HOST) == refused
    cgroups.release(data_dir, 3, HOST)
    assert forker.wait(timeout=10) == -9


def test_a_fork_bomb_stops_at_its_pids_cap_and_release_stops_what_is_left(data_dir):
    needs("pids")
    group = cgroups.create(data_dir, 2, Caps(pids=16), HOST)
    forker = joined(group, FORK_100, stdin=subprocess.PIPE)
    forked, refused = map(int, forker.stdout.readline().split())
    [folder] = cgroups.run_folders(data_dir, 2, HOST)
    assert forked == 15 and refused == 85  # the forker itself is the 16th
    assert len(members(folder)) == 16
    assert cgroups.pids_refused(data_dir, 2, HOST) == refused

    cgroups.release(data_dir, 2, HOST)
    assert forker.wait(timeout=10) == -9
    assert cgroups.run_folders(data_dir, 2, HOST) == [] and not folder.exists()
    assert not folder.parent.exists()  # the data dir's folder goes with its last run
    cgroups.release(data_dir, 2, HOST)  # already gone: quiet


def test_a_cpu_cap_bounds_a_busy_loop(data_dir):
    needs("cpu")
    group = cgroups.create(data_dir, 3, Caps(cpu=0.2), HOST)
    busy = joined(group, BUSY)
    share = float(busy.communicate(timeout=30)[0])
    [folder] = cgroups.run_folders(data_dir, 3, HOST)
    stat = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
    # A fifth of a core, give or take a period's slack (a whole one uncapped), and the
    # cgroup's own count says its quota is what held it back.
    assert share < 0.5 and int(stat["nr_throttled"]) > 0


def test_a_reused_run_cgroup_is_emptied_and_takes_its_new_caps(data_dir):
    needs("memory", "pids")
    first = cgroups.create(data_dir, 4, Caps(memory=32 << 20, pids=8), HOST)
    leftover = joined(first, FORK_100, stdin=subprocess.PIPE)
    leftover.stdout.readline()
    # A restarted daemon, whose role's caps grew meanwhile, makes the same run's cgroup.
    again = cgroups.create(data_dir, 4, Caps(memory=64 << 20, pids=32), HOST)
    assert again.join_files == first.join_files
    assert leftover.wait(timeout=10) == -9
    memory, pids = cgroups.run_folders(data_dir, 4, HOST)
    assert int((memory / "memory.limit_in_bytes").read_text()) == 64 << 20
    if (memory / "memory.memsw.limit_in_bytes").exists():  # swap cannot stretch it either
        assert int((memory / "memory.memsw.limit_in_bytes").read_text()) == 64 << 20
    assert (pids / "pids.max").read_text().strip() == "32"


def test_two_data_dirs_never_share_a_cgroup(tmp_path):
    needs("pids")
    first, second = tmp_path / "a", tmp_path / "b"
    try:
        one = cgroups.create(first, 1, Caps(pids=8), HOST)
        other = cgroups.create(second, 1, Caps(pids=8), HOST)
        assert set(one.join_files).isdisjoint(other.join_files)
        sleeper = joined(one, "import sys; print('in'); sys.stdin.read()",
                         stdin=subprocess.PIPE)
        assert sleeper.stdout.readline() == "in\n"  # joined before its exec: inside by now
        [folder] = cgroups.run_folders(first, 1, HOST)
        [elsewhere] = cgroups.run_folders(second, 1, HOST)
        assert sleeper.pid in members(folder) and members(elsewhere) == []
        cgroups.release(second, 1, HOST)  # the other daemon's run ends: this one's runs on
        assert sleeper.poll() is None and folder.exists() and not elsewhere.parent.exists()
        cgroups.release(first, 1, HOST)
        assert sleeper.wait(timeout=10) == -9
    finally:
        for data in (first, second):
            cgroups.release_stale(data, keep=set(), where=HOST)


def test_a_daemon_that_may_not_write_the_cgroups_is_refused_saying_what_to_do(tmp_path):
    needs("memory", "pids", "cpu")
    if os.geteuid() != 0:
        pytest.skip("needs root, to act as an ordinary user")
    # A daemon run by an ordinary user on this host: the real hierarchies are root's.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        message = "made"
        try:
            os.setgid(65534)
            os.setuid(65534)
            cgroups.create(tmp_path / "data", 1, Caps(memory=64 << 20), cgroups.host())
        except CgroupUnavailable as error:
            message = str(error)
        except BaseException as error:  # noqa: BLE001 - reported to the test, not raised here
            message = f"{type(error).__name__}: {error}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        message = answer.read()
    os.waitpid(pid, 0)
    expected = ("its memory cap cannot be enforced here: " if HOST.version == 1 else
                "its memory cap cannot be enforced here: the daemon's cgroup")
    assert message.startswith(expected), message
    assert "run the daemon as root" in message or "Delegate=yes" in message
