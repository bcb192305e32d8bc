"""A session id read from an agent's output is kept only in the form the CLIs write (a UUID),
and goes back into a command line as one item that no CLI reads as an option."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest

from taskherd.host.procs import ExitStatus
from taskherd.model import Run
from taskherd.model.settings import RoleConfig
from taskherd.runtimes.base import Launch
from taskherd.runtimes.claude import ClaudeRuntime
from taskherd.runtimes.claude_stream import ClaudeStreamReader
from taskherd.runtimes.codex import CodexRuntime
from taskherd.runtimes.codex_stream import CodexStreamReader
from taskherd.runtimes.sessions import valid_session_id

NOW = 1_800_000_000.0
NOW_UTC = datetime.fromtimestamp(NOW, UTC)
CLAUDE_ID = "748f6d6d-1011-44bc-8f20-b2a056f07221"  # tests/e2e/data: Claude Code's ids
CODEX_ID = "01a207fd-014c-7fc1-8878-0f5f983161a5"  # Codex's thread ids (UUIDv7)
HOSTILE = "--mcp-config=/tmp/x.json"


def lines(*events: dict) -> bytes:
    return "".join(json.dumps(event) + "\n" for event in events).encode()


def a_run() -> Run:
    fields = dict.fromkeys(Run.__dataclass_fields__)
    fields.update(id=7, task_id=1, attempt=1, node="n", role="coder", claimed_at=NOW)
    return Run(**fields)


@pytest.mark.parametrize("value", [CLAUDE_ID, CODEX_ID, CLAUDE_ID.upper()])
def test_the_ids_the_clis_write_are_session_ids(value):
    assert valid_session_id(value) == value


@pytest.mark.parametrize("value", [HOSTILE, "-r", "", f"{CLAUDE_ID}\n", f" {CLAUDE_ID}",
                                   f"{CLAUDE_ID} --mcp-config=x", "s-1", 42, None, [CLAUDE_ID]])
def test_anything_else_is_none(value):
    assert valid_session_id(value) is None


def test_the_claude_reader_drops_a_hostile_session_id_and_keeps_the_clis():
    reader = ClaudeStreamReader()
    reader.feed(lines({"type": "system", "subtype": "init", "session_id": HOSTILE}))
    assert (reader.session_id, reader.ignored_session_id) == (None, HOSTILE)
    reader = ClaudeStreamReader()
    # The CLI's own id first; a line the agent forged later does not replace it.
    reader.feed(lines({"type": "system", "subtype": "init", "session_id": CLAUDE_ID},
                      {"type": "result", "subtype": "success", "is_error": True,
                       "result": "boom", "session_id": HOSTILE}))
    assert reader.session_id == CLAUDE_ID and reader.result.session_id is None


def test_a_claude_run_records_no_hostile_session_and_the_log_says_so(caplog):
    role = RoleConfig(name="coder", runtime="claude")
    runtime = ClaudeRuntime()
    reader = runtime.reader(role)
    reader.feed(lines({"type": "system", "subtype": "init", "session_id": HOSTILE},
                      {"type": "result", "subtype": "success", "is_error": True,
                       "result": "boom", "session_id": HOSTILE, "total_cost_usd": 0.1}), NOW)
    with caplog.at_level(logging.WARNING, logger="taskherd.supervisor"):
        result = runtime.result(role, reader, ExitStatus(code=1), a_run(), NOW)
    assert result.session_id is None and result.cost_usd == 0.1
    assert f"run 7: its output named {HOSTILE!r} as its session" in caplog.text


def test_a_codex_run_records_no_hostile_thread(caplog):
    reader = CodexStreamReader()
    reader.feed(lines({"type": "thread.started", "thread_id": HOSTILE},
                      {"type": "thread.started", "thread_id": CODEX_ID}), NOW_UTC)
    assert reader.state.thread_id == CODEX_ID  # the real one, not the first line
    role = RoleConfig(name="coder", runtime="codex")
    runtime = CodexRuntime()
    reader = runtime.reader(role)
    reader.feed(lines({"type": "thread.started", "thread_id": HOSTILE}), NOW)
    with caplog.at_level(logging.WARNING, logger="taskherd.supervisor"):
        result = runtime.result(role, reader, ExitStatus(code=1), a_run(), NOW)
    assert result.session_id is None and "is not a session id" in caplog.text


def test_claude_resumes_with_one_item_that_names_the_session():
    launch = Launch(["claude", "-p", "--output-format", "stream-json", "--verbose"])
    assert ClaudeRuntime().resumed(launch, CLAUDE_ID).argv == [
        "claude", f"--resume={CLAUDE_ID}", "-p", "--output-format", "stream-json", "--verbose"]


def test_codex_resumes_with_the_session_after_the_end_of_options():
    launch = Launch(["codex", "exec", "--json", "--model", "m", "-"])
    assert CodexRuntime().resumed(launch, CODEX_ID).argv == [
        "codex", "exec", "--json", "--model", "m", "resume", "--", CODEX_ID, "-"]
