"""A scripted OpenAI Responses API (`POST /v1/responses`, streamed), enough of it to drive
the real Codex CLI (`codex exec`) in tests.

Codex 0.169 pointed at a custom provider (`model_providers.NAME.base_url`) sends one
streaming `POST {base_url}/responses` per model turn, with `Accept: text/event-stream` and
the provider's key as a bearer token. Each such request takes the next step of the script;
the request log keeps the bodies, so a test can read what the CLI sent back (a tool call's
output, the prompt).

    with FakeResponses([ShellCall("echo hi"), Text("TASK_COMPLETE: done")]) as api:
        argv += api.codex_config_args()
        env |= api.client_env()
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from tests.e2e.scripted_server import RecordedRequest, Reply, ScriptedServer

API_KEY = "sk-fake-responses"
PROVIDER = "taskherd_fake"
KEY_VARIABLE = "TASKHERD_FAKE_OPENAI_KEY"

# -- script steps -----------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """An assistant message that ends the turn."""

    text: str
    input_tokens: int = 1200
    cached_input_tokens: int = 200
    output_tokens: int = 40
    reasoning_tokens: int = 10
    chunks: int = 3


@dataclass(frozen=True)
class ShellCall:
    """A function call to Codex's `exec_command` tool: Codex runs `cmd` and sends the output
    back in the next request."""

    cmd: str
    input_tokens: int = 900
    output_tokens: int = 25


@dataclass(frozen=True)
class UsageLimit:
    """HTTP 429 with the body a ChatGPT-plan usage limit carries: Codex stops at once (no
    retries) and prints when the limit resets."""

    resets_at: int  # unix seconds
    plan_type: str = "plus"


@dataclass(frozen=True)
class RateLimited:
    """HTTP 429 with the API's `rate_limit_exceeded` body (a per-minute limit, not a plan's
    usage limit): Codex retries it on its own, then gives up."""

    message: str = "Rate limit reached for requests. Please try again in 20s."
    retry_after: str | None = "20"


@dataclass(frozen=True)
class ApiError:
    """An HTTP error with the API's error body. 400 is not retried by the CLI."""

    status: int = 400
    message: str = "Invalid request: unknown parameter"
    error_type: str = "invalid_request_error"


@dataclass(frozen=True)
class StopMidStream:
    """Start a message, send `after_events` events, then hang with the connection open."""

    text: str = "I am working on it and will"
    after_events: int = 3


Step = Text | ShellCall | UsageLimit | RateLimited | ApiError | StopMidStream


