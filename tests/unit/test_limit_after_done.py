"""What each runtime's reader tells the supervisor when the agent's work is done and a limit
comes after: the limit (so the runtime pauses), that the work is done (so the run is not
ended for it), and at the end the limit the run met, with the reset its text named."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.host.procs import ExitStatus
from taskherd.model import Outcome, Run
from taskherd.model.settings import ConfigError, RoleConfig
from taskherd.runtimes.claude import ClaudeRuntime
from taskherd.runtimes.codex import CodexRuntime
from taskherd.runtimes.command import CommandRuntime

DATA = Path(__file__).resolve().parents[1] / "e2e" / "data"
NOW = 1_800_000_000.0
RESET_2030 = datetime(2030, 1, 1, tzinfo=UTC)
CODEX_DONE_THEN_LIMITED = (
    '{"type":"thread.started","thread_id":"01a207fd-014c-7fc1-8878-0f5f983161a5"}\n'
    '{"type":"item.completed","item":{"id":"i1","type":"agent_message",'
    '"text":"TASK_COMPLETE: fixed the parser"}}\n'
    '{"type":"error","message":"You\u2019ve hit your usage limit. Visit https://chatgpt.com/'
    'settings/usage to purchase more credits or try again at Jan 1st, 2030 12:00 AM."}\n'
    '{"type":"turn.failed","error":{"message":"You\u2019ve hit your usage limit."}}\n')


def a_run() -> Run:
    fields = dict.fromkeys(Run.__dataclass_fields__)
    fields.update(id=1, task_id=1, attempt=1, node="n", role="coder", claimed_at=NOW)
    return Run(**fields)


def test_claude_the_api_retry_after_task_complete_pauses_but_the_work_is_done():
    role = RoleConfig(name="coder", runtime="claude", timezone="UTC")
    runtime = ClaudeRuntime()
    reader = runtime.reader(role)
    lines = (DATA / "task_complete_then_usage_limit.jsonl").read_bytes().splitlines(True)
    retry = next(i for i, line in enumerate(lines) if b'"api_retry"' in line)
    signal = reader.feed(b"".join(lines[:retry + 1]), NOW)
    assert signal is not None and signal.source == "api_retry_429"  # the runtime pauses
    assert reader.summary == "fixed the parser"  # and the supervisor leaves the run be
    assert reader.feed(b"".join(lines[retry + 1:]), NOW) is None  # told once
    reader.finish(NOW)
    # At its end the run met the result's limit, which names its reset.
    assert reader.limit_met(ExitStatus(code=1), NOW).reset_at == RESET_2030
    result = runtime.result(role, reader, ExitStatus(code=1), a_run(), NOW)
    assert (result.outcome, result.summary, result.cost_usd) == (
        Outcome.SUCCEEDED, "fixed the parser", 0.0015)


def test_claude_a_successful_result_met_no_limit():
    role = RoleConfig(name="coder", runtime="claude")
    reader = ClaudeRuntime().reader(role)
    reader.feed((DATA / "tool_use_then_complete.jsonl").read_bytes(), NOW)
    reader.finish(NOW)
    assert reader.limit_met(ExitStatus(code=0), NOW) is None


def test_codex_a_usage_limit_after_task_complete_pauses_and_the_work_is_done():
    role = RoleConfig(name="coder", runtime="codex", timezone="UTC")
    runtime = CodexRuntime()
    reader = runtime.reader(role)
    signal = reader.feed(CODEX_DONE_THEN_LIMITED.encode(), NOW)
    assert signal is not None and signal.reset_at == RESET_2030
    assert reader.summary == "fixed the parser"
    assert reader.limit_met(ExitStatus(code=1), NOW) is signal
    result = runtime.result(role, reader, ExitStatus(code=1), a_run(), NOW)
    assert (result.outcome, result.summary) == (Outcome.SUCCEEDED, "fixed the parser")


@pytest.mark.parametrize(("code", "limited"), [(1, True), (0, False)])
def test_command_a_limit_text_after_task_complete_is_met_on_a_failing_exit(code, limited):
    role = RoleConfig(name="coder", command=("agent",), timezone="UTC")
    runtime = CommandRuntime()
    reader = runtime.reader(role)
    reader.feed(b"TASK_COMPLETE: wrote the docs\nClaude AI usage limit reached|1893456000\n",
                NOW)
    reader.finish(NOW)
    met = reader.limit_met(ExitStatus(code=code), NOW)
    assert (met is not None and met.reset_at == RESET_2030) is limited
    result = runtime.result(role, reader, ExitStatus(code=code), a_run(), NOW)
    assert (result.outcome, result.summary) == (Outcome.SUCCEEDED, "wrote the docs")


def test_max_rate_limit_pause_is_six_hours_unless_set_and_must_be_a_duration(tmp_path):
    assert parse_config({}, base_dir=tmp_path).daemon.max_rate_limit_pause == 6 * 3600
    daemon = parse_config({"daemon": {"max_rate_limit_pause": "7d"}}, base_dir=tmp_path).daemon
    assert daemon.max_rate_limit_pause == 7 * 86400
    for bad in ("0s", "soon", -1):
        with pytest.raises(ConfigError, match=f"daemon.max_rate_limit_pause = {bad!r}"):
            parse_config({"daemon": {"max_rate_limit_pause": bad}}, base_dir=tmp_path)
