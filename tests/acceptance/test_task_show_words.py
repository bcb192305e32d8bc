"""`task show` and `task list` say what happened in words that match it: runs and strikes are
counted apart (a rate limit is a run, not a strike), and a running agent's progress note
(`taskherd heartbeat --progress`) is shown."""

from __future__ import annotations

import os
import subprocess
import sys

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import open_store

CONFIG = '[daemon]\ndatabase = "q.db"\n\n[roles.coder]\ncommand = ["true"]\n'


def cli(folder, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    env |= {"TASKHERD_HOME": str(folder / "home"), "TASKHERD_CONFIG": str(folder / "taskherd.toml")}
    result = subprocess.run([sys.executable, "-m", "taskherd", *args], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_runs_and_strikes_are_counted_apart_and_progress_is_shown(tmp_path):
    (tmp_path / "taskherd.toml").write_text(CONFIG)
    store = open_store(str(tmp_path / "q.db"))
    try:
        task = store.enqueue(NewTask(role="coder", title="fix it"), 1000.0).task
        first = store.claim(ClaimRequest("n1", 1000.0, 60.0))
        store.mark_spawned(first.run.id, 1000.0, 60.0, pid=1, pid_started_at=1.0, log_path="l")
        store.finish_run(first.run.id, RunResult(Outcome.RATE_LIMITED), RetryPolicy(), 1001.0)
        second = store.claim(ClaimRequest("n1", 1002.0, 60.0))
        store.mark_spawned(second.run.id, 1002.0, 60.0, pid=2, pid_started_at=1.0, log_path="l")
        store.heartbeat(second.run.id, 1003.0, 60.0, progress="3 of 5 tests fixed")
    finally:
        store.close()
    shown = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
             for line in cli(tmp_path, "task", "show", str(task.id)).splitlines()
             if ":" in line and not line.startswith(" " * 12)}
    assert shown["runs"] == "2"
    assert shown["strikes"] == "0 of 3"
    assert shown["progress"] == "3 of 5 tests fixed"
    assert "attempts" not in shown
    listed = cli(tmp_path, "task", "list").splitlines()
    assert "strikes" in listed[0] and "tries" not in listed[0]
    assert "0 of 3" in listed[2]
