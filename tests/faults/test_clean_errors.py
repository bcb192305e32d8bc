"""A fault of the machine reaches a person as one line and exit 1, never a traceback: a
database another process holds locked past the wait, a full disk, a PostgreSQL server that
is away or goes away mid-command, a daemon that vanished before `stop` or `reload` could
signal it. Real processes (`python -m taskherd`), a real lock, a real tmpfs, a real server."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskherd.config import load_config
from taskherd.daemon import NodeLock

CONFIG = '[daemon]\ndatabase = "{database}"\n\n[roles.coder]\ncommand = ["true"]\n'


def workspace(folder: Path, database: str = "taskherd.db") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "taskherd.toml").write_text(CONFIG.format(database=database))
    return folder


def taskherd(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "TASKHERD_HOME": str(folder / "home"), **env}
    environment.pop("TASKHERD_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "taskherd", *args], cwd=folder,
                          env=environment, capture_output=True, text=True, timeout=60,
                          check=False)


def assert_one_line(done: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 1, and stderr is one line (saying each of `words`), with no traceback."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def titles(folder: Path) -> list[str]:
    listed = taskherd(folder, "task", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return [task["title"] for task in json.loads(listed.stdout)]


@contextlib.contextmanager
def write_lock_held(database: Path) -> Iterator[None]:
    """Another process holds the database's write lock (BEGIN IMMEDIATE) until the block
    ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sqlite3, sys\n"
                                f"db = sqlite3.connect({str(database)!r}, isolation_level=None)\n"
                                "db.execute('BEGIN IMMEDIATE')\nprint('held', flush=True)\n"
                                "sys.stdin.read()\n")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)


def test_a_database_locked_past_the_wait_is_one_line_and_changes_nothing(tmp_path):
    folder = workspace(tmp_path)
    assert taskherd(folder, "task", "add", "--role", "coder", "before").returncode == 0
    with write_lock_held(folder / "taskherd.db"):
        added = taskherd(folder, "--busy-timeout", "0.3", "task", "add", "--role", "coder",
                         "during")
        assert_one_line(added, "database is locked", "try again")
        cancelled = taskherd(folder, "task", "cancel", "1", TASKHERD_BUSY_TIMEOUT="0.3")
        assert_one_line(cancelled, "database is locked")
    assert titles(folder) == ["before"]
    assert taskherd(folder, "task", "show", "1", "--json").stdout.count('"ready"') >= 1


@pytest.fixture
def tiny_disk(tmp_path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root: the full-disk test runs as root (CI)")
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs",
                           str(mount)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> None:
    """Write until the disk says ENOSPC."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 65536)
    finally:
        os.close(fd)


def test_a_full_disk_is_one_line_and_loses_nothing(tiny_disk, tmp_path):
    folder = workspace(tiny_disk)
    assert taskherd(folder, "task", "add", "--role", "coder", "before").returncode == 0
    fill(tiny_disk)
    prompt = tmp_path / "prompt.txt"  # on another disk: the database's is the full one
    prompt.write_text("x" * 200_000)
    for args in (["task", "add", "--role", "coder", "small"],
                 ["task", "add", "--role", "coder", "--prompt-file", str(prompt), "large"],
                 ["task", "cancel", "1"]):
        # "database or disk is full", or, when even the WAL's index cannot grow, a "disk I/O
        # error" at the open: either way the line says the disk may be full.
        assert_one_line(taskherd(folder, *args), "full", "free space", "try again")
    (tiny_disk / "filler").unlink()  # space returns: nothing was lost, nothing half-made
    assert titles(folder) == ["before"]
    assert taskherd(folder, "task", "add", "--role", "coder", "after").returncode == 0
    assert sorted(titles(folder)) == ["after", "before"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_postgresql_away_or_lost_mid_command_is_one_line(tmp_path):
    from tests.pg import _stop, start_server, stop_server

    closed = workspace(tmp_path / "closed",
                       f"postgresql://taskherd@127.0.0.1:{free_port()}/taskherd")
    assert_one_line(taskherd(closed, "task", "list"), "cannot open database",
                    "check that the PostgreSQL server runs")
    # A daemon's start opens the store itself: the line comes from the CLI's last resort.
    assert_one_line(taskherd(closed, "up"), "database is out of reach")
    server = start_server()  # its own: this test stops it
    try:
        folder = workspace(tmp_path / "lost", server.url(server.create_database()))
        assert taskherd(folder, "task", "add", "--role", "coder", "t").returncode == 0
        watch = subprocess.Popen(
            [sys.executable, "-m", "taskherd", "status", "--watch", "--interval", "0.2"],
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TASKHERD_HOME": str(folder / "home")})
        try:
            assert watch.stdout.readline()  # it has read the queue once: the connection is up
            _stop(server)  # the server goes away mid-command
            _, stderr = watch.communicate(timeout=30)
        finally:
            watch.kill()
        assert_one_line(subprocess.CompletedProcess([], watch.returncode, "", stderr),
                        "database is out of reach", "try again")
        assert_one_line(taskherd(folder, "task", "add", "--role", "coder", "u"),
                        "check that the PostgreSQL server runs")
    finally:
        stop_server(server)


def test_stop_and_reload_when_the_daemon_has_vanished(tmp_path):
    folder = workspace(tmp_path)
    assert_one_line(taskherd(folder, "stop"), "no daemon is running")
    config = load_config(folder / "taskherd.toml")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)
    lock = NodeLock(config.daemon).path
    lock.parent.mkdir(parents=True, exist_ok=True)
    # The lock held, naming a daemon that has died since: what `stop` meets when the daemon
    # dies between its look at the lock and its signal.
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import fcntl, json, os, sys\n"
                                f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
                                "fcntl.flock(fd, fcntl.LOCK_EX)\nos.ftruncate(fd, 0)\n"
                                f"os.write(fd, json.dumps({{'pid': {dead_pid}}}).encode())\n"
                                "print('held', flush=True)\nsys.stdin.read()\n")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert_one_line(taskherd(folder, "stop"), f"pid {dead_pid}", "gone", "taskherd up")
        assert_one_line(taskherd(folder, "reload"), f"pid {dead_pid}", "gone")
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
