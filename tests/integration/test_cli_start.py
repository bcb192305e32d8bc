"""What the commands an agent or a script calls many times import: only what they use.

An agent's command talks to its door, never to the database: it must not load the store, the
settings or the daemon's machinery (asyncio, psutil) to send one line over a socket. Each
command runs as a real process; what it loaded is read from that process at its exit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Run the CLI as `taskherd` does, then name (on stderr) the modules of WATCHED it loaded, and
# the records (taskherd/model/record.py) it made into dataclasses.
PROBE = """
import atexit, json, sys
WATCHED = json.loads(sys.argv.pop(1))

def made():
    from taskherd.model.record import Record
    found, stack = [], list(Record.__subclasses__())
    while stack:
        record = stack.pop()
        stack.extend(record.__subclasses__())
        if "__dataclass_fields__" in record.__dict__:
            found.append(record.__module__ + "." + record.__qualname__)
    return sorted(found)

atexit.register(lambda: print(json.dumps(sorted(m for m in WATCHED if m in sys.modules)),
                              json.dumps(made() if "taskherd.model" in sys.modules else []),
                              sep="\\n", file=sys.stderr))
from taskherd.cli import main
sys.argv[0] = "taskherd"
main()
"""
DAEMON_SIDE = ["taskherd.store", "taskherd.ops", "asyncio", "psutil", "taskherd.host.procs"]


def probe(argv: list[str], watched: list[str], env: dict[str, str]) -> tuple[list[str], list[str]]:
    """The modules of `watched` the command loaded, and every record it made."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(watched), *argv],
                          capture_output=True, text=True, env=env, timeout=60)
    modules, records = done.stderr.strip().splitlines()[-2:]
    return json.loads(modules), json.loads(records)


def loaded(argv: list[str], watched: list[str], env: dict[str, str]) -> list[str]:
    return probe(argv, watched, env)[0]


@pytest.fixture
def agent_env(tmp_path: Path) -> dict[str, str]:
    """Inside a run whose daemon is away: the command fails at once, having loaded all it
    would load to succeed."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHERD_")}
    return env | {"TASKHERD_HOME": str(tmp_path), "TASKHERD_RUN_TOKEN": "t",
                  "TASKHERD_REPORT_WAIT": "0"}


@pytest.mark.parametrize("argv", [["heartbeat", "--progress", "half"], ["done", "-s", "ok"]])
def test_an_agent_report_loads_neither_records_nor_store(argv, agent_env) -> None:
    watched = [*DAEMON_SIDE, "taskherd.model", "taskherd.config"]
    assert loaded(argv, watched, agent_env) == []


def test_an_agent_message_loads_no_store(agent_env) -> None:
    assert loaded(["msg", "send", "qa", "hello"], DAEMON_SIDE, agent_env) == []


@pytest.fixture
def person_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A person's shell with a config file naming its database and data dir. The data dir's
    path is short, as a real one is (~/.local/share/taskherd): the sockets in it then fit a
    socket address as they are, where a test's deep temporary path (longer still under
    pytest-xdist) would have the store hash it into a short one."""
    data = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))
    config = tmp_path / "taskherd.toml"
    config.write_text(f'[daemon]\ndatabase = "{data}/q.db"\n'
                      f'data_dir = "{data}/data"\n\n'
                      '[roles.coder]\nruntime = "command"\ncommand = ["true"]\n')
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHERD_")}
    yield env | {"TASKHERD_CONFIG": str(config)}
    shutil.rmtree(data, ignore_errors=True)


# What a command that opens the queue without claiming, logging or checking a token has no
# use for: the claim's rules (admission, limits, budgets), the token machinery, the prompt
# builder, and the standard library's logging, hashing, temp files, zones and platform folders.
DAEMON_ONLY = ["asyncio", "psutil", "taskherd.policy.admission", "taskherd.policy.limits",
               "taskherd.policy.budgets", "taskherd.ops.tokens", "taskherd.policy.prompt",
               "logging", "hashlib", "tempfile", "secrets", "zoneinfo", "platformdirs"]


# The records every command that opens the queue makes: the settings of the tables its file
# has (a table it leaves out, [api] or [monitor] here, only when read) and the store's
# workflow; a migration only when one is to be applied. A record is made at its first use
# (model/record.py), ~0.5 ms each: the run's, job's, message's, node's and the claim's
# records are none of these commands'.
SETTINGS = [f"taskherd.model.settings.{name}" for name in (
    "Budgets", "Config", "DaemonConfig", "Limits", "RoleConfig")]
OPENING = [*SETTINGS, "taskherd.ops.Queue", "taskherd.policy.chains.RoleFlow",
           "taskherd.policy.chains.Workflow"]


def test_task_add_loads_only_what_adding_uses(person_env) -> None:
    # Nor what reads and renders an agent's log (`task log`, the same command group).
    watched = [*DAEMON_ONLY, "taskherd.cli.logs", "taskherd.runtimes.claude_render"]
    assert loaded(["task", "add", "-r", "coder", "first"], [], person_env) == []  # the schema
    modules, records = probe(["task", "add", "-r", "coder", "a title"], watched, person_env)
    assert modules == []
    assert records == sorted([*OPENING, "taskherd.model.NewTask", "taskherd.model.Task",
                              "taskherd.store.base.Enqueued"])


def test_status_loads_only_what_the_board_uses(person_env) -> None:
    # Why a task waits is read only for a P0 task waiting (none here), a log only by --watch
    # (and the terminal's width with shutil, which loads zlib, bz2 and lzma); the backup
    # service's state only when the config names a target.
    watched = [*DAEMON_ONLY, "taskherd.policy.waits", "taskherd.runtimes.claude_render",
               "shutil", "taskherd.backups.state"]
    assert loaded(["task", "add", "-r", "coder", "a title"], [], person_env) == []  # P2
    modules, records = probe(["status"], watched, person_env)
    assert modules == []
    # The board says where backups stand: [backup]'s defaults (no target) are read.
    assert records == sorted([*OPENING, "taskherd.model.settings.BackupConfig",
                              "taskherd.store.base.StateCount"])


def test_status_says_why_a_p0_task_waits(person_env) -> None:
    """The board still tells why a P0 task waits: the rule is loaded when one does."""
    def taskherd(*argv: str) -> str:
        done = subprocess.run([sys.executable, "-m", "taskherd", *argv], capture_output=True,
                              text=True, env=person_env, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    taskherd("task", "add", "-r", "coder", "-P", "P0", "urgent")
    assert "P0 task 1 (coder) waits: no node that is up runs role coder" in taskherd("status")
