"""Loops: an agent that keeps producing output without progress.

Such an agent never looks stale (it prints), so the stall rule never ends it: it burns its
whole timeout, and its tokens, printing the same thing. Two detectors, both pure (lines and
`now` in, the repeated block or None out) and both conservative, since ending honest work
is worse than a loop caught a little late:

- `RepeatedLines`: the same block of 1..MAX_BLOCK consecutive lines repeated `repeats` times
  in a row (the block and its copies back to back), all within `window` seconds. Lines are
  compared exactly (trailing spaces aside): a counter, a timestamp or a file name that
  changes makes two lines different, as it makes them progress.
- `RepeatedCalls`: for agents that report tool calls (Claude Code's stream-json), the same
  tool with the same input `repeats` times in a row.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

MAX_BLOCK = 20  # longest block of lines looked for
BLOCK_LIMIT = 2000  # characters of the repeated block kept as the task's error


class RepeatedLines:
    """Fed every output line as it is read; says when a block repeated `repeats` times."""

    def __init__(self, repeats: int, window: float, max_block: int = MAX_BLOCK):
        if repeats < 2:
            raise ValueError(f"repeats must be ≥ 2, got {repeats!r}")
        self.repeats = repeats
        self.window = window
        self.max_block = max_block
        self.found: str | None = None  # the repeated block, once seen
        # (line, time) of the latest lines: enough to hold max_block × repeats of them.
        self._lines: deque[tuple[str, float]] = deque(maxlen=max_block * repeats)
        # _streak[k]: how many lines in a row equal the line k before them.
        self._streak = [0] * (max_block + 1)

    def feed(self, line: str, now: float) -> str | None:
        """Take one line; the repeated block the first time the rule is met, else None."""
        if self.found is not None:
            return None  # the verdict is in; a runaway's megabytes need no more comparing
        text = line.rstrip()
        if not text.strip():
            return None  # blank lines neither make nor break a repeat
        lines, streak = self._lines, self._streak
        count = len(lines)
        for period in range(1, min(self.max_block, count) + 1):
            streak[period] = streak[period] + 1 if lines[-period][0] == text else 0
        lines.append((text, now))
        for period in range(1, self.max_block + 1):
            span = period * self.repeats
            if (streak[period] >= period * (self.repeats - 1) and len(lines) >= span
                    and now - lines[-span][1] <= self.window):
                block = "\n".join(text for text, _ in list(lines)[-period:])
                self.found = _shown(f"the same output repeated {self.repeats} times "
                                    "without progress", block)
                return self.found
        return None


class RepeatedCalls:
    """Fed every tool call an agent makes; says when one repeated `repeats` times in a row."""

    def __init__(self, repeats: int):
        if repeats < 2:
            raise ValueError(f"repeats must be ≥ 2, got {repeats!r}")
        self.repeats = repeats
        self.found: str | None = None
        self._last: str | None = None
        self._count = 0

    def feed(self, tool: str, tool_input: Any) -> str | None:
        if self.found is not None:
            return None
        key = f"{tool} {json.dumps(tool_input, sort_keys=True, default=str)}"
        self._count = self._count + 1 if key == self._last else 1
        self._last = key
        if self._count >= self.repeats:
            self.found = _shown(f"the same tool call repeated {self.repeats} times in a row",
                                key)
            return self.found
        return None


def _shown(what: str, block: str) -> str:
    if len(block) > BLOCK_LIMIT:
        block = block[:BLOCK_LIMIT] + "…"
    return f"{what}:\n{block}"
