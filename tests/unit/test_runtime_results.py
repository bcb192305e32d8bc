"""How runtimes turn what they saw into an outcome."""

from __future__ import annotations

import json

import pytest

from taskherd.host.procs import ExitStatus
from taskherd.model import Outcome, Run
from taskherd.model.settings import RoleConfig
from taskherd.runtimes.chat import completions_url
from taskherd.runtimes.claude import ClaudeRuntime
from taskherd.runtimes.command import CommandRuntime, TemplateError, fill_argv

NOW = 1_800_000_000.0
SESSION = "748f6d6d-1011-44bc-8f20-b2a056f07221"  # as Claude Code writes one
OTHER_SESSION = "776eefa3-b54d-418f-9ee7-375700695dac"
ROLE = RoleConfig(name="coder", command=("agent",))


def run(report: str | None = None, summary: str | None = None) -> Run:
    fields = dict.fromkeys(Run.__dataclass_fields__)
    fields.update(id=1, task_id=1, attempt=1, node="n", role="coder", claimed_at=NOW,
                  report=report, report_summary=summary)
    return Run(**fields)


def command_result(output: str, code: int | None = 0, role: RoleConfig = ROLE, **run_fields):
    runtime = CommandRuntime()
    reader = runtime.reader(role)
    reader.feed(output.encode(), NOW)
    reader.finish(NOW)
    return runtime.result(role, reader, ExitStatus(code=code), run(**run_fields), NOW)


def test_task_complete_line_is_success_with_its_summary_even_on_a_non_zero_exit():
    result = command_result("# taskherd {}\nworking\nTASK_COMPLETE: shipped it\n", code=1)
    assert (result.outcome, result.summary) == (Outcome.SUCCEEDED, "shipped it")


def test_the_agents_report_wins_over_its_exit():
    assert command_result("", code=3, report="done", summary="ok").outcome is Outcome.SUCCEEDED
    failed = command_result("TASK_COMPLETE: x", code=0, report="fail", summary="tests red")
    assert (failed.outcome, failed.error) == (Outcome.FAILED, "tests red")
    assert command_result("", report="block").outcome is Outcome.BLOCKED


def test_exit_codes_and_signals():
    assert command_result("", code=0).outcome is Outcome.SUCCEEDED
    strict = RoleConfig(name="coder", command=("a",), require_marker=True)
    assert command_result("", code=0, role=strict).outcome is Outcome.FAILED
    failed = command_result("line 1\nboom\n", code=2)
    assert failed.outcome is Outcome.FAILED and failed.error_tail == "line 1\nboom"
    runtime = CommandRuntime()
    killed = runtime.result(ROLE, runtime.reader(ROLE), ExitStatus(signal=9), run(), NOW)
    assert killed.outcome is Outcome.CRASHED and "signal 9" in killed.error


def test_a_rate_limit_in_a_failed_runs_output_is_not_a_strike():
    result = command_result("Claude AI usage limit reached|1800003600\n", code=1)
    assert result.outcome is Outcome.RATE_LIMITED and result.retry_at == 1800003600


def test_argv_templates_fill_placeholders_and_reject_unknown_ones():
    assert fill_argv(("agent", "--task={task_id}", "{prompt_file}"),
                     {"task_id": "7", "prompt_file": "/p"}) == ["agent", "--task=7", "/p"]
    with pytest.raises(TemplateError, match="placeholders"):
        fill_argv(("{nope}",), {"task_id": "7"})


def claude_result(*events: dict, code: int = 0):
    runtime = ClaudeRuntime()
    reader = runtime.reader(ROLE)
    reader.feed("".join(json.dumps(e) + "\n" for e in events).encode(), NOW)
    reader.finish(NOW)
    return runtime.result(ROLE, reader, ExitStatus(code=code), run(), NOW)


def test_claude_result_event_gives_summary_cost_and_session():
    result = claude_result(
        {"type": "system", "subtype": "init", "session_id": SESSION},
        {"type": "result", "subtype": "success", "is_error": False, "num_turns": 3,
         "result": "Long text.\nTASK_COMPLETE: done it", "total_cost_usd": 0.12,
         "session_id": SESSION, "usage": {"input_tokens": 10, "output_tokens": 5,
                                        "cache_read_input_tokens": 100}})
    assert (result.outcome, result.summary, result.cost_usd) == (Outcome.SUCCEEDED, "done it", 0.12)
    assert (result.input_tokens, result.output_tokens, result.turns) == (110, 5, 3)
    assert result.session_id == SESSION


def test_claude_api_retry_429_is_a_rate_limit_and_an_error_result_a_failure():
    limited = claude_result({"type": "system", "subtype": "api_retry", "attempt": 1,
                             "error_status": 429, "error": "rate_limit"}, code=143)
    assert limited.outcome is Outcome.RATE_LIMITED
    failed = claude_result({"type": "result", "subtype": "success", "is_error": True,
                            "api_error_status": 400, "result": "bad request"}, code=1)
    assert failed.outcome is Outcome.FAILED and failed.error == "API error 400: bad request"


@pytest.mark.parametrize("base", ["http://gw:1", "http://gw:1/", "http://gw:1/v1", "http://gw:1/v1/"])
def test_chat_completions_url_accepts_a_base_with_or_without_v1(base):
    assert completions_url(base) == "http://gw:1/v1/chat/completions"


USAGE_LIMIT_RESULT = {
    "type": "result", "subtype": "success", "is_error": True, "num_turns": 4,
    "result": "Claude AI usage limit reached|1800007200", "total_cost_usd": 0.31,
    "session_id": OTHER_SESSION, "usage": {"input_tokens": 40, "output_tokens": 9},
}


def assistant_text(text: str) -> dict:
    return {"type": "assistant", "session_id": OTHER_SESSION,
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


@pytest.mark.parametrize(
    ("events", "summary"),
    [
        ([assistant_text("Fixed it.\nTASK_COMPLETE: fixed the parser"), USAGE_LIMIT_RESULT],
         "fixed the parser"),
        ([{**USAGE_LIMIT_RESULT,
           "result": "TASK_COMPLETE: wrote docs\nClaude AI usage limit reached|1800007200"}],
         "wrote docs"),
    ],
    ids=["in-assistant-message", "in-result-text"],
)
def test_claude_task_complete_before_a_usage_limit_is_success_with_its_spend(events, summary):
    init = {"type": "system", "subtype": "init", "session_id": OTHER_SESSION}
    result = claude_result(init, *events, code=1)
    assert (result.outcome, result.summary) == (Outcome.SUCCEEDED, summary)
    assert (result.cost_usd, result.input_tokens, result.output_tokens) == (0.31, 40, 9)
    assert (result.turns, result.session_id) == (4, OTHER_SESSION)


def test_claude_usage_limit_without_task_complete_is_a_rate_limit_with_its_spend():
    result = claude_result(assistant_text("Working on it."), USAGE_LIMIT_RESULT, code=1)
    assert result.outcome is Outcome.RATE_LIMITED and result.retry_at == 1800007200
    assert (result.cost_usd, result.turns, result.session_id) == (0.31, 4, OTHER_SESSION)
