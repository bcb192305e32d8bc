"""The `chat` runtime: one streamed POST to an OpenAI-compatible `/v1/chat/completions`.

No process is spawned: the call runs on the daemon's loop as a `ChatCall`, which looks to the
supervisor like a process handle (it can be waited for and killed) and writes the streamed
reply to the run's log, so log growth is its activity and the log keeps what it said.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskherd.host.procs import ExitStatus
from taskherd.model import Outcome, Run, RunResult, Task
from taskherd.model.settings import RoleConfig
from taskherd.policy.faults import endpoint_fault
from taskherd.policy.prompt import build_prompt
from taskherd.policy.timefmt import reading_zone
from taskherd.runtimes.base import AgentEnv, OutputReader, RunFiles, Runtime, failure
from taskherd.runtimes.ratelimit import (
    RateLimitSignal,
    detect_rate_limit,
    known_reset,
    retry_after_to_reset,
)

if TYPE_CHECKING:
    import httpx

CONNECT_TIMEOUT = 10.0
ERROR_BODY_LIMIT = 2000
SESSION_HEADER = "X-Session-Key"


class ChatCall:
    """An in-flight chat completion, shaped like procs.ProcessHandle for the supervisor."""

    pid = None  # nothing to adopt after a restart: an interrupted call is simply retried
    started_at = None

    def __init__(self, role: RoleConfig, task: Task, run: Run, log_path: Path,
                 api_key: str | None, prompt: str, url: str):
        self.role, self.task, self.run = role, task, run
        self.url = url
        self.prompt = prompt
        self.log_path = log_path
        self.api_key = api_key
        self.reply: list[str] = []
        self.usage: dict = {}
        self.http_status: int | None = None
        self.error: str | None = None
        self.transport_error: httpx.HTTPError | None = None  # why no answer came, if none did
        self.stalled = False
        self.retry_after: str | None = None
        self._status: ExitStatus | None = None
        self._call = asyncio.get_running_loop().create_task(self._converse())

    @property
    def session_key(self) -> str:
        return f"taskherd:{self.task.id}:{self.run.id}"

    def poll(self) -> ExitStatus | None:
        return self._status

    def is_alive(self) -> bool:
        return self._status is None

    async def wait_exit(self) -> ExitStatus:
        try:
            await asyncio.shield(self._call)
        except asyncio.CancelledError:
            if not self._call.cancelled():
                raise  # the waiter itself was cancelled, not the call
        return self._status or ExitStatus(signal=15, ended_at=time.time(), source="cancelled")

    async def terminate(self, grace: float = 0.0) -> None:
        self._call.cancel()  # nothing outlives a cancelled request: no grace needed

    def close(self) -> None:
        pass

    async def _converse(self) -> None:
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(fd, "a", encoding="utf-8") as log:
            header = {"run": self.run.id, "task": self.task.id, "role": self.role.name,
                      "runtime": "chat", "url": self.role.base_url, "time": time.time()}
            log.write(f"# taskherd {json.dumps(header)}\n")
            code = await self._post(log)
        self._status = ExitStatus(code=code, ended_at=time.time(), source="chat")

    async def _post(self, log) -> int:
        # Imported at a chat role's first call, not with the daemon: httpx (with its command
        # line's rich, pygments and click) is ~11 MB of the memory of every daemon, a third
        # of it (bench/sandbox.py part b), most of which runs no chat role.
        import httpx

        headers = {SESSION_HEADER: self.session_key}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = {
            "model": self.role.model,
            "messages": [{"role": "user", "content": self.prompt}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": self.session_key,
        }
        # The read timeout is the idle window: a stream that sends nothing for that long stalled.
        timeout = httpx.Timeout(CONNECT_TIMEOUT, read=self.role.idle_timeout)
        try:
            async with httpx.AsyncClient(timeout=timeout) as client:
                async with client.stream("POST", self.url, json=body, headers=headers) as response:
                    self.http_status = response.status_code
                    if response.status_code != 200:
                        await self._read_error(response)
                        return 1
                    if not await self._read_stream(response, log):
                        # Closed mid-answer (a gateway that stops): an SSE stream framed by
                        # the connection's end reads as whole to httpx, so the protocol's own
                        # end is what tells a cut; as a cut chunked body would, it raises.
                        raise httpx.RemoteProtocolError(
                            "the stream ended mid-answer: no finish_reason and no [DONE]")
        except httpx.ReadTimeout:
            self.stalled = True
            self.error = f"no data from {self.url} for {self.role.idle_timeout:g}s"
            return 1
        except httpx.HTTPError as error:
            self.transport_error = error
            self.error = f"{type(error).__name__}: {error or 'no detail'}"
            return 1
        return 0

    async def _read_error(self, response: httpx.Response) -> None:
        text = (await response.aread()).decode("utf-8", "replace")[:ERROR_BODY_LIMIT]
        self.retry_after = response.headers.get("retry-after")
        self.error = f"HTTP {response.status_code}: {text}"

    async def _read_stream(self, response: httpx.Response, log) -> bool:
        """Write the reply to the log as it streams; whether it ended as the protocol ends
        one (`[DONE]`, or a choice's finish_reason for a server that sends no [DONE])."""
        finished = False
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                return True
            try:
                chunk = json.loads(payload)
            except ValueError:
                continue
            if chunk.get("usage"):
                self.usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                finished = finished or bool(choice.get("finish_reason"))
                text = (choice.get("delta") or {}).get("content") or ""
                if text:
                    self.reply.append(text)
                    log.write(text)
                    log.flush()
        return finished


class ChatRuntime(Runtime):
    name = "chat"

    def start(self, role: RoleConfig, task: Task, run: Run, files: RunFiles,
              agent: AgentEnv) -> ChatCall:
        """No process: the call runs on the daemon's loop (the agent env is for processes)."""
        api_key = os.environ.get(role.api_key_env) if role.api_key_env else None
        if role.api_key_env and not api_key:
            raise ValueError(f"roles.{role.name}.api_key_env names {role.api_key_env}, "
                             "which is not set in the daemon's environment")
        if not role.base_url:  # the config refuses a chat role without one
            raise ValueError(f"roles.{role.name}: runtime 'chat' needs base_url")
        return ChatCall(role, task, run, files.log, api_key, build_prompt(task, agent.context),
                        completions_url(role.base_url))

    def result(self, role: RoleConfig, reader: OutputReader, exit_status: ExitStatus, run: Run,
               now: float, handle: object = None) -> RunResult:
        assert isinstance(handle, ChatCall)
        usage: dict[str, Any] = {"input_tokens": handle.usage.get("prompt_tokens"),
                                 "output_tokens": handle.usage.get("completion_tokens"),
                                 "session_id": handle.session_key}
        if exit_status.code == 0:
            reply = "".join(handle.reply).strip()
            if role.require_marker and reader.summary is None:
                error = "the reply has no TASK_COMPLETE line (the role sets require_marker)"
                return RunResult(Outcome.FAILED, 0, error=error, error_tail=reply[-2000:], **usage)
            return RunResult(Outcome.SUCCEEDED, 0, summary=reader.summary or reply[:2000], **usage)
        fault = endpoint_fault(handle.http_status, handle.transport_error)
        if fault is not None:
            # The gateway, not the agent: no strike, no attempt, no rate-limit count; the
            # supervisor pauses the runtime until a probe request gets through. A reply cut
            # mid-answer is asked again whole: the part streamed stays in the log. Before the
            # limit's words: a 503 saying "overloaded" must not count towards max_rate_limits.
            error = f"endpoint down: {handle.error}"
            return RunResult(Outcome.LOST, error=error[:ERROR_BODY_LIMIT], fault=fault, **usage)
        limit = _rate_limit(handle, role, now)
        if limit is not None:
            until = known_reset(limit, now)  # None: the daemon picks the pause
            return RunResult(Outcome.RATE_LIMITED, error=handle.error, retry_at=until, **usage)
        if handle.stalled:
            return RunResult(Outcome.STALLED, error=handle.error, **usage)
        if handle.error:
            return RunResult(Outcome.FAILED, error=handle.error, **usage)
        return failure(role, exit_status, None)


def completions_url(base_url: str) -> str:
    """`…/v1/chat/completions` whether the configured base URL ends in /v1 or not."""
    base = base_url.rstrip("/")
    return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")


def _rate_limit(call: ChatCall, role: RoleConfig, now: float) -> RateLimitSignal | None:
    if call.http_status == 429:
        reset = retry_after_to_reset(call.retry_after, _utc(now)) if call.retry_after else None
        return RateLimitSignal(reset, "http_429", (call.error or "")[:200])
    if call.error:
        return detect_rate_limit(call.error, _utc(now), role.rate_limit_patterns,
                                 reading_zone(role.timezone))
    return None


def _utc(now: float) -> datetime:
    return datetime.fromtimestamp(now, UTC)
