"""`python -m taskherd.demo.workflow` (the second half of `make demo`): a queue that runs
itself, in about 30 s. The queue starts empty; the daemon's planner adds a planner task; the
planner agent adds three coder tasks; each coder task passes a compile gate (one fails it
once and is retried with the gate's output in its prompt), then a QA review (one is rejected
once and sent back with the reason), then its chain adds a docs task. It ends with the tree.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from string import Template

from taskherd.cli.tasks import tree_lines
from taskherd.config import load_config
from taskherd.demo.__main__ import (
    _interrupt,
    _timezone,
    start_daemon,
    stop_daemon,
    wait_for_daemon,
)
from taskherd.model import FINAL_STATES, TaskState
from taskherd.model.settings import DEFAULT_PATH
from taskherd.ops import Queue
from taskherd.ops.tasks import tree
from taskherd.policy.chains import workflow_of
from taskherd.store import Store, open_store

HERE = Path(__file__).resolve().parent
DEADLINE = 90.0
EXPECTED = 1 + 3 + 3 + 3  # the planner, its coder tasks, their docs tasks (+ reviews)


def main() -> int:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    started = time.monotonic()
    data_dir = Path(tempfile.mkdtemp(prefix="taskherd-workflow-demo-"))
    config_path = write_config(data_dir)
    config = load_config(config_path)
    print(f"taskherd workflow demo: data dir {data_dir}")
    store = open_store(config.daemon.database, workflow=workflow_of(config))
    daemon = start_daemon(config_path, data_dir)
    settled = False
    try:
        wait_for_daemon(config, daemon, started + DEADLINE)
        print("the queue is empty: the planner is due\n")
        settled = follow(store, daemon, started + DEADLINE)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping the daemon")
    finally:
        stop_daemon(config_path, daemon, store)
    planners = store.list_tasks(role="planner")
    if planners:
        print(f"\nthe chain ({time.monotonic() - started:.0f}s), from the planner's task:\n")
        for line in tree_lines(tree(Queue(config, store), planners[0].id)):
            print(f"  {line}")
    store.close()
    print(f"\ndata dir: {data_dir} (daemon.log, logs/run-*.log and run-*.gate-*.log)")
    if not settled:
        print(f"the demo did not settle: see {data_dir / 'daemon.log'}", file=sys.stderr)
    return 0 if settled else 1


def write_config(data_dir: Path) -> Path:
    work = data_dir / "work"
    work.mkdir()
    agents = HERE / "workflow_agents"
    values = {
        "python": sys.executable, "work": str(work), "timezone": _timezone(),
        "path": f"{Path(sys.executable).parent}:{DEFAULT_PATH}",
        **{f"agent_{name}": str(agents / f"{name}.py")
           for name in ("planner", "coder", "reviewer")},
    }
    text = Template((HERE / "workflow.toml").read_text()).substitute(
        {key: json.dumps(value) for key, value in values.items()})
    path = data_dir / "taskherd.toml"
    path.write_text(text)
    return path


def follow(store: Store, daemon: subprocess.Popen, deadline: float) -> bool:
    """Print each task as it settles until the chain is done; False on the deadline."""
    told: dict[int, str] = {}
    while time.monotonic() < deadline:
        tasks = store.list_tasks(limit=200)
        for task in sorted(tasks, key=lambda t: t.id):
            note = _moment(task)
            if note and told.get(task.id) != note:
                told[task.id] = note
                print(f"  task {task.id:>2} {task.role:<8} {note:<13} {task.title}")
        done = [t for t in tasks if t.state in FINAL_STATES]
        if len(tasks) >= EXPECTED and len(done) == len(tasks):
            return True
        if daemon.poll() is not None:
            print("the daemon exited unexpectedly", file=sys.stderr)
            return False
        time.sleep(0.2)
    print(f"deadline of {DEADLINE:g}s reached", file=sys.stderr)
    return False


def _moment(task) -> str | None:
    if task.state is TaskState.READY and task.attempts:
        return "gate failed"
    if task.state is TaskState.READY and task.rejections:
        return "rejected"
    if task.state in (TaskState.NEEDS_REVIEW, TaskState.COMPLETED, TaskState.DEAD,
                      TaskState.CANCELLED, TaskState.BLOCKED):
        return task.state.value
    return None


if __name__ == "__main__":
    sys.exit(main())
