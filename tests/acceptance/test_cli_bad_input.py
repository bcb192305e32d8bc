"""Every CLI command given bad input: exit 2, a message naming the field and value, nothing changed.

The real CLI runs as a subprocess (`python -m taskherd`) against a workspace of its own (its
taskherd.toml, database and TASKHERD_HOME in a temporary directory). Every file of the
workspace, the database and its -wal included, is hashed before and after each command and
must be byte-for-byte the same. Refusals of a well-formed request (cancel a completed task)
exit 1, and change nothing either.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store.sqlite import SQLiteStore

NOW = 1_700_000_000.0
CONFIG = """\
[daemon]
database = "taskherd.db"
durability = "full"
timezone = "UTC"

[roles.coder]
runtime = "command"
command = ["true"]

[pools]
gpu = 1
"""
FILES = {
    "bad-json-line-3.jsonl": '{"role": "coder", "title": "a"}\n{"role": "coder", "title": "b"}\n'
    '{"role": "coder", "title": \n{"role": "coder", "title": "d"}\n',
    "unknown-field.jsonl": '{"role": "coder", "title": "a"}\n'
    '{"role": "coder", "title": "b", "colour": "red"}\n',
    "bad-priority-last.jsonl": '{"role": "coder", "title": "a"}\n{"role": "coder", "title": "b"}\n'
    '{"role": "coder", "title": "c", "priority": "P7"}\n',
    "nan-run-after.jsonl": '{"role": "coder", "title": "a", "run_after": NaN}\n',
    "unknown-parent-line-2.jsonl": '{"role": "coder", "title": "a", "parent_id": 1}\n'
    '{"role": "coder", "title": "b", "parent_id": 999}\n',
    "broken.toml": "[daemon\ndatabase = 'taskherd.db'\n",
    "typo.toml": '[daemon]\ndatabase = "taskherd.db"\nmax_concurent = 4\n',
    "fast.toml": '[daemon]\ndatabase = "taskherd.db"\ndurability = "fast"\n',
    "many.toml": '[daemon]\ndatabase = "taskherd.db"\nlease = "soon"\n'
    '[roles.coder]\ncommand = ["agent"]\nretries = 3\nmodel = "opus"\n',
}
READY, COMPLETED, CANCELLED = 1, 2, 3  # task ids the workspace holds, by state
UNKNOWN = 999

# (case id, argv, exit code, strings stderr must contain — the field and the value)
CASES = [
    ("init over an existing file", ["init", "."], 2, ["taskherd.toml", "already exists"]),
    ("add without title", ["task", "add", "--role", "coder"], 2, ["TITLE"]),
    ("add with empty title", ["task", "add", "", "--role", "coder"], 2, ["title", "''"]),
    ("add with blank title", ["task", "add", "   ", "--role", "coder"], 2, ["title"]),
    ("add without role", ["task", "add", "x"], 2, ["--role"]),
    ("add with unknown role", ["task", "add", "x", "--role", "nobody"], 2, ["role", "nobody"]),
    ("add with bad priority", ["task", "add", "x", "-r", "coder", "-P", "P9"], 2,
     ["priority", "P9"]),
    ("add with unknown pool", ["task", "add", "x", "-r", "coder", "--pool", "nope"], 2,
     ["pool", "nope"]),
    ("add with negative max-attempts", ["task", "add", "x", "-r", "coder", "--max-attempts", "-1"],
     2, ["max_attempts", "-1"]),
    ("add with non-integer max-attempts",
     ["task", "add", "x", "-r", "coder", "--max-attempts", "many"], 2, ["--max-attempts", "many"]),
    ("add with bad --after", ["task", "add", "x", "-r", "coder", "--after", "soon"], 2,
     ["--after", "soon"]),
    ("add with unknown option", ["task", "add", "x", "-r", "coder", "--bogus"], 2, ["--bogus"]),
    ("list with unknown state", ["task", "list", "--state", "bogus"], 2, ["--state", "bogus"]),
    ("list with limit 0", ["task", "list", "--limit", "0"], 2, ["--limit", "0"]),
    ("import invalid JSON on line 3", ["task", "import", "bad-json-line-3.jsonl"], 2,
     ["line 3", "JSON"]),
    ("import unknown field", ["task", "import", "unknown-field.jsonl"], 2, ["line 2", "colour"]),
    ("import bad priority on the last line", ["task", "import", "bad-priority-last.jsonl"], 2,
     ["line 3", "priority", "P7"]),
    ("add with an unknown parent", ["task", "add", "x", "-r", "coder", "--parent", "999"], 2,
     ["parent_id", "999"]),
    ("import run_after NaN", ["task", "import", "nan-run-after.jsonl"], 2,
     ["line 1", "run_after", "nan"]),
    ("import an unknown parent", ["task", "import", "unknown-parent-line-2.jsonl"], 2,
     ["parent_id", "999"]),
    ("import a missing file", ["task", "import", "nowhere.jsonl"], 2, ["nowhere.jsonl"]),
    ("status with invalid TOML", ["--config", "broken.toml", "status"], 2,
     ["broken.toml", "TOML"]),
    ("status with unknown key", ["--config", "typo.toml", "status"], 2,
     ["daemon.max_concurent"]),
    ("status with bad durability", ["--config", "fast.toml", "status"], 2,
     ["daemon.durability", "fast"]),
    ("status with a missing config", ["--config", "absent.toml", "status"], 2, ["absent.toml"]),
    ("status with three config problems", ["--config", "many.toml", "status"], 2,
     ["3 problems", "daemon.lease = 'soon'", "roles.coder.retries", "did you mean 'max_attempts'",
      "roles.coder.model = 'opus'", "runtime 'command'"]),
]
for command in ["show", "log", "cancel", "approve", "reject", "block", "unblock", "requeue"]:
    CASES += [
        (f"{command} with a non-integer id", ["task", command, "abc"], 2, ["TASK_ID", "abc"]),
        (f"{command} with an unknown id", ["task", command, str(UNKNOWN)], 2, [str(UNKNOWN)]),
    ]
CASES += [
    ("log with --follow and --json", ["task", "log", str(COMPLETED), "-f", "--json"], 2,
     ["--follow", "--json"]),
    ("log with negative --lines", ["task", "log", str(COMPLETED), "-n", "-1"], 2,
     ["--lines", "-1"]),
    ("log of another task's run", ["task", "log", str(READY), "--run", "1"], 2,
     ["--run 1", f"task {COMPLETED}"]),
    ("runs log with an unknown id", ["runs", "log", str(UNKNOWN)], 2, [f"run with id {UNKNOWN}"]),
]
# Well-formed requests the queue refuses: exit 1, naming the task and the state it is in.
CASES += [
    ("log of a task that has not run", ["task", "log", str(READY)], 1,
     [f"task {READY}", "not run yet", "ready"]),
    ("log of a run that never started a process", ["task", "log", str(COMPLETED)], 1,
     ["run 1", "no log", "succeeded"]),
    ("cancel a completed task", ["task", "cancel", str(COMPLETED)], 1,
     [f"task {COMPLETED}", "completed"]),
    ("approve a ready task", ["task", "approve", str(READY)], 1, [f"task {READY}", "ready"]),
    ("unblock a ready task", ["task", "unblock", str(READY)], 1, [f"task {READY}", "ready"]),
    ("reject a cancelled task", ["task", "reject", str(CANCELLED)], 1,
     [f"task {CANCELLED}", "cancelled"]),
    ("requeue a ready task", ["task", "requeue", str(READY)], 1, [f"task {READY}", "ready"]),
    ("priority of a cancelled task", ["task", "priority", str(CANCELLED), "0"], 1,
     [f"task {CANCELLED}", "cancelled"]),
]
CASES += [
    ("priority out of range", ["task", "priority", str(READY), "7"], 2, ["PRIORITY", "7"]),
    ("priority of an unknown id", ["task", "priority", str(UNKNOWN), "1"], 2, [str(UNKNOWN)]),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config, a database with a ready, a completed and a cancelled task, and bad inputs."""
    folder = tmp_path_factory.mktemp("cli-bad-input")
    (folder / "taskherd.toml").write_text(CONFIG)
    for name, text in FILES.items():
        (folder / name).write_text(text)
    with SQLiteStore(folder / "taskherd.db") as store:
        for title in ("ready", "completed", "cancelled"):
            store.enqueue(NewTask(role="coder", title=title), NOW)
        # Claims take the lowest id first: hold task 1 aside so the claim takes task 2.
        store.block(READY, NOW, "held for the claim")
        claim = store.claim(ClaimRequest("node", NOW, 60.0))
        assert claim is not None and claim.task.id == COMPLETED
        store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), NOW)
        store.unblock(READY, NOW)
        store.cancel(CANCELLED, NOW, "not needed")
        states = {t.id: t.state.value for t in store.list_tasks()}
    assert states == {READY: "ready", COMPLETED: "completed", CANCELLED: "cancelled"}
    return folder


