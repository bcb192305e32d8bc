"""`python -m taskherd.demo` (`make demo`): the real daemon running a small fleet, in under 2 min.

It writes a config into a fresh temporary data dir, starts `taskherd up` as a child process,
queues ten tasks for bundled agents (steady workers, one that fails twice then succeeds, one
that dies, one that hangs silently, one that asks for a human), draws the queue live, then
stops the daemon and prints what happened to every task. No network, no keys.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from string import Template
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from taskherd.config import load_config
from taskherd.daemon import NodeLock
from taskherd.host import procs
from taskherd.host.service import taskherd_argv
from taskherd.model import FINAL_STATES, TaskState
from taskherd.model.settings import DEFAULT_PATH, Config
from taskherd.ops import Queue
from taskherd.ops.tasks import add_task
from taskherd.ops.views import (
    HISTORY_HEADERS,
    Screen,
    board_lines,
    history_rows,
    print_table,
    read_board,
)
from taskherd.policy.walltime import local_timezone
from taskherd.store import Store, open_store

HERE = Path(__file__).resolve().parent
DEADLINE = 90.0  # seconds to settle; with start and stop the demo stays under 2 minutes
SETTLED = FINAL_STATES | {TaskState.BLOCKED}  # nothing more happens without a person
REFRESH = 0.5  # seconds between two redraws

# (role, title, priority, prompt): P0 first, FIFO within a priority.
TASKS = [
    ("writer", "Fix the login redirect loop", "P0", "Find and fix it in 6 steps."),
    ("staller", "Fetch the toolchain licence", "P0", "Install the toolchain."),
    ("flaky", "Sync the product catalogue", "P1", "Pull the catalogue from upstream."),
    ("writer", "Write release notes for 0.1", "P1", "Summarise the changes in 4 steps."),
    ("ops", "Deploy the database migration", "P1", "Apply migration 0042 in production."),
    ("crasher", "Import the 64 GiB archive", "P2", "Load the archive into the warehouse."),
    ("writer", "Refactor the config loader", "P2", "Split it up in 5 steps."),
    ("writer", "Add tests for the scheduler", "P2", "Cover DST in 3 steps."),
    ("writer", "Translate the error messages", "P3", "French and German, 4 steps."),
    ("writer", "Update the README quick start", "P3", "Three commands, 3 steps."),
]


def main() -> int:
    # A SIGTERM or SIGHUP (a closed terminal, a test's timeout) must still stop the daemon:
    # its own session means nobody else will.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    started = time.monotonic()
    deadline = started + DEADLINE
    data_dir = Path(tempfile.mkdtemp(prefix="taskherd-demo-"))
    config_path = write_config(data_dir)
    config = load_config(config_path)
    print(f"taskherd demo: data dir {data_dir}")
    store = open_store(config.daemon.database)  # migrates before the daemon can race us to it
    daemon = start_daemon(config_path, data_dir)
    settled = False
    try:
        wait_for_daemon(config, daemon, deadline)
        add_tasks(config, store)
        settled = watch(store, daemon, started, deadline)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping the daemon")
    finally:
        stop_daemon(config_path, daemon, store)
    print_summary(store, started)
    store.close()
    print(f"\ndata dir: {data_dir} (daemon.log, logs/run-*.log, taskherd.db)")
    taskherd = " ".join(taskherd_argv())
    print(f"look around: {taskherd} --config {config_path} task show 3")
    if not settled:
        print(f"the demo did not settle: see {data_dir / 'daemon.log'}", file=sys.stderr)
    return 0 if settled else 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def write_config(data_dir: Path) -> Path:
    """Fill the bundled template with this interpreter, these agents and this data dir."""
    work = data_dir / "work"
    work.mkdir()
    values = {
        "python": sys.executable,
        "work": str(work),
        "timezone": _timezone(),
        "path": os.pathsep.join([os.path.dirname(sys.executable), DEFAULT_PATH]),
        **{f"agent_{name}": str(HERE / "agents" / f"{name}.py")
           for name in ("steady", "flaky", "crasher", "staller", "blocker")},
    }
    # json.dumps gives a quoted, escaped string TOML reads as the same string.
    text = Template((HERE / "taskherd.toml").read_text()).substitute(
        {key: json.dumps(value) for key, value in values.items()})
    path = data_dir / "taskherd.toml"
    path.write_text(text)
    return path


def _timezone() -> str:
    zone = local_timezone()
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return "UTC"
    return zone


def start_daemon(config_path: Path, data_dir: Path) -> subprocess.Popen:
    # Its own session: a Ctrl-C in the terminal reaches the demo, which then stops it properly.
    with open(data_dir / "daemon.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "taskherd", "--config", str(config_path), "up"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for_daemon(config: Config, daemon: subprocess.Popen, deadline: float) -> None:
    lock = NodeLock(config.daemon)
    limit = min(deadline, time.monotonic() + 20)
    while lock.holder_pid() != daemon.pid:
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited at start (code {daemon.returncode}): "
                             f"{_log_tail(config.daemon.data_dir / 'daemon.log')}")
        if time.monotonic() > limit:
            raise SystemExit("the daemon did not start within 20s")
        time.sleep(0.05)
    print(f"daemon up: pid {daemon.pid}")


def add_tasks(config: Config, store: Store) -> None:
    queue = Queue(config, store)
    for role, title, priority, prompt in TASKS:
        add_task(queue, {"role": role, "title": title, "priority": priority, "prompt": prompt},
                 time.time())
    print(f"queued {len(TASKS)} tasks\n")


def watch(store: Store, daemon: subprocess.Popen, started: float, deadline: float) -> bool:
    """Draw the board until every task has settled; False on deadline or a dead daemon."""
    screen = Screen(sys.stdout.isatty())
    while True:
        board = read_board(store)
        settled = board.total > 0 and sum(
            count for state, count in board.by_state.items() if TaskState(state) in SETTLED
        ) == board.total
        screen.draw(time.monotonic() - started, board_lines(board), final=settled)
        if settled:
            return True
        if daemon.poll() is not None:
            print(f"the daemon exited unexpectedly (code {daemon.returncode})", file=sys.stderr)
            return False
        if time.monotonic() > deadline:
            print(f"deadline of {DEADLINE:g}s reached", file=sys.stderr)
            return False
        time.sleep(REFRESH)


def stop_daemon(config_path: Path, daemon: subprocess.Popen, store: Store) -> None:
    """`taskherd stop`; if that fails, kill the daemon and every agent it left. Never hangs."""
    if daemon.poll() is None:
        try:
            subprocess.run([sys.executable, "-m", "taskherd", "--config", str(config_path),
                            "stop", "--timeout", "15"], timeout=20, check=False)
        except subprocess.TimeoutExpired:
            pass
    try:
        daemon.wait(timeout=5)
        return
    except subprocess.TimeoutExpired:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=5)
    for run in store.open_runs():  # agents live in their own sessions: kill each group
        if run.pid and run.log_path:
            handle = procs.adopt(run.pid, run.pid_started_at or 0.0, Path(run.log_path))
            if handle is not None:
                procs.terminate(handle, 1.0)


def print_summary(store: Store, started: float) -> None:
    tasks = sorted(store.list_tasks(limit=len(TASKS) * 2), key=lambda task: task.id)
    print(f"\nwhat happened ({time.monotonic() - started:.0f}s):\n")
    print_table(HISTORY_HEADERS, history_rows(store, tasks))


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


if __name__ == "__main__":
    sys.exit(main())
