"""Claude Code's stream-json log as text a person reads: what the assistant said, each tool
call on one line, each tool result on one line, and how the run ended.

A run's log holds one JSON event per line (plus taskherd's own `# taskherd` header line), which
is what the daemon needs but nobody can read at a glance. `task log`, `runs log` and the
status board show this rendering; `--raw` prints the events as they are.
"""

from __future__ import annotations

import json
from typing import Any

CLIP = 160  # characters of a tool call's input or a tool result shown on its one line
# The input field that says most about a call of each well-known tool.
TOOL_SUBJECT = {
    "Bash": "command",
    "Read": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
    "Glob": "pattern",
    "Grep": "pattern",
    "WebFetch": "url",
    "WebSearch": "query",
    "Task": "description",
}


def looks_like_stream_json(first_lines: list[str]) -> bool:
    """True when a log's first event is Claude Code's `system`/`init` (its stream-json)."""
    for line in first_lines:
        if line.startswith("# taskherd ") or not line.strip():
            continue
        event = _parse(line)
        return event is not None and event.get("type") == "system" and "session_id" in event
    return False


def render_line(line: str) -> list[str]:
    """The readable lines one log line stands for; [] for events not worth showing."""
    event = _parse(line)
    if event is None:
        return [line] if line.strip() else []
    kind = event.get("type")
    if kind == "assistant":
        return _assistant(event)
    if kind == "user":
        return _tool_results(event)
    if kind == "result":
        return [_result(event)]
    if kind == "system":
        return _system(event)
    return []  # stream_event deltas, rate_limit_event, …: the daemon's business


LONGEST_EVENT = 64 << 20  # a longer line is not held in memory to be rendered


class StreamRenderer:
    """Renders a log as it grows: bytes in, text out, a cut line kept for the next chunk."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # a cut line's pieces: joined once, when it ends
        self._pending_size = 0
        self._dropping = False

    def feed(self, chunk: bytes) -> str:
        if self._dropping:  # the rest of a line too long to show
            if b"\n" not in chunk:
                return ""
            chunk, self._dropping = chunk[chunk.index(b"\n") + 1:], False
        if b"\n" not in chunk:
            self._pending_size += len(chunk)
            if self._pending_size > LONGEST_EVENT:  # shown as cut, not held whole
                self._pending, self._pending_size, self._dropping = [], 0, True
                return f"[… an event longer than {LONGEST_EVENT >> 20} MiB, not shown]\n"
            self._pending.append(chunk)
            return ""
        lines = (b"".join(self._pending) + chunk).split(b"\n")
        last = lines.pop()
        self._pending, self._pending_size = [last], len(last)
        return "".join(_render_bytes(raw) for raw in lines)

    def finish(self) -> str:
        rest, self._pending, self._pending_size = b"".join(self._pending), [], 0
        return _render_bytes(rest) if rest else ""


def render_text(data: bytes) -> str:
    renderer = StreamRenderer()
    return renderer.feed(data) + renderer.finish()


def _render_bytes(raw: bytes) -> str:
    return "".join(f"{line}\n" for line in render_line(raw.decode("utf-8", "replace")))


def _assistant(event: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for item in _content(event):
        if item.get("type") == "text" and str(item.get("text", "")).strip():
            lines.extend(str(item["text"]).strip().splitlines())
        elif item.get("type") == "tool_use":
            lines.append(f"→ {item.get('name', 'tool')}: {_subject(item)}")
    return lines


def _tool_results(event: dict[str, Any]) -> list[str]:
    lines = []
    for item in _content(event):
        if item.get("type") != "tool_result":
            continue
        text = _flatten(item.get("content"))
        mark = "← error: " if item.get("is_error") else "← "
        lines.append(mark + (_one_line(text) or "(no output)"))
    return lines


def _result(event: dict[str, Any]) -> str:
    parts = ["error" if event.get("is_error") else "done"]
    if event.get("num_turns") is not None:
        parts.append(f"{event['num_turns']} turns")
    if isinstance(event.get("total_cost_usd"), int | float):
        parts.append(f"${event['total_cost_usd']:.4f}")
    text = _one_line(str(event.get("result") or event.get("subtype") or ""))
    return f"= result ({', '.join(parts)}): {text}"


def _system(event: dict[str, Any]) -> list[str]:
    if event.get("subtype") == "init":
        model = f", model {event['model']}" if event.get("model") else ""
        return [f"[session {event.get('session_id', '?')}{model}]"]
    if event.get("subtype") == "api_retry":
        status = event.get("error_status") or event.get("error") or "error"
        return [f"[API retry {event.get('attempt', '?')}/{event.get('max_retries', '?')}: "
                f"{status}]"]
    return []


def _subject(tool_use: dict[str, Any]) -> str:
    arguments = tool_use.get("input")
    if not isinstance(arguments, dict):
        return ""
    key = TOOL_SUBJECT.get(str(tool_use.get("name")))
    if key and isinstance(arguments.get(key), str):
        return _one_line(arguments[key])
    return _one_line(json.dumps(arguments, ensure_ascii=False))


def _content(event: dict[str, Any]) -> list[dict[str, Any]]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [item for item in content if isinstance(item, dict)] if isinstance(content, list) else []


def _flatten(content: Any) -> str:
    """A tool result's content: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= CLIP else flat[: CLIP - 1] + "…"


def _parse(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None
