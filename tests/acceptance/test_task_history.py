"""`task list --history`: finished tasks newest first, with when they finished and how
(their summary, else their last error), within `--since`; bad combinations exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import open_store

CONFIG = '[daemon]\ndatabase = "q.db"\n\n[roles.coder]\ncommand = ["true"]\nmax_attempts = 1\n'


def cli(folder, *args, code=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    env |= {"TASKHERD_HOME": str(folder / "home"), "TASKHERD_CONFIG": str(folder / "taskherd.toml")}
    result = subprocess.run([sys.executable, "-m", "taskherd", *args], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == code, result.stderr
    return result


def finish(store, title, outcome, when, **result):
    store.enqueue(NewTask(role="coder", title=title, max_attempts=1), when)
    claim = store.claim(ClaimRequest("n1", when, 60.0))
    store.mark_spawned(claim.run.id, when, 60.0, pid=1, pid_started_at=1.0, log_path=None)
    store.finish_run(claim.run.id, RunResult(outcome, **result), RetryPolicy(), when + 1)


def test_history_is_newest_first_with_summary_or_error_and_since(tmp_path):
    (tmp_path / "taskherd.toml").write_text(CONFIG)
    now = time.time()
    store = open_store(str(tmp_path / "q.db"))
    try:
        finish(store, "old report", Outcome.SUCCEEDED, now - 3 * 86400, summary="sent it")
        finish(store, "broken build", Outcome.FAILED, now - 7200, error="exit 3")
        finish(store, "fresh report", Outcome.SUCCEEDED, now - 60, summary="all good")
        store.enqueue(NewTask(role="coder", title="still open"), now)
    finally:
        store.close()
    rows = json.loads(cli(tmp_path, "task", "list", "--history", "--json").stdout)
    assert [row["title"] for row in rows] == ["fresh report", "broken build", "old report"]
    recent = json.loads(cli(tmp_path, "task", "list", "--history", "--since", "1d",
                            "--json").stdout)
    assert [row["title"] for row in recent] == ["fresh report", "broken build"]
    table = cli(tmp_path, "task", "list", "--history").stdout.splitlines()
    assert "finished" in table[0] and "summary / last error" in table[0]
    assert "all good" in table[2] and "exit 3" in table[3]
    assert "--history" in cli(tmp_path, "task", "list", "--since", "1d", code=2).stderr
    assert "--since" in cli(tmp_path, "task", "list", "--history", "--since", "soon",
                            code=2).stderr
