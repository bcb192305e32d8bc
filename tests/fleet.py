"""A real daemon for tests: a temp data dir, a config, `taskherd up` as a subprocess.

Tests wait on conditions in the database with a deadline; nothing sleeps for time to pass.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taskherd.config import load_config
from taskherd.model import FINAL_STATES, Task
from taskherd.policy.taskspec import new_task_from
from taskherd.store import open_store

PYTHON = sys.executable


def cli_env(config_path: Path, home: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHERD_")}
    env["TASKHERD_CONFIG"] = str(config_path)
    env["TASKHERD_HOME"] = str(home)
    return env


class Fleet:
    """One node: config file, database, and the daemon process (started on demand)."""

    def __init__(self, root: Path, config: str):
        self.root = root
        self.config_path = root / "taskherd.toml"
        self.config_path.write_text(textwrap.dedent(config))
        self.data_dir = root / "data"
        self.env = cli_env(self.config_path, self.data_dir)
        # The database the config names: a file of `root`, or a PostgreSQL URL.
        self.store = open_store(load_config(self.config_path).daemon.database,
                                durability="normal")
        self.daemon: subprocess.Popen | None = None
        self.daemon_log = root / "daemon.log"

    def up(self) -> subprocess.Popen:
        log_file = open(self.daemon_log, "ab")
        self.daemon = subprocess.Popen(
            [PYTHON, "-m", "taskherd", "up", "--log-level", "debug"],
            env=self.env, cwd=self.root, stdout=log_file, stderr=log_file,
        )
        log_file.close()
        return self.daemon

    def cli(self, *args: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess:
        kwargs.setdefault("env", self.env)
        result = subprocess.run([PYTHON, "-m", "taskherd", *args], cwd=self.root,
                                capture_output=True, text=True, timeout=60, **kwargs)
        if check and result.returncode != 0:
            raise AssertionError(
                f"taskherd {' '.join(args)} → {result.returncode}: {result.stderr}")
        return result

    def add(self, title: str, role: str = "worker", prompt: str = "", **fields: Any) -> Task:
        config = load_config(self.config_path)  # role defaults, as `taskherd task add` applies
        new = new_task_from({"role": role, "title": title, "prompt": prompt, **fields}, config)
        task = self.store.enqueue(new, time.time()).task
        return task

    def wait_until(self, condition: Callable[[], Any], timeout: float = 20.0,
                   what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            if self.daemon is not None and self.daemon.poll() is not None:
                raise AssertionError(f"daemon exited ({self.daemon.returncode}) waiting for "
                                     f"{what}:\n{self.daemon_log.read_text()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n"
                             f"{self.daemon_log.read_text()[-3000:]}")

    def wait_final(self, task_id: int, timeout: float = 20.0) -> Task:
        return self.wait_until(
            lambda: (t := self.store.get_task(task_id)).state in FINAL_STATES and t,
            timeout, f"task {task_id} to finish")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.daemon is None:
            return 0
        if self.daemon.poll() is None:
            self.daemon.send_signal(sig)
        code = self.daemon.wait(timeout)
        self.daemon = None
        return code

    def close(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.kill()
            self.daemon.wait(10)
        self.store.close()


def kill_machine(daemon: subprocess.Popen) -> float:
    """What a power loss does to a node: the daemon and every process it started (its fork
    server, shims, agents, their children) end at once, by SIGKILL. When.

    The tree is frozen first, again and again until no unfrozen member is left: a frozen
    process forks nothing, so no agent a shim forks while the others are being killed
    survives as an orphan of init (which no power loss would leave running)."""
    import psutil

    root = psutil.Process(daemon.pid)
    frozen: dict[int, psutil.Process] = {}
    while True:
        try:
            members = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            members = []
        new = [process for process in members if process.pid not in frozen]
        if not new:
            break
        for process in new:
            try:
                process.suspend()
            except psutil.NoSuchProcess:
                continue
            frozen[process.pid] = process
    for process in frozen.values():
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    killed_at = time.time()
    psutil.wait_procs(list(frozen.values()), timeout=10)
    daemon.wait(10)
    return killed_at


def agent(root: Path, name: str, body: str) -> str:
    """Write a small Python agent program and return its path."""
    path = root / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


async def until(condition: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Inside an event loop: wait for `condition` to hold (bounded by `timeout`), letting the
    loop run the daemon's services meanwhile; its value."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
    return value


def read_until(process: subprocess.Popen, wanted: str, timeout: float = 20.0) -> str:
    """What `process` printed until `wanted` appeared in it (bounded by `timeout`)."""
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while wanted.encode() not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise AssertionError(f"no {wanted!r} within {timeout}s; printed {seen!r}")
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"exited before printing {wanted!r}; printed {seen!r}")
            seen += chunk
    return seen.decode()
