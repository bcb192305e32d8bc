"""A run's log as readers see it: capped by its shim, read from its end or followed as it grows.

A capped log (a role's ``max_log_bytes``, see `taskherd.host.shim`) is its header line and the
first `head` bytes of output, a cut line of fixed size saying how many bytes were left out,
and the latest output. Its header names `head` (``"log_head"``). The shim rewrites the log in
place when it cuts, so a reader that follows one counts in *output offsets* (bytes the agent
wrote, cut ones included) and reads the cut line before and after each read: a read that
saw it change, or say "cutting", is thrown away and made again (`LogCursor`).

`tail` reads a log's last lines from a bounded window at its end: a line longer than
`max_line` is shown by its end behind a marker, so a log without newlines costs what its
window costs, however large the file.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import BinaryIO

HEADER_PREFIX = b"# taskherd "
HEADER_READ = 1 << 16  # a header line is at most this long (argv items are abbreviated)
# As the shim writes it (taskherd/host/shim.py: CUT_LINE_SIZE, CUT_LINE_PREFIX, CUTTING).
CUT_LINE_SIZE = 128
CUT_LINE_PREFIX = b"\n# taskherd cut "
CUTTING = -1
TAIL_ROOM = 4  # (taskherd/host/shim.py: TAIL_ROOM) the room past the head, in kept tails
TAIL_CHUNK = 1 << 16
MAX_LINE = 1 << 14  # `tail` shows a longer line by its last MAX_LINE bytes
TAIL_WINDOW = 8 << 20  # `tail` reads at most this much of a log's end, whatever it is asked
READ_TRIES = 4  # reads that met a cut under way, before one gives up until its next call
STALE_CUT = 5.0  # a log left "cutting" this long was left so by a shim that died


def layout(max_log_bytes: int, header_size: int) -> tuple[int, int]:
    """(head, tail) for a log capped at `max_log_bytes`: a quarter for the head (never less
    than the header line), the rest for the cut line and TAIL_ROOM tails, of which the shim
    keeps one when it cuts. The file never exceeds head + cut line + TAIL_ROOM x tail."""
    head = max(max_log_bytes // 4, header_size + 256)
    tail = max((max_log_bytes - head - CUT_LINE_SIZE) // TAIL_ROOM, 4096)
    return head, tail


def parse_cut_line(data: bytes) -> int | None:
    """Bytes cut, from the cut line's bytes; CUTTING while the shim moves the tail; None when
    `data` is no cut line (the log was never cut: these are the agent's own bytes)."""
    if len(data) != CUT_LINE_SIZE or not data.startswith(CUT_LINE_PREFIX):
        return None
    count = data[len(CUT_LINE_PREFIX):].split(b" ", 1)[0]
    if count == b"(cutting)":
        return CUTTING
    return int(count) if count.isdigit() else None


def log_head(fd: int) -> int | None:
    """The head size the log's header names; 0 for a log that is not capped; None while its
    first line is still unwritten (a run's log exists a moment before its shim writes it)."""
    first = os.pread(fd, HEADER_READ, 0)
    line, newline, _ = first.partition(b"\n")
    if not newline:
        return None if len(first) < HEADER_READ else 0
    if not line.startswith(HEADER_PREFIX):
        return 0
    try:
        head = json.loads(line[len(HEADER_PREFIX):]).get("log_head", 0)
    except (ValueError, AttributeError):
        return 0
    return head if isinstance(head, int) and head > 0 else 0


@dataclass(frozen=True)
class Chunk:
    """What one read found: the bytes, and how many bytes of output were passed over before
    them (cut by the shim, or skipped because the reader was too far behind)."""

    data: bytes = b""
    skipped: int = 0
    busy: bool = False  # the shim was cutting: nothing read this time, try again later


@dataclass(frozen=True)
class _View:
    """One consistent look at a log: its size, the head, and the bytes cut (None: never)."""

    size: int
    head: int
    cut: int | None

    @property
    def end(self) -> int:
        """The output offset of the log's end."""
        return self.size if self.cut is None else self.size - CUT_LINE_SIZE + self.cut

    def position(self, offset: int) -> tuple[int, int]:
        """(file position, bytes passed over) where output offset `offset` is read from."""
        if self.cut is None or offset <= self.head:
            return offset, 0  # from the head's end: the cut line is read, it says what was cut
        kept_from = self.head + self.cut  # the output offset the tail starts at
        if offset < kept_from:
            return self.head + CUT_LINE_SIZE, kept_from - offset
        return offset - self.cut + CUT_LINE_SIZE, 0

    def offset_at(self, position: int) -> int:
        """The output offset of file position `position` (one past the cut line at least)."""
        if self.cut is None or position <= self.head:
            return position
        return max(position, self.head + CUT_LINE_SIZE) - CUT_LINE_SIZE + self.cut


class LogCursor:
    """Reads a log as it grows, through the shim's cuts, from an output offset."""

    def __init__(self, offset: int = 0):
        self.offset = offset  # bytes of output read or passed over so far
        self._head: int | None = None  # from the header, once read

    def read(self, log_file: BinaryIO, size: int, behind: float = float("inf")) -> Chunk:
        """At most `size` bytes from the offset on. More than `behind` bytes behind the end,
        it jumps to the last `size` bytes (and says how many it passed over)."""
        fd = log_file.fileno()
        for _ in range(READ_TRIES):
            view = self._view(fd)
            if view is None:
                continue
            start = self.offset
            if view.end < start:  # shorter than what was read: rewritten by someone else
                start = max(view.end - size, 0)
            elif view.end - start > behind:
                start = view.end - size
            position, cut = view.position(start)
            stop = min(view.size, position + size)
            if view.cut is not None and position <= view.head < stop:
                stop = max(stop, view.head + CUT_LINE_SIZE)  # the cut line, whole
            data = os.pread(fd, stop - position, position) if stop > position else b""
            if not _same_cut(self._view(fd, size=False), view):
                continue  # cut meanwhile: the bytes may be from before and after
            skipped = start - self.offset + cut if start >= self.offset else 0
            self.offset = view.offset_at(position + len(data))
            return Chunk(data, max(skipped, 0))
        return Chunk(busy=True)

    @classmethod
    def at(cls, log_file: BinaryIO, position: int) -> LogCursor:
        """A cursor at file position `position` (where `tail` left the file)."""
        cursor = cls(position)
        for _ in range(READ_TRIES):
            view = cursor._view(log_file.fileno())
            if view is not None:
                cursor.offset = view.offset_at(position)
                break
        return cursor

    def end(self, log_file: BinaryIO) -> int | None:
        """The output offset of the log's end now (None: the shim is cutting it)."""
        view = self._view(log_file.fileno())
        return None if view is None else view.end

    def _view(self, fd: int, size: bool = True) -> _View | None:
        head = self._head
        if head is None:
            head = self._head = log_head(fd)  # kept once known: None is asked again
        file_size = os.fstat(fd).st_size if size else -1
        cut = None
        if head:
            cut = parse_cut_line(os.pread(fd, CUT_LINE_SIZE, head))
            if cut == CUTTING:
                if time.time() - os.fstat(fd).st_mtime < STALE_CUT:
                    return None
                cut = None  # its shim died cutting it (kill -9): read as it lies
        return _View(file_size, head or 0, cut)


def _same_cut(view: _View | None, other: _View) -> bool:
    return view is not None and view.cut == other.cut


def tail(log_file: BinaryIO, lines: int, max_line: int = MAX_LINE,
         window: int = TAIL_WINDOW) -> bytes:
    """The last `lines` lines of the log, read backwards from its end in one bounded window
    (at most `lines` x `max_line` bytes, and `window`): linear in what it returns, never in
    the file's size. A line longer than `max_line` is shown by its last `max_line` bytes
    behind a marker saying how much of it was cut (or that its start lay beyond the window).
    The file is left at its end, where a follow goes on."""
    try:
        fd = log_file.fileno()
    except (OSError, AttributeError):  # in memory (io.BytesIO): nothing cuts it meanwhile
        return _tail(log_file, lines, max_line, window)
    cursor = LogCursor()
    for _ in range(READ_TRIES):
        before = cursor._view(fd, size=False)
        text = _tail(log_file, lines, max_line, window)
        if before is not None and _same_cut(cursor._view(fd, size=False), before):
            break  # not cut by the shim meanwhile
    return text


def _tail(log_file: BinaryIO, lines: int, max_line: int, window: int) -> bytes:
    end = log_file.seek(0, os.SEEK_END)
    if lines <= 0 or end == 0:
        return b""
    budget = min(end, window, lines * (max_line + 1) + 1)
    chunks: list[bytes] = []
    newlines, position = 0, end
    while position > end - budget and newlines <= lines:
        step = min(TAIL_CHUNK, position - (end - budget))
        position -= step
        chunk = _read_at(log_file, step, position)
        chunks.append(chunk)
        newlines += chunk.count(b"\n")
    data = b"".join(reversed(chunks))  # joined once: linear, however many chunks
    first = _last_lines_start(data, lines)
    # A window that stops inside a line shows that line's end only, and says so.
    cut_first = first == 0 and position > 0 and _read_at(log_file, 1, position - 1) != b"\n"
    log_file.seek(end)
    return b"".join(_shown(line, max_line, cut_first and index == 0)
                    for index, line in enumerate(data[first:].splitlines(keepends=True)))


def _read_at(log_file: BinaryIO, size: int, position: int) -> bytes:
    log_file.seek(position)
    return log_file.read(size)


def _last_lines_start(data: bytes, lines: int) -> int:
    """Where the last `lines` lines of `data` start (a last line may lack its newline)."""
    cut = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(lines):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            return 0
    return cut + 1


def _shown(line: bytes, max_line: int, started_before: bool) -> bytes:
    body = line[:-1] if line.endswith(b"\n") else line
    if len(body) <= max_line and not started_before:
        return line
    kept = body[-max_line:]
    cut = "its start lies before the part read" if started_before else \
        f"{len(body) - len(kept)} bytes cut"
    return f"[… line cut: {cut}] ".encode() + kept + line[len(body):]
