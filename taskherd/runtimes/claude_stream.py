"""Reading Claude Code's `--output-format stream-json --verbose` output as it
is written to a run's log file.

The supervisor sends the agent's stdout+stderr to a file, so the reader is
fed whatever bytes the file grew by; a line cut in the middle waits for its
end. Every event is activity; three kinds matter more:

- ``system``/``init``: the session id (a UUID; anything else is ignored, see
  runtimes/sessions.py), before any work is done;
- ``system``/``api_retry`` with ``error_status: 429``: the CLI is being rate
  limited and is retrying on its own, possibly for minutes, so the daemon can
  pause the runtime now rather than when the run ends;
- ``result``: how the run ended (outcome, summary, cost, tokens, turns).

Field names are those of claude-code 2.1.197 (tests/e2e/data holds captured
runs), e.g. ``{"type":"system","subtype":"api_retry","attempt":1,
"max_retries":10,"retry_delay_ms":5000,"error_status":429,"error":"rate_limit"}``
and a failed run's ``{"type":"result","subtype":"success","is_error":true,
"api_error_status":429,"result":"API Error: Request rejected (429) · …"}``
(yes: `subtype` stays "success" on API errors; `is_error` is what counts).

Lines that are not JSON objects (the daemon's `#` header, stray stderr) are
counted and skipped. Speed: the bulk of a stream is `assistant`, `user` and
`stream_event` lines, often kilobytes each; their type is read from the line's
first bytes and their JSON is only parsed if someone asks for `.data`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import IO

from taskherd.runtimes.ratelimit import RateLimitSignal, detect_rate_limit
from taskherd.runtimes.sessions import valid_session_id

# -- events -----------------------------------------------------------------


class ClaudeEvent:
    """One line of the stream. `data` is the parsed JSON object."""

    __slots__ = ("_data", "_line", "type")

    def __init__(self, type: str, line: bytes | None = None, data: dict | None = None):
        self.type = type
        self._line = line
        self._data = data

    @property
    def data(self) -> dict:
        if self._data is None:
            self._data = _parse_object(self._line) or {"type": self.type}
            self._line = None
        return self._data

    @property
    def subtype(self) -> str | None:
        return self.data.get("subtype")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(type={self.type!r})"


class SessionStarted(ClaudeEvent):
    """`system`/`init`: the CLI is up; carries the session id and model."""

    __slots__ = ()

    @property
    def session_id(self) -> str | None:
        return valid_session_id(self.data.get("session_id"))

    @property
    def model(self) -> str | None:
        return self.data.get("model")


class ApiRetry(ClaudeEvent):
    """`system`/`api_retry`: an API call failed and the CLI will retry it."""

    __slots__ = ()

    @property
    def error_status(self) -> int | None:
        return self.data.get("error_status")

    @property
    def attempt(self) -> int | None:
        return self.data.get("attempt")

    @property
    def retry_delay_ms(self) -> int | None:
        return self.data.get("retry_delay_ms")

    @property
    def is_rate_limit(self) -> bool:
        return self.error_status == 429 or self.data.get("error") == "rate_limit"


class ResultEvent(ClaudeEvent):
    """`result`: the run's end; `run_result` is its reading."""

    __slots__ = ("run_result",)

    def __init__(self, type: str, data: dict, run_result: ClaudeRunResult):
        super().__init__(type, data=data)
        self.run_result = run_result


# -- the result ---------------------------------------------------------------

# `TASK_COMPLETE: <summary>` on a line of its own, tolerating the markdown
# emphasis models like to add (`**TASK_COMPLETE:** done`).
_TASK_COMPLETE_LINE = re.compile(
    r"^[\s*_`>-]*TASK_COMPLETE[*_`]*:[*_`]*[ \t]*(?P<summary>.*?)[\s*_`]*$", re.MULTILINE
)


