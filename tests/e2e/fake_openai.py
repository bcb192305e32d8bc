"""A scripted OpenAI-compatible chat API (`POST /v1/chat/completions`) for
testing the `chat` runtime.

Every completion request takes the next script step; the request log keeps
headers, so a test can check the bearer key and the per-run session key.

    with FakeOpenAI([Text("TASK_COMPLETE: done")], api_key="sk-test") as api:
        ... POST f"{api.base_url}/v1/chat/completions" ...
        api.wait_for(lambda: api.completion_requests, timeout=10)
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from tests.e2e.scripted_server import RecordedRequest, Reply, ScriptedServer


@dataclass(frozen=True)
class Text:
    """A reply; streamed as `chunks` content deltas when the request streams."""

    text: str
    prompt_tokens: int = 50
    completion_tokens: int = 10
    chunks: int = 3
    finish_reason: str = "stop"


@dataclass(frozen=True)
class RateLimited:
    """HTTP 429 with OpenAI's error body and, if given, Retry-After."""

    retry_after: str | None = "30"  # seconds or an HTTP-date, as sent
    message: str = "Rate limit reached for requests"


@dataclass(frozen=True)
class StopMidStream:
    """Stream `after_chunks` chunks of `text`, then hang (connection kept
    open: a stalled upstream) or drop the connection. No `[DONE]`."""

    text: str = "Working on it, first I will"
    after_chunks: int = 2
    drop_connection: bool = False


@dataclass(frozen=True)
class ApiError:
    status: int = 500
    message: str = "The server had an error while processing your request"
    error_type: str = "server_error"


Step = Text | RateLimited | StopMidStream | ApiError


class FakeOpenAI(ScriptedServer):
    """The fake. With `api_key` set, a request without `Authorization:
    Bearer <api_key>` gets 401 and takes no step."""

    def __init__(
        self,
        script: list[Step],
        after_script: Step | None = None,
        api_key: str | None = None,
        model: str = "fake-model",
    ):
        super().__init__()
        self.script = list(script)
        self.after_script = after_script or Text("fake_openai: script exhausted")
        self.api_key = api_key
        self.model = model
        self._next_step = 0
        self._ids = itertools.count(1)

    @property
    def completion_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.step is not None]

    def respond(self, request: RecordedRequest, reply: Reply) -> None:
        path = request.path.rstrip("/")
        if request.method == "GET" and path == "/v1/models":
            reply.json(200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        elif request.method == "POST" and path == "/v1/chat/completions":
            if (
                self.api_key is not None
                and request.header("authorization") != f"Bearer {self.api_key}"
            ):
                reply.json(
                    401,
                    _error(
                        "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
                    ),
                )
                return
            self._send_step(request, reply, self._take_step(request))
        else:
            reply.json(404, _error(f"fake has no {request.method} {path}", "invalid_request_error"))

    def _take_step(self, request: RecordedRequest) -> Step:
        with self._changed:
            index = self._next_step
            self._next_step += 1
        request.step = index
        return self.script[index] if index < len(self.script) else self.after_script

    def _send_step(self, request: RecordedRequest, reply: Reply, step: Step) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        if isinstance(step, RateLimited):
            headers = {"retry-after": step.retry_after} if step.retry_after is not None else {}
            reply.json(429, _error(step.message, "requests", "rate_limit_exceeded"), headers)
        elif isinstance(step, ApiError):
            reply.json(step.status, _error(step.message, step.error_type))
        elif isinstance(step, StopMidStream):
            self._send_stopping_stream(body, reply, step)
        elif body.get("stream"):
            self._send_stream(body, reply, step)
        else:
            reply.json(200, self._completion(body, step))

    def _send_stream(self, body: dict, reply: Reply, step: Text) -> None:
        completion_id = self._completion_id()
        reply.start_sse()
        for chunk in self._chunks(body, completion_id, step.text, step.chunks):
            reply.sse(chunk)
        reply.sse(self._chunk(body, completion_id, {}, finish_reason=step.finish_reason))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage_chunk = self._chunk(body, completion_id, None)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = _usage(step)
            reply.sse(usage_chunk)
        reply.sse("[DONE]")

    def _send_stopping_stream(self, body: dict, reply: Reply, step: StopMidStream) -> None:
        completion_id = self._completion_id()
        reply.start_sse()
        for chunk in self._chunks(body, completion_id, step.text, 4)[: step.after_chunks]:
            reply.sse(chunk)
        if step.drop_connection:
            reply.cut()
        else:
            reply.hang()

    def _chunks(self, body: dict, completion_id: str, text: str, count: int) -> list[dict]:
        chunks = [self._chunk(body, completion_id, {"role": "assistant", "content": ""})]
        size = max(1, -(-len(text) // max(1, count)))
        for start in range(0, len(text), size):
            chunks.append(self._chunk(body, completion_id, {"content": text[start : start + size]}))
        return chunks

    def _chunk(
        self, body: dict, completion_id: str, delta: dict | None, finish_reason: str | None = None
    ) -> dict:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}],
        }

    def _completion(self, body: dict, step: Text) -> dict:
        return {
            "id": self._completion_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": step.text},
                    "finish_reason": step.finish_reason,
                }
            ],
            "usage": _usage(step),
        }

    def _completion_id(self) -> str:
        return f"chatcmpl-fake{next(self._ids):06d}"


def _usage(step: Text) -> dict:
    return {
        "prompt_tokens": step.prompt_tokens,
        "completion_tokens": step.completion_tokens,
        "total_tokens": step.prompt_tokens + step.completion_tokens,
    }


def _error(message: str, error_type: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}
