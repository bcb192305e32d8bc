"""What the supervisor reads of an agent's output: a bounded share of it each second, whatever
the agent writes.

The runtime's reader (loops, questions, rate limits, the result) costs the daemon's loop a few
microseconds a line. An agent that writes faster than a look may read is read from its latest
output: the look jumps to the end's last `allowance` bytes and lines, and the reader is told
of the gap so a line cut by the jump is not taken for a whole one. A line longer than
LONGEST_LINE is dropped the same way, so no reader holds a runaway line in memory. The last
look, at the run's end, reads the final window whole: Claude Code's result is its last line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from taskherd.host.logfile import LogCursor

READ_BYTES_PER_SECOND = 1 << 20
READ_LINES_PER_SECOND = 1000  # about 3 ms of a reader's time
BURST_SECONDS = 4.0  # the most a look reads is this many seconds' share (after a quiet spell)
LEAST_SECONDS = 0.25  # looks closer together than this read as if this far apart
LONGEST_LINE = 4 << 20  # longer lines are dropped: a Claude Code result is far shorter
FINAL_BYTES = LONGEST_LINE  # the run's end: its last line read whole, up to this size
FINAL_LINES = 2000


@dataclass(frozen=True)
class Fresh:
    """New output to feed to the run's reader."""

    data: bytes
    passed_over: int = 0  # bytes of output not read: cut by the shim, or skipped to catch up
    # The reader forgets the line it holds before taking `data`: what followed it was not read.
    gap: bool = False


class OutputFeed:
    """One log read as it grows, within its share of the daemon's time."""

    def __init__(self, path: Path | str):
        self.path = path
        self.cursor = LogCursor()
        self.read_at: float | None = None
        self._seen: tuple[int, int] | None = None  # size and mtime at the last read
        self._line = 0  # bytes of the line being read, so far
        self._dropping = False  # within a line that is not fed: until its newline

    @property
    def offset(self) -> int:
        """Bytes of output read or passed over."""
        return self.cursor.offset

    def read(self, now: float, final: bool = False) -> tuple[Fresh | None, os.stat_result | None]:
        """New output within this look's share (all of the end's window when `final`), and the
        log's stat; (None, stat) when nothing new, (None, None) without a log."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None, None
        if (info.st_size, info.st_mtime_ns) == self._seen:
            return None, info  # one stat, no open, for the many runs that wrote nothing
        if final:
            size, lines = FINAL_BYTES, FINAL_LINES
        else:
            since = BURST_SECONDS if self.read_at is None else now - self.read_at
            share = min(max(since, LEAST_SECONDS), BURST_SECONDS)
            size, lines = int(READ_BYTES_PER_SECOND * share), int(READ_LINES_PER_SECOND * share)
        try:
            with open(self.path, "rb") as log_file:
                chunk = self.cursor.read(log_file, size, behind=size)
        except FileNotFoundError:
            return None, None
        if chunk.busy:
            return Fresh(b"", 0), info  # the shim is cutting: it writes, so the agent does
        self._seen, self.read_at = (info.st_size, info.st_mtime_ns), now
        if not chunk.data and not chunk.skipped:
            return None, info
        data, passed_over = chunk.data, chunk.skipped
        start = _last_lines_start(data, lines)
        gap = passed_over > 0 or start > 0
        if gap:
            # Trimmed to its last lines, it starts at a line; after a jump, within one.
            self._dropping, self._line = start == 0, 0
        data, dropped_line = self._whole_lines(data[start:])
        return Fresh(data, passed_over + start, gap or dropped_line), info

    def _whole_lines(self, data: bytes) -> tuple[bytes, bool]:
        """`data` less a line that began before a gap or grew past LONGEST_LINE (dropped to
        its end); and whether the reader must forget the part of such a line it holds."""
        if self._dropping:
            newline = data.find(b"\n")
            if newline < 0:
                return b"", False
            data, self._dropping = data[newline + 1:], False
        last = data.rfind(b"\n")
        self._line = self._line + len(data) if last < 0 else len(data) - last - 1
        if self._line > LONGEST_LINE:
            self._dropping, self._line = True, 0
            return data[:last + 1], last < 0  # whole lines up to the long one are still read
        return data, False


def _last_lines_start(data: bytes, lines: int) -> int:
    """Where the last `lines` whole lines of `data` (and what follows them) start."""
    cut = data.rfind(b"\n")
    for _ in range(lines):
        if cut < 0:
            return 0
        cut = data.rfind(b"\n", 0, cut)
    return cut + 1

