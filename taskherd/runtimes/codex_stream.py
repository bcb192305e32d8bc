"""Reading `codex exec --json` output (JSON Lines) as it is written to a run's log file.

Field names are those of Codex CLI 0.169 (tests/e2e drive the real CLI), one object a line:

- ``{"type":"thread.started","thread_id":"…"}``: the session id (`codex exec resume ID`), a
  UUID; anything else is ignored (runtimes/sessions.py);
- ``turn.started``; ``item.started`` / ``item.updated`` / ``item.completed`` with an ``item``
  whose ``type`` is ``agent_message`` (``text``), ``reasoning``, ``command_execution``,
  ``file_change``, ``mcp_tool_call``, ``web_search``, ``todo_list`` or ``error`` (a warning);
- ``{"type":"turn.completed","usage":{"input_tokens":…,"cached_input_tokens":…,
  "output_tokens":…,"reasoning_output_tokens":…}}``: tokens only, never a price;
- ``{"type":"error","message":…}`` then ``{"type":"turn.failed","error":{"message":…}}``:
  how a run that could not go on ends. A plan's usage limit reads "You’ve hit your usage
  limit. … try again at 12:39 PM." (or "at Nov 25th, 2026 6:12 PM"), in the CLI's zone.

Every event is activity. The last agent message is the run's final answer (its
`TASK_COMPLETE:` line wins as the summary). Lines that are not JSON objects (the daemon's `#`
header, the CLI's stderr warnings) are counted and skipped. Speed: most lines are `item.*`
events; only an agent message's, or an error's, JSON is parsed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, tzinfo

from taskherd.runtimes.claude_stream import summary_of
from taskherd.runtimes.ratelimit import RateLimitSignal, detect_rate_limit
from taskherd.runtimes.sessions import valid_session_id


@dataclass
class CodexUsage:
    """Tokens summed over the run's turns; `input_tokens` includes the cached ones and
    `output_tokens` the reasoning ones, as the Responses API counts them."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_output_tokens: int = 0
    turns: int = 0

    def add(self, usage: dict) -> None:
        self.input_tokens += _count(usage.get("input_tokens"))
        self.cached_input_tokens += _count(usage.get("cached_input_tokens"))
        self.output_tokens += _count(usage.get("output_tokens"))
        self.reasoning_output_tokens += _count(usage.get("reasoning_output_tokens"))
        self.turns += 1


@dataclass
class CodexStreamState:
    """What the stream told so far about the run."""

    thread_id: str | None = None
    # The first thread id the stream named that is none (runtimes/sessions.py): never resumed.
    ignored_thread_id: str | None = None
    last_message: str | None = None  # the latest agent message's text
    completed_summary: str | None = None  # the latest TASK_COMPLETE line's text
    usage: CodexUsage = field(default_factory=CodexUsage)
    turn_completed: bool = False
    turn_failed: bool = False
    errors: list[str] = field(default_factory=list)  # `error` / `turn.failed` messages
    rate_limit: RateLimitSignal | None = None
    events_seen: int = 0
    lines_skipped: int = 0

    @property
    def error(self) -> str | None:
        return self.errors[-1] if self.errors else None


# `item.*` lines are the bulk of a stream; only these item kinds are parsed.
_ITEM_PREFIX = b'{"type":"item.'
_PARSED_ITEMS = (b'"type":"agent_message"',)


class CodexStreamReader:
    """Feed it the log's bytes as they come; it keeps what they tell in `state` and returns
    how many events the complete lines held (each one is activity)."""

    def __init__(self, extra_rate_limit_patterns: tuple[str, ...] = (),
                 clock_zone: tzinfo | None = None):
        self.extra_rate_limit_patterns = tuple(extra_rate_limit_patterns)
        self.clock_zone = clock_zone  # reads "try again at 12:39 PM"
        self.state = CodexStreamState()
        self._pending: list[bytes] = []

    def feed(self, chunk: bytes, now: datetime) -> int:
        if b"\n" not in chunk:
            self._pending.append(chunk)  # collected, not concatenated piece by piece
            return 0
        if self._pending:
            chunk = b"".join(self._pending) + chunk
        lines = chunk.split(b"\n")
        self._pending = [lines.pop()]
        return self._read_lines(lines, now)

    def gap(self) -> None:
        """Output was passed over: the line begun so far is not whole, and is forgotten."""
        self._pending = []

    def finish(self, now: datetime) -> int:
        last, self._pending = b"".join(self._pending), []
        return self._read_lines([last], now) if last else 0

    def _read_lines(self, lines: list[bytes], now: datetime) -> int:
        state, seen = self.state, 0
        for line in lines:
            line = line.strip()
            if not (line.startswith(b"{") and line.endswith(b"}")):
                if line:
                    state.lines_skipped += 1
                continue
            if line.startswith(_ITEM_PREFIX) and not any(k in line for k in _PARSED_ITEMS):
                seen += 1  # a tool call, reasoning, a file change: activity, nothing more
                continue
            data = _parse_object(line)
            if data is None or not isinstance(data.get("type"), str):
                state.lines_skipped += 1
                continue
            seen += 1
            self._event(data, now)
        state.events_seen += seen
        return seen

    def _event(self, data: dict, now: datetime) -> None:
        kind, state = data["type"], self.state
        if kind == "thread.started":
            self._note_thread(data.get("thread_id"))
        elif kind == "item.completed":
            item = data.get("item")
            item = item if isinstance(item, dict) else {}
            if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                state.last_message = item["text"]
                summary, declared = summary_of(item["text"])
                if declared:
                    state.completed_summary = summary
        elif kind == "turn.completed":
            state.turn_completed = True
            usage = data.get("usage")
            state.usage.add(usage if isinstance(usage, dict) else {})
        elif kind in ("error", "turn.failed"):
            error = data.get("error")
            error = error if isinstance(error, dict) else data
            message = _text(error.get("message")) or kind
            state.turn_failed = state.turn_failed or kind == "turn.failed"
            if not state.errors or state.errors[-1] != message:
                state.errors.append(message)
            self._note_rate_limit(detect_rate_limit(
                message, now, self.extra_rate_limit_patterns, self.clock_zone))

    def _note_thread(self, value: object) -> None:
        state = self.state
        if value is None:
            return
        thread_id = valid_session_id(value)
        if thread_id is None:
            state.ignored_thread_id = state.ignored_thread_id or str(value)
        else:
            state.thread_id = state.thread_id or thread_id

    def _note_rate_limit(self, signal: RateLimitSignal | None) -> None:
        # Keep the first signal, unless a later one knows the reset time.
        state = self.state
        if signal is not None and (state.rate_limit is None or (
                state.rate_limit.reset_at is None and signal.reset_at is not None)):
            state.rate_limit = signal


def _parse_object(line: bytes) -> dict | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
