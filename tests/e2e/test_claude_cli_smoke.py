"""The real Claude Code CLI against the fake Anthropic API, read with
ClaudeStreamReader: proves the flags, the environment and the stream-json
field names the `claude` runtime relies on."""

import time

from taskherd.runtimes.claude_stream import ApiRetry, ResultEvent, SessionStarted
from tests.e2e.fake_anthropic import ApiError, RateLimited, StopMidStream, Text, ToolUse

# Generous for a slow CI machine; a healthy run takes about a second.
RUN_TIMEOUT = 60


def test_tool_call_then_task_complete(start_fake_anthropic, run_claude):
    api = start_fake_anthropic(
        [
            ToolUse("Bash", {"command": "echo hi", "description": "say hi"}, text_before="On it."),
            Text("Ran it.\nTASK_COMPLETE: done"),
        ]
    )
    run = run_claude(api, "Run echo hi, then report.", "--allowedTools", "Bash")

    assert run.wait_exit(RUN_TIMEOUT) == 0, run.log_text()
    result = run.reader.result
    assert result is not None, run.log_text()
    assert not result.is_error and result.summary == "done" and result.declared_complete
    assert result.num_turns == 2
    assert result.total_cost_usd is not None and result.total_cost_usd > 0
    assert result.input_tokens > 0 and result.output_tokens > 0
    init = next(e for e in run.events if isinstance(e, SessionStarted))
    assert result.session_id and result.session_id == init.session_id == run.reader.session_id

    # The tool really ran: its output came back to the API in the next turn.
    [tool_result] = api.tool_results()
    assert tool_result["content"] == "hi" and not tool_result.get("is_error")
    assert len(api.turn_requests) == 2
    assert all(r.header("x-api-key") == "sk-ant-fake-key" for r in api.turn_requests)
    assert run.reader.lines_skipped == 1  # our '#' header line, nothing else


def test_rate_limit_shows_as_api_retry_within_seconds(start_fake_anthropic, run_claude):
    api = start_fake_anthropic([], after_script=RateLimited(retry_after_seconds=60))
    run = run_claude(api, "Say hi.")

    retry = run.wait_for(lambda e: isinstance(e, ApiRetry), timeout=RUN_TIMEOUT)
    seconds_to_signal = time.monotonic() - run.started_at

    assert retry.is_rate_limit and retry.error_status == 429 and retry.attempt == 1
    assert run.reader.rate_limit is not None and run.reader.rate_limit.source == "api_retry_429"
    assert run.process.poll() is None, "the CLI keeps retrying: the daemon must not wait"
    assert seconds_to_signal < 15, f"api_retry came {seconds_to_signal:.1f}s after start"


def test_rate_limit_when_retries_run_out_is_an_error_result(start_fake_anthropic, run_claude):
    api = start_fake_anthropic([], after_script=RateLimited(retry_after_seconds=1))
    run = run_claude(api, "Say hi.", env={"CLAUDE_CODE_MAX_RETRIES": "0"})

    assert run.wait_exit(RUN_TIMEOUT) == 1
    result = run.reader.result
    assert result.is_error and result.api_error_status == 429
    assert result.rate_limit is not None


def test_error_result(start_fake_anthropic, run_claude):
    api = start_fake_anthropic([ApiError(400, "invalid_request_error", "fake: bad request")])
    run = run_claude(api, "Say hi.")

    assert run.wait_exit(RUN_TIMEOUT) == 1
    result = run.reader.result
    assert result.is_error and result.api_error_status == 400
    assert "fake: bad request" in result.result_text
    assert result.rate_limit is None and run.reader.rate_limit is None


def test_stream_that_stops_leaves_a_silent_live_process(start_fake_anthropic, run_claude):
    api = start_fake_anthropic([StopMidStream(after_events=3)])
    run = run_claude(api, "Say hi.")

    api.wait_for(lambda: api.turn_requests, timeout=RUN_TIMEOUT)
    run.wait_for(lambda e: isinstance(e, SessionStarted), timeout=RUN_TIMEOUT)
    # The upstream is hanging: the CLI is alive and has written nothing of
    # the turn, which the supervisor's idle timeout will call `stalled`.
    assert run.process.poll() is None
    assert not [e for e in run.read_new() if isinstance(e, ResultEvent)]
    assert [e.type for e in run.events] == ["system"]


def test_dropped_stream_is_retried_without_streaming(start_fake_anthropic, run_claude):
    api = start_fake_anthropic(
        [StopMidStream(drop_connection=True), Text("TASK_COMPLETE: recovered")]
    )
    run = run_claude(api, "Say hi.")

    assert run.wait_exit(RUN_TIMEOUT) == 0, run.log_text()
    assert run.reader.result.summary == "recovered"
    assert [bool(r.body.get("stream")) for r in api.turn_requests] == [True, False]
