"""The stream-json reader, on lines captured from the real claude-code 2.1.197
run against tests/e2e/fake_anthropic.py (see tests/e2e/data)."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from taskherd.runtimes.claude_stream import (
    ApiRetry,
    ClaudeRunResult,
    ClaudeStreamReader,
    ResultEvent,
    SessionStarted,
    summary_of,
)

DATA = Path(__file__).resolve().parents[1] / "e2e" / "data"
NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def captured(name: str) -> bytes:
    return (DATA / name).read_bytes()


def read_all(stream: bytes, reader=None):
    reader = reader or ClaudeStreamReader()
    events = reader.feed(stream, now=NOW) + reader.finish(now=NOW)
    return reader, events


def test_successful_tool_run():
    reader, events = read_all(captured("tool_use_then_complete.jsonl"))
    assert [e.type for e in events] == [
        "system",
        "assistant",
        "assistant",
        "user",
        "assistant",
        "result",
    ]
    assert isinstance(events[0], SessionStarted)
    assert isinstance(events[-1], ResultEvent)
    result = reader.result
    assert result.succeeded and not result.is_error
    assert result.summary == "done" and result.declared_complete
    assert result.result_text == "All good.\nTASK_COMPLETE: done"
    assert result.session_id == reader.session_id == events[0].session_id
    assert result.total_cost_usd == pytest.approx(0.0024)
    assert (result.input_tokens, result.output_tokens) == (270, 42)
    assert result.num_turns == 2
    assert reader.rate_limit is None
    assert reader.lines_skipped == 0


def test_tool_use_is_readable_from_lazy_events():
    _, events = read_all(captured("tool_use_then_complete.jsonl"))
    tool_use = events[2].data["message"]["content"][0]
    assert tool_use["name"] == "Bash" and tool_use["input"] == {"command": "echo hi"}
    assert events[3].data["message"]["content"][0]["content"] == "hi"


def test_rate_limited_run_signals_at_first_api_retry():
    reader = ClaudeStreamReader()
    init, retry, *rest = captured("rate_limited_429.jsonl").splitlines(keepends=True)
    reader.feed(init, now=NOW)
    assert reader.rate_limit is None
    [event] = reader.feed(retry, now=NOW)
    assert isinstance(event, ApiRetry) and event.is_rate_limit
    assert (event.error_status, event.attempt, event.retry_delay_ms) == (429, 1, 5000)
    assert reader.rate_limit.source == "api_retry_429"

    reader.feed(b"".join(rest), now=NOW)
    result = reader.result
    assert result.is_error and result.subtype == "success"  # sic: the CLI's wording
    assert result.api_error_status == 429
    assert result.rate_limit is not None and result.rate_limit.reset_at is None
    assert not result.declared_complete


@pytest.mark.parametrize("name, status", [("error_400.jsonl", 400), ("error_500.jsonl", 500)])
def test_api_error_results_are_errors_but_not_rate_limits(name, status):
    reader, _ = read_all(captured(name))
    assert reader.result.is_error and reader.result.api_error_status == status
    assert reader.result.rate_limit is None and reader.rate_limit is None
    assert reader.result.total_cost_usd == 0


def test_partial_lines_wait_for_their_end():
    stream = captured("tool_use_then_complete.jsonl")
    reader = ClaudeStreamReader()
    types = []
    for start in range(0, len(stream), 7):  # byte by (almost) byte, across UTF-8 too
        types += [e.type for e in reader.feed(stream[start : start + 7], now=NOW)]
    types += [e.type for e in reader.finish(now=NOW)]
    assert types == ["system", "assistant", "assistant", "user", "assistant", "result"]
    assert reader.result.summary == "done"


def test_last_line_without_newline_is_read_on_finish():
    line = captured("error_500.jsonl").splitlines()[-1]
    reader = ClaudeStreamReader()
    assert reader.feed(line, now=NOW) == []
    assert [e.type for e in reader.finish(now=NOW)] == ["result"]


def test_non_json_lines_are_skipped_not_fatal():
    stream = (
        b"# taskherd run 42 role=coder started 2026-01-15T12:00:00Z\n"
        b"node: warning: something on stderr\n"
        b"{not json}\n"
        b"[1, 2]\n"
        b"\n" + captured("error_400.jsonl")
    )
    reader, events = read_all(stream)
    assert [e.type for e in events] == ["system", "assistant", "result"]
    assert reader.lines_skipped == 4
    assert reader.events_seen == 3


def test_accepts_str_chunks():
    reader = ClaudeStreamReader()
    events = reader.feed(captured("error_400.jsonl").decode(), now=NOW)
    assert [e.type for e in events] == ["system", "assistant", "result"]


def test_reads_what_a_log_file_grew_by(tmp_path):
    log_path = tmp_path / "run.log"
    lines = captured("tool_use_then_complete.jsonl").splitlines(keepends=True)
    reader = ClaudeStreamReader()
    with open(log_path, "ab") as writer, open(log_path, "rb") as log:
        writer.write(b"# header\n" + lines[0] + lines[1][:10])
        writer.flush()
        assert [e.type for e in reader.read_available(log, now=NOW)] == ["system"]
        writer.write(lines[1][10:] + b"".join(lines[2:]))
        writer.flush()
        assert [e.type for e in reader.read_available(log, now=NOW)][-1] == "result"
    assert reader.result.summary == "done"


def result_line(**fields) -> bytes:
    base = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "ok",
        "session_id": "748f6d6d-1011-44bc-8f20-b2a056f07221",
        "num_turns": 1,
        "total_cost_usd": 0.5,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    return json.dumps({**base, **fields}).encode() + b"\n"


def test_usage_limit_text_in_failed_result_gives_reset_time():
    reader, _ = read_all(
        result_line(is_error=True, result="Claude AI usage limit reached|1768485600")
    )
    assert reader.rate_limit.reset_at == datetime(2026, 1, 15, 14, 0, tzinfo=UTC)
    assert reader.result.rate_limit == reader.rate_limit


def test_reset_time_from_result_replaces_api_retry_signal_without_one():
    retry = b'{"type":"system","subtype":"api_retry","attempt":1,"error_status":429}\n'
    reader, _ = read_all(
        retry + result_line(is_error=True, result="5-hour limit reached ∙ resets 2pm (UTC)")
    )
    assert reader.rate_limit.reset_at == NOW + timedelta(hours=2)


def test_successful_result_talking_about_rate_limits_is_no_signal():
    reader, _ = read_all(result_line(result="Added a rate limit to the API.\nTASK_COMPLETE: ok"))
    assert reader.result.rate_limit is None and reader.rate_limit is None


def test_extra_patterns_apply_to_failed_results():
    reader = ClaudeStreamReader(extra_rate_limit_patterns=(r"quota exhausted",))
    read_all(result_line(is_error=True, result="quota exhausted"), reader)
    assert reader.rate_limit.source == "extra:quota exhausted"


def test_error_subtypes_are_errors_and_cache_tokens_are_read():
    reader, _ = read_all(
        result_line(
            subtype="error_max_turns",
            result="",
            usage={
                "input_tokens": 3,
                "output_tokens": 4,
                "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 2000,
            },
        )
    )
    result = reader.result
    assert result.is_error and result.subtype == "error_max_turns"
    assert (result.cache_creation_input_tokens, result.cache_read_input_tokens) == (100, 2000)


def test_result_with_missing_fields_reads_as_defaults():
    result = ClaudeRunResult.from_event({"type": "result"}, NOW)
    assert (result.is_error, result.summary, result.total_cost_usd, result.input_tokens) == (
        False,
        "",
        None,
        0,
    )


@pytest.mark.parametrize(
    "text, summary, declared",
    [
        ("All done.\nTASK_COMPLETE: fixed the bug", "fixed the bug", True),
        ("TASK_COMPLETE: first\nmore\nTASK_COMPLETE: second", "second", True),
        ("**TASK_COMPLETE:** wrote tests", "wrote tests", True),
        ("  just a reply  ", "just a reply", False),
        ("mentions TASK_COMPLETE: mid-line only", "mentions TASK_COMPLETE: mid-line only", False),
    ],
)
def test_summary_of(text, summary, declared):
    assert summary_of(text) == (summary, declared)
