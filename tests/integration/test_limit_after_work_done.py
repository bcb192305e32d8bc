"""Work done, then a usage limit, is a success: the run keeps its summary, cost, tokens and
session, and its runtime is paused all the same (the limit is real), for no longer than
`[daemon] max_rate_limit_pause` whatever reset the text names. The supervisor, real agent
processes replaying what the CLIs print, on both stores."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, TaskState
from taskherd.policy.admission import ClaimRequest
from taskherd.services.supervisor import Supervisor
from taskherd.store import open_store
from tests.fleet import until
from tests.integration.fifo_gate import release

DATA = Path(__file__).resolve().parents[1] / "e2e" / "data"
START = 1_800_000_000.0  # 2027-01-15; every reset below is in 2030
MAX_PAUSE = 7200.0
# Claude Code 2.1.197: TASK_COMPLETE in an assistant message, a tool call, then a 429 whose
# text is a usage limit resetting at 1893456000 (2030-01-01): an api_retry, then the result.
CLAUDE = (DATA / "task_complete_then_usage_limit.jsonl").read_text()
CLAUDE_SESSION = "1c11d5de-e1f3-4438-8849-7ffbdafae2e6"
# Codex CLI 0.169 lines: the agent's final message, then a plan's usage limit days away.
CODEX = """\
{"type":"thread.started","thread_id":"01a207fd-014c-7fc1-8878-0f5f983161a5"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"Done.\\nTASK_COMPLETE: fixed the parser"}}
{"type":"error","message":"You\u2019ve hit your usage limit. Visit https://chatgpt.com/settings/usage to purchase more credits or try again at Jan 1st, 2030 12:00 AM."}
{"type":"turn.failed","error":{"message":"You\u2019ve hit your usage limit."}}
"""


def replaying(tmp_path: Path, name: str, stream: str, gate: Path | None = None,
              after: str = "") -> str:
    """An agent that prints `stream` and exits 1; with a gate, it waits there after the first
    line holding `after`, so the supervisor reads that line while the agent runs."""
    lines = stream.splitlines(keepends=True)
    cut = next(i + 1 for i, line in enumerate(lines) if after in line) if gate else len(lines)
    (tmp_path / f"{name}.head").write_text("".join(lines[:cut]))
    (tmp_path / f"{name}.rest").write_text("".join(lines[cut:]))
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\ncat {tmp_path}/{name}.head\n"
                      + (f"read go < {gate}\n" if gate else "")
                      + f"cat {tmp_path}/{name}.rest\nexit 1\n")
    script.chmod(0o755)
    return str(script)


def supervised(tmp_path: Path, database: str, role: dict):
    config = parse_config({
        "daemon": {"database": database, "data_dir": "data", "timezone": "UTC",
                   "max_rate_limit_pause": "2h"},
        "roles": {"coder": {"idle_timeout": "1h", "max_attempts": 1, **role}},
    }, base_dir=tmp_path)
    store = open_store(database, durability="normal")
    clock = [START]
    return store, clock, Supervisor(config, store, lambda: clock[0])


@pytest.mark.parametrize(("runtime", "stream", "limit_line"), [
    ("claude", CLAUDE, '"subtype":"api_retry"'),
    ("codex", CODEX, '"type":"error"'),
])
def test_a_limit_after_task_complete_pauses_the_runtime_and_the_run_succeeds(
        tmp_path, database, gate, caplog, runtime, stream, limit_line):
    binary = replaying(tmp_path, runtime, stream, gate, after=limit_line)
    store, clock, supervisor = supervised(tmp_path, database,
                                          {"runtime": runtime, "binary": binary})

    async def scenario():
        task = store.enqueue(NewTask(role="coder", title="fix the parser"), START).task
        live = supervisor.start(store.claim(ClaimRequest("n1", START, 60.0)), START)

        def limit_read() -> bool:
            clock[0] += 0.5  # the next look is due
            supervisor.check(clock[0])
            return store.cooldown_of(runtime) is not None

        # The limit is read while the agent still runs: the runtime pauses at once, but an
        # agent whose work is done is not killed for it.
        await until(limit_read)
        assert live.kill_reason is None and live.handle.is_alive()
        release(gate)
        await until(lambda: store.get_run(live.run.id).ended_at)
        return store.get_run(live.run.id), store.get_task(task.id)

    try:
        with caplog.at_level(logging.WARNING, logger="taskherd.supervisor"):
            run, task = asyncio.run(scenario())
        cooldown = store.cooldown_of(runtime)
    finally:
        store.close()
    assert (run.outcome, task.state) == (Outcome.SUCCEEDED, TaskState.COMPLETED)
    assert task.summary == "fixed the parser" and task.attempts == 0
    if runtime == "claude":  # Codex prices its tokens at a turn's end, and none completed
        assert (run.cost_usd, run.input_tokens, run.output_tokens, run.turns) == (
            0.0015, 150, 30, 2)
        assert run.session_id == CLAUDE_SESSION
    # The reset the text named (2030) is capped, and the daemon's log says so.
    assert cooldown.until == cooldown.created_at + MAX_PAUSE
    assert "usage limit" in cooldown.reason
    assert "max_rate_limit_pause (7200s)" in caplog.text


def test_a_command_agents_limit_after_task_complete_pauses_the_runtime(tmp_path, database,
                                                                       caplog):
    stream = "TASK_COMPLETE: wrote the docs\nClaude AI usage limit reached|1893456000\n"
    command = replaying(tmp_path, "agent", stream)
    store, _, supervisor = supervised(tmp_path, database, {"command": [command]})

    async def scenario():
        task = store.enqueue(NewTask(role="coder", title="docs"), START).task
        live = supervisor.start(store.claim(ClaimRequest("n1", START, 60.0)), START)
        await until(lambda: store.get_run(live.run.id).ended_at)
        return store.get_run(live.run.id), store.get_task(task.id)

    try:
        with caplog.at_level(logging.WARNING, logger="taskherd.supervisor"):
            run, task = asyncio.run(scenario())
        cooldown = store.cooldown_of("command")
    finally:
        store.close()
    assert (run.outcome, run.exit_code, task.state) == (Outcome.SUCCEEDED, 1,
                                                        TaskState.COMPLETED)
    assert task.summary == "wrote the docs"
    assert cooldown is not None and cooldown.until == START + MAX_PAUSE
    assert "max_rate_limit_pause (7200s)" in caplog.text