@dataclass(frozen=True)
class ClaudeRunResult:
    """What the `result` event says, read into outcome hints."""

    is_error: bool
    subtype: str | None
    result_text: str
    summary: str  # the TASK_COMPLETE line's text if there is one, else result_text
    declared_complete: bool  # a TASK_COMPLETE line was present
    total_cost_usd: float | None
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    num_turns: int | None
    session_id: str | None
    duration_ms: int | None
    api_error_status: int | None
    terminal_reason: str | None
    rate_limit: RateLimitSignal | None

    @property
    def succeeded(self) -> bool:
        return not self.is_error

    @classmethod
    def from_event(
        cls, data: dict, now: datetime, extra_patterns: tuple[str, ...] = (),
        clock_zone: tzinfo | None = None,
    ) -> ClaudeRunResult:
        result, usage = data.get("result"), data.get("usage")
        text = result if isinstance(result, str) else ""
        summary, declared = summary_of(text)
        usage = usage if isinstance(usage, dict) else {}
        is_error = bool(data.get("is_error")) or (data.get("subtype") or "").startswith("error")
        return cls(
            is_error=is_error,
            subtype=data.get("subtype"),
            result_text=text,
            summary=summary,
            declared_complete=declared,
            total_cost_usd=_number(data.get("total_cost_usd")),
            input_tokens=_count(usage.get("input_tokens")),
            output_tokens=_count(usage.get("output_tokens")),
            cache_creation_input_tokens=_count(usage.get("cache_creation_input_tokens")),
            cache_read_input_tokens=_count(usage.get("cache_read_input_tokens")),
            num_turns=data.get("num_turns"),
            session_id=valid_session_id(data.get("session_id")),
            duration_ms=data.get("duration_ms"),
            api_error_status=data.get("api_error_status"),
            terminal_reason=data.get("terminal_reason"),
            rate_limit=_result_rate_limit(data, text, is_error, now, extra_patterns, clock_zone),
        )


def summary_of(text: str) -> tuple[str, bool]:
    """(summary, declared): the last `TASK_COMPLETE:` line's text wins over
    the whole text, since agents often explain at length before it."""
    last = None
    for match in _TASK_COMPLETE_LINE.finditer(text):
        last = match
    if last is not None:
        return last.group("summary").strip(), True
    return text.strip(), False


def _result_rate_limit(
    data: dict, text: str, is_error: bool, now: datetime, extra_patterns: tuple[str, ...],
    clock_zone: tzinfo | None,
) -> RateLimitSignal | None:
    # Only a failed result is searched: a run that succeeded while talking
    # about "rate limits" (it may have written a limiter) was not limited.
    if not is_error:
        return None
    signal = detect_rate_limit(text, now, extra_patterns, clock_zone)
    if signal is None and data.get("api_error_status") == 429:
        signal = RateLimitSignal(None, "result_api_error_status_429", text[:200])
    return signal


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# -- the reader ---------------------------------------------------------------

# Lines whose JSON is parsed only on demand: the high-volume kinds. JSON.stringify
# writes keys in insertion order and the CLI puts `type` first, so the type can
# be read from the prefix; anything else is parsed at once.
_LAZY_PREFIXES = {
    b'{"type":"assistant"': "assistant",
    b'{"type":"user"': "user",
    b'{"type":"stream_event"': "stream_event",
}
_PREFIX_LENGTHS = sorted({len(p) for p in _LAZY_PREFIXES})