def snapshot(folder: Path) -> dict[str, str]:
    """A hash of every file in the workspace except -shm (a reader's shared-memory index)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if path.is_file() and not path.name.endswith("-shm")
    }


def run_cli(folder: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {
        key: value for key, value in os.environ.items() if not key.startswith("TASKHERD_")
    } | {
        "TASKHERD_HOME": str(folder / "home"),
        "TASKHERD_CONFIG": str(folder / "taskherd.toml"),
    }
    return subprocess.run(
        [sys.executable, "-m", "taskherd", *args],
        check=False, cwd=folder, env=env, capture_output=True, text=True, timeout=60,
    )


@pytest.mark.parametrize(("args", "code", "names"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_exits_with_a_named_error_and_changes_nothing(
    workspace: Path, args: list[str], code: int, names: list[str]
) -> None:
    before = snapshot(workspace)
    result = run_cli(workspace, args)
    assert result.returncode == code, (
        f"exit {result.returncode}, expected {code}\nstdout: {result.stdout}\n"
        f"stderr: {result.stderr}"
    )
    for name in names:
        assert name in result.stderr, f"stderr does not name {name!r}: {result.stderr!r}"
    assert "Traceback" not in result.stderr
    assert snapshot(workspace) == before, "the command changed the workspace"


def test_the_workspace_database_is_readable_and_unchanged_in_content(workspace: Path) -> None:
    """The good path works in the same workspace, so the refusals above were about the input."""
    result = run_cli(workspace, ["task", "list", "--json"])
    assert result.returncode == 0, result.stderr
    assert '"title": "ready"' in result.stdout and '"title": "completed"' in result.stdout


HELD_OPEN_CASES = [c for c in CASES if c[0] in {
    "add with bad priority", "import bad priority on the last line", "cancel with an unknown id",
    "cancel a completed task", "status with bad durability",
}]


# A stand-in for the daemon: holds the database open with content in its -wal, until stdin ends.
# It must be another process: the test reading the file to hash it would otherwise drop this
# process's POSIX locks on it (closing any descriptor of a file drops them all), and SQLite
# would then rightly think nobody else has the database open.
HOLDER = """
import sys
from taskherd.store.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
with store._write() as db:  # WAL content without changing any task: a table made and dropped
    db.execute("CREATE TABLE scratch (x)")
    db.execute("DROP TABLE scratch")
