"""A scripted Anthropic Messages API, enough of it to drive the real Claude
Code CLI (`claude -p`) in tests.

Each agent turn (a streaming `POST /v1/messages` that offers tools) takes the
next step of the script; everything else Claude Code sends on the side (a
token count, a short non-streaming call for a title or a quota probe) gets a
plain answer and leaves the script alone, so a test scripts only the turns it
cares about.

    with FakeAnthropic([ToolUse("Bash", {"command": "echo hi"}),
                        Text("TASK_COMPLETE: done")]) as api:
        env = api.client_env(home=tmp_path)
        ...
        api.wait_for(lambda: api.tool_results(), timeout=30)
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.scripted_server import RecordedRequest, Reply, ScriptedServer

# -- script steps -----------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """An assistant turn that answers with text and ends the turn."""

    text: str
    input_tokens: int = 120
    output_tokens: int = 12


@dataclass(frozen=True)
class ToolUse:
    """An assistant turn that asks for one tool call (after optional text)."""

    name: str
    input: dict
    text_before: str = ""
    input_tokens: int = 150
    output_tokens: int = 30


@dataclass(frozen=True)
class RateLimited:
    """HTTP 429 the way the real API sends it (`rate_limit_error`)."""

    retry_after_seconds: int | None = 60
    message: str = "Number of request tokens has exceeded your per-minute rate limit"
    # e.g. the `anthropic-ratelimit-unified-*` headers a subscription limit carries
    extra_headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class StopMidStream:
    """Start a text turn, send `after_events` SSE events, then either hang
    with the connection open (a stalled upstream) or drop the connection."""

    text: str = "I am working on it and will"
    after_events: int = 3
    drop_connection: bool = False


@dataclass(frozen=True)
class ApiError:
    """An HTTP error with the API's error body. 500/529 are retried by the
    CLI; 400 (`invalid_request_error`) is not and ends the run as an error."""

    status: int = 500
    error_type: str = "api_error"
    message: str = "Internal server error"


Step = Text | ToolUse | RateLimited | StopMidStream | ApiError

_ERROR_TYPES_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass
class _Ids:
    counter: itertools.count = field(default_factory=lambda: itertools.count(1))

    def next(self, prefix: str) -> str:
        return f"{prefix}_fake{next(self.counter):06d}"


class FakeAnthropic(ScriptedServer):
    """The fake; `script` steps answer agent turns in order. When the script
    runs out, `after_script` answers (default: a text turn saying so, which
    a test notices as an unexpected extra turn)."""

    def __init__(self, script: list[Step], after_script: Step | None = None):
        super().__init__()
        self.script = list(script)
        self.after_script = after_script or Text("fake_anthropic: script exhausted")
        self._ids = _Ids()
        self._next_step = 0

    # -- what tests read --------------------------------------------------
    def client_env(self, home: str, api_key: str = "sk-ant-fake-key") -> dict[str, str]:
        """Environment that makes the Claude Code CLI talk to this fake only,
        accept the dummy key without a prompt, and write its state to `home`."""
        return claude_cli_env(self.base_url, home=home, api_key=api_key)

    @property
    def turn_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.step is not None]

    def tool_results(self) -> list[dict]:
        """The tool_result blocks the CLI sent back, over all turns."""
        blocks = []
        for request in self.turn_requests:
            for message in request.body.get("messages", []):
                content = message.get("content")
                if message.get("role") == "user" and isinstance(content, list):
                    blocks += [b for b in content if b.get("type") == "tool_result"]
        # The CLI resends history, so the same result shows up on every later turn.
        unique = {b.get("tool_use_id"): b for b in blocks}
        return list(unique.values())

    # -- answering ----------------------------------------------------------
    def respond(self, request: RecordedRequest, reply: Reply) -> None:
        if request.method == "POST" and request.path == "/v1/messages/count_tokens":
            reply.json(200, {"input_tokens": _rough_token_count(request.body)})
        elif request.method == "POST" and request.path == "/v1/messages":
            self._answer_messages(request, reply)
        elif request.method in ("GET", "HEAD") and request.path == "/":
            # Claude Code probes the base URL once at start-up.
            reply.json(200, {"ok": True})
        else:
            reply.json(404, _error_body("not_found_error", f"fake has no {request.path}"))

    def _answer_messages(self, request: RecordedRequest, reply: Reply) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        if not _is_agent_turn(body):
            # Side calls (titles, quota probes) must not eat the script.
            self._send_message(
                body,
                reply,
                Text("ok", input_tokens=8, output_tokens=1),
                stream=bool(body.get("stream")),
            )
            return
        step = self._take_step(request)
        self._send_step(body, reply, step)

    def _take_step(self, request: RecordedRequest) -> Step:
        with self._changed:
            index = self._next_step
            self._next_step += 1
        request.step = index
        return self.script[index] if index < len(self.script) else self.after_script

    def _send_step(self, body: dict, reply: Reply, step: Step) -> None:
        if isinstance(step, RateLimited):
            headers = (
                {"retry-after": str(step.retry_after_seconds)}
                if step.retry_after_seconds is not None
                else {}
            )
            headers.update(step.extra_headers)
            reply.json(429, _error_body("rate_limit_error", step.message), headers)
        elif isinstance(step, ApiError):
            error_type = step.error_type or _ERROR_TYPES_BY_STATUS.get(step.status, "api_error")
            reply.json(step.status, _error_body(error_type, step.message))
        elif isinstance(step, StopMidStream):
            self._send_stopping_stream(body, reply, step)
        else:
            self._send_message(body, reply, step, stream=bool(body.get("stream")))

    def _send_message(self, body: dict, reply: Reply, step: Text | ToolUse, stream: bool) -> None:
        events = self._message_events(body.get("model", "claude-fake"), step)
        if stream:
            reply.start_sse({"request-id": self._ids.next("req")})
            for event in events:
                reply.sse(event, event=event["type"])
        else:
            reply.json(200, _assemble_message(events))

    def _send_stopping_stream(self, body: dict, reply: Reply, step: StopMidStream) -> None:
        events = self._message_events(body.get("model", "claude-fake"), Text(step.text))
        reply.start_sse()
        for event in events[: step.after_events]:
            reply.sse(event, event=event["type"])
        if step.drop_connection:
            reply.cut()
        else:
            reply.hang()

    def _message_events(self, model: str, step: Text | ToolUse) -> list[dict]:
        message = {
            "id": self._ids.next("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": step.input_tokens,
                "output_tokens": 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
        events: list[dict] = [{"type": "message_start", "message": message}]
        text = step.text if isinstance(step, Text) else step.text_before
        if text:
            events += _text_block_events(0, text)
        if isinstance(step, ToolUse):
            events += _tool_use_block_events(1 if text else 0, self._ids.next("toolu"), step)
        stop_reason = "tool_use" if isinstance(step, ToolUse) else "end_turn"
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": step.output_tokens},
            }
        )
        events.append({"type": "message_stop"})
        return events


def claude_cli_env(base_url: str, home: str, api_key: str = "sk-ant-fake-key") -> dict[str, str]:
    """The variables that point Claude Code at a fake API and keep it quiet.

    ANTHROPIC_API_KEY is taken as-is in `-p` mode (no approval prompt; the
    init event reports `apiKeySource: ANTHROPIC_API_KEY`). HOME and
    CLAUDE_CONFIG_DIR keep its settings, sessions and memory out of the real
    user's. The rest stops every call that is not to ANTHROPIC_BASE_URL
    (telemetry, error reports, update checks), which would hang or fail here.
    """
    return {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        "HOME": home,
        "CLAUDE_CONFIG_DIR": f"{home}/.claude",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
    }


def _is_agent_turn(body: dict) -> bool:
    # The main loop always offers the tool list; side calls (titles, quota
    # probes) offer none. Not `stream`: after a dropped stream the CLI
    # retries the same turn without streaming (observed with 2.1.197).
    return bool(body.get("tools"))


def _text_block_events(index: int, text: str) -> list[dict]:
    events = [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        }
    ]
    for piece in _pieces(text, 2):
        events.append(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": piece},
            }
        )
    events.append({"type": "content_block_stop", "index": index})
    return events


def _tool_use_block_events(index: int, tool_use_id: str, step: ToolUse) -> list[dict]:
    events = [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {
                "type": "tool_use",
                "id": tool_use_id,
                "name": step.name,
                "input": {},
            },
        }
    ]
    # Split the JSON like the real API does, so the client has to join it.
    for piece in _pieces(json.dumps(step.input), 3):
        events.append(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
        )
    events.append({"type": "content_block_stop", "index": index})
    return events


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _assemble_message(events: list[dict]) -> dict:
    """The non-streaming form of the same message."""
    message = dict(events[0]["message"])
    blocks: dict[int, dict] = {}
    partial_json: dict[int, str] = {}
    for event in events[1:]:
        if event["type"] == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                blocks[event["index"]]["text"] += delta["text"]
            else:
                partial_json[event["index"]] = (
                    partial_json.get(event["index"], "") + delta["partial_json"]
                )
        elif event["type"] == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message["usage"], **event["usage"]}
    for index, text in partial_json.items():
        blocks[index]["input"] = json.loads(text)
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def _error_body(error_type: str, message: str) -> dict:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _rough_token_count(body: Any) -> int:
    return max(1, len(json.dumps(body)) // 4) if body is not None else 1