class ClaudeStreamReader:
    """Feed it the log's bytes as they come; it returns the events of every
    complete line and keeps what they tell about the run.

        reader = ClaudeStreamReader()
        for event in reader.feed(chunk, now=now):
            ...                       # every event is activity
        reader.session_id, reader.rate_limit, reader.result
    """

    def __init__(self, extra_rate_limit_patterns: tuple[str, ...] = (),
                 clock_zone: tzinfo | None = None):
        self.extra_rate_limit_patterns = tuple(extra_rate_limit_patterns)
        self.clock_zone = clock_zone  # reads "resets 3am"; None: the zone of `now`
        self.events_seen = 0
        self.lines_skipped = 0
        self.session_id: str | None = None
        # The first session id the stream named that is none (runtimes/sessions.py): never
        # resumed, only told in the daemon's log.
        self.ignored_session_id: str | None = None
        self.rate_limit: RateLimitSignal | None = None  # the first one seen
        self.result: ClaudeRunResult | None = None
        # The last TASK_COMPLETE summary an assistant message gave: work done before a limit
        # or an error ended the run is still done.
        self.completed_summary: str | None = None
        self._pending: list[bytes] = []

    def feed(self, chunk: bytes | str, now: datetime | None = None) -> list[ClaudeEvent]:
        """Events of the complete lines in `pending + chunk`. `now` dates a
        rate-limit reset read from the result ("resets 2pm"); default: the
        wall clock."""
        if isinstance(chunk, str):
            chunk = chunk.encode()
        if b"\n" not in chunk:
            # Collected, not concatenated: a multi-megabyte tool result written
            # in small pieces would otherwise be copied once per piece.
            self._pending.append(chunk)
            return []
        if self._pending:
            chunk = b"".join(self._pending) + chunk
        lines = chunk.split(b"\n")
        self._pending = [lines.pop()]
        return self._events_of(lines, now)

    def gap(self) -> None:
        """Output was passed over: the line begun so far is not whole, and is forgotten."""
        self._pending = []

    def finish(self, now: datetime | None = None) -> list[ClaudeEvent]:
        """The last line even without its newline (the process has exited)."""
        last, self._pending = b"".join(self._pending), []
        return self._events_of([last], now) if last else []

    def read_available(self, log: IO[bytes], now: datetime | None = None) -> list[ClaudeEvent]:
        """Feed whatever `log` (opened 'rb', kept open between calls) grew by."""
        return self.feed(log.read(), now)

    def _events_of(self, lines: list[bytes], now: datetime | None) -> list[ClaudeEvent]:
        events = []
        for line in lines:
            event = self._event_of(line, now)
            if event is None:
                if line.strip():
                    self.lines_skipped += 1
                continue
            events.append(event)
        self.events_seen += len(events)
        return events

    def _event_of(self, line: bytes, now: datetime | None) -> ClaudeEvent | None:
        line = line.strip()
        if not line.startswith(b"{") or not line.endswith(b"}"):
            return None
        for length in _PREFIX_LENGTHS:
            lazy_type = _LAZY_PREFIXES.get(line[:length])
            if lazy_type is not None:
                event = ClaudeEvent(lazy_type, line=line)
                if lazy_type == "assistant" and b"TASK_COMPLETE" in line:
                    self._note_completion(event)
                return event
        data = _parse_object(line)
        if data is None or not isinstance(data.get("type"), str):
            return None
        return self._typed_event(data, now)

    def _typed_event(self, data: dict, now: datetime | None) -> ClaudeEvent:
        kind, subtype = data["type"], data.get("subtype")
        if kind == "system" and subtype == "init":
            self._note_session(data.get("session_id"))
            return SessionStarted(kind, data=data)
        if kind == "system" and subtype == "api_retry":
            event = ApiRetry(kind, data=data)
            if event.is_rate_limit:
                self._note_rate_limit(RateLimitSignal(None, "api_retry_429"))
            return event
        if kind == "result":
            result = ClaudeRunResult.from_event(
                data, now or datetime.now(UTC), self.extra_rate_limit_patterns, self.clock_zone
            )
            self.result = result
            self._note_session(data.get("session_id"))
            if result.rate_limit is not None:
                self._note_rate_limit(result.rate_limit)
            return ResultEvent(kind, data, result)
        other = ClaudeEvent(kind, data=data)
        if kind == "assistant":
            self._note_completion(other)
        return other

    def _note_completion(self, event: ClaudeEvent) -> None:
        message = event.data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "text":
                summary, declared = summary_of(str(block.get("text", "")))
                if declared:
                    self.completed_summary = summary

    def _note_session(self, value: object) -> None:
        if value is None:
            return
        session_id = valid_session_id(value)
        if session_id is None:
            self.ignored_session_id = self.ignored_session_id or str(value)
        else:
            self.session_id = self.session_id or session_id

    def _note_rate_limit(self, signal: RateLimitSignal) -> None:
        # Keep the first signal, unless a later one knows the reset time.
        if self.rate_limit is None or (
            self.rate_limit.reset_at is None and signal.reset_at is not None
        ):
            self.rate_limit = signal


def _parse_object(line: bytes | None) -> dict | None:
    if line is None:  # an event made from its data, never from a line
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