print("open", flush=True)
sys.stdin.read()
store.close()
"""


def test_nothing_changes_while_a_daemon_holds_the_database_open(workspace: Path) -> None:
    """With another process's connection open, the -wal file has content; it must not change."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(workspace / "taskherd.db")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        assert (workspace / "taskherd.db-wal").stat().st_size > 0
        for name, args, code, names in HELD_OPEN_CASES:
            before = snapshot(workspace)
            result = run_cli(workspace, args)
            assert result.returncode == code, (name, result.stderr)
            assert all(n in result.stderr for n in names), (name, result.stderr)
            assert snapshot(workspace) == before, f"{name}: the database or its -wal changed"
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()


def test_init_writes_a_valid_file_whatever_the_path_holds(tmp_path):
    import tomllib

    env = {**os.environ, "PATH": '/odd"dir\\with:' + os.environ["PATH"],
           "TASKHERD_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "taskherd", "init", str(tmp_path)], env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    daemon = tomllib.loads((tmp_path / "taskherd.toml").read_text())["daemon"]
    assert daemon["path"].startswith('/odd"dir\\with:')


def test_runs_list_of_a_role_or_an_unknown_job_says_so(tmp_path):
    config = tmp_path / "taskherd.toml"
    config.write_text('[daemon]\ndatabase = "q.db"\n[roles.coder]\ncommand = ["true"]\n')
    env = {**os.environ, "TASKHERD_HOME": str(tmp_path / "home")}
    for name, said in (("coder", "'coder' is a role, not a job: `taskherd runs list --role "
                                 "coder`"),
                       ("nightly", "no job named 'nightly'")):
        result = subprocess.run([sys.executable, "-m", "taskherd", "--config", str(config),
                                 "runs", "list", name], capture_output=True, text=True,
                                env=env, timeout=60)
        assert result.returncode == 2 and said in result.stderr and result.stdout == ""