class FakeResponses(ScriptedServer):
    """The fake. A request without `Authorization: Bearer <api_key>` gets 401."""

    def __init__(self, script: list[Step], after_script: Step | None = None,
                 api_key: str = API_KEY):
        super().__init__()
        self.script = list(script)
        self.after_script = after_script or Text("fake_responses: script exhausted")
        self.api_key = api_key
        self._next_step = 0
        self._ids = itertools.count(1)

    # -- what a client needs ----------------------------------------------
    def codex_config_args(self) -> list[str]:
        """`codex exec` options that send every model call here."""
        provider = (f'{{name="fake",base_url="{self.base_url}/v1",env_key="{KEY_VARIABLE}",'
                    f'wire_api="responses",request_max_retries=0,stream_max_retries=0}}')
        return ["-c", f"model_provider={PROVIDER}", "-c", f"model_providers.{PROVIDER}={provider}"]

    def client_env(self) -> dict[str, str]:
        return {KEY_VARIABLE: self.api_key}

    # -- what the client sent ---------------------------------------------
    @property
    def turn_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.step is not None]

    def tool_outputs(self) -> list[str]:
        """The outputs of tool calls, as Codex sent them back."""
        outputs = []
        for request in self.turn_requests:
            body = request.body if isinstance(request.body, dict) else {}
            for item in body.get("input") or ():
                if isinstance(item, dict) and item.get("type") == "function_call_output":
                    outputs.append(str(item.get("output")))
        return outputs

    # -- answering ----------------------------------------------------------
    def respond(self, request: RecordedRequest, reply: Reply) -> None:
        path = request.path.rstrip("/")
        if request.method != "POST" or path != "/v1/responses":
            reply.json(404, _error(f"fake has no {request.method} {path}", "invalid_request"))
            return
        if request.header("authorization") != f"Bearer {self.api_key}":
            reply.json(401, _error("Incorrect API key provided", "invalid_request_error"))
            return
        with self._changed:
            index = self._next_step
            self._next_step += 1
        request.step = index
        step = self.script[index] if index < len(self.script) else self.after_script
        self._send(request, reply, step)

    def _send(self, request: RecordedRequest, reply: Reply, step: Step) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        model = body.get("model") or "fake-model"
        if isinstance(step, UsageLimit):
            error = {"type": "usage_limit_reached", "message": "The usage limit has been reached",
                     "plan_type": step.plan_type, "resets_at": step.resets_at}
            reply.json(429, {"error": error})
        elif isinstance(step, RateLimited):
            headers = {"retry-after": step.retry_after} if step.retry_after else {}
            body = _error(step.message, "requests")
            body["error"]["code"] = "rate_limit_exceeded"
            reply.json(429, body, headers)
        elif isinstance(step, ApiError):
            reply.json(step.status, _error(step.message, step.error_type))
        elif isinstance(step, StopMidStream):
            reply.start_sse()
            for event in self._message_events(model, step.text, 4)[: step.after_events]:
                reply.sse(event, event=event["type"])
            reply.hang()
        elif isinstance(step, ShellCall):
            self._stream(reply, model, self._call_events(step), step.input_tokens,
                         step.output_tokens)
        else:
            self._stream(reply, model, self._message_events(model, step.text, step.chunks),
                         step.input_tokens, step.output_tokens, step.cached_input_tokens,
                         step.reasoning_tokens)

    def _stream(self, reply: Reply, model: str, events: list[dict], input_tokens: int,
                output_tokens: int, cached: int = 0, reasoning: int = 0) -> None:
        response_id = f"resp_fake{next(self._ids):06d}"
        reply.start_sse()
        created = {"type": "response.created",
                   "response": {"id": response_id, "model": model, "status": "in_progress"}}
        for event in [created, *events]:
            reply.sse(event, event=event["type"])
        usage = {"input_tokens": input_tokens,
                 "input_tokens_details": {"cached_tokens": cached},
                 "output_tokens": output_tokens,
                 "output_tokens_details": {"reasoning_tokens": reasoning},
                 "total_tokens": input_tokens + output_tokens}
        completed = {"type": "response.completed",
                     "response": {"id": response_id, "model": model, "status": "completed",
                                  "usage": usage}}
        reply.sse(completed, event="response.completed")

    def _message_events(self, model: str, text: str, chunks: int) -> list[dict]:
        item_id = f"msg_fake{next(self._ids):06d}"
        empty = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress",
                 "content": []}
        events = [{"type": "response.output_item.added", "output_index": 0, "item": empty}]
        size = max(1, -(-len(text) // max(1, chunks)))
        for start in range(0, len(text), size):
            events.append({"type": "response.output_text.delta", "item_id": item_id,
                           "output_index": 0, "content_index": 0,
                           "delta": text[start:start + size]})
        done = {**empty, "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        events.append({"type": "response.output_item.done", "output_index": 0, "item": done})
        return events

    def _call_events(self, step: ShellCall) -> list[dict]:
        serial = next(self._ids)
        item = {"type": "function_call", "id": f"fc_fake{serial:06d}", "status": "completed",
                "call_id": f"call_fake{serial:06d}", "name": "exec_command",
                "arguments": json.dumps({"cmd": step.cmd, "tty": False, "login": False})}
        return [{"type": "response.output_item.added", "output_index": 0,
                 "item": {**item, "status": "in_progress", "arguments": ""}},
                {"type": "response.output_item.done", "output_index": 0, "item": item}]


def _error(message: str, error_type: str) -> dict:
    return {"error": {"message": message, "type": error_type, "param": None, "code": None}}
