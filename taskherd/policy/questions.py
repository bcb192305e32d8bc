"""Whether a quiet agent is waiting at a question: its last output read as a person would.

A headless agent that stops at "Continue? [y/N]" or at an approval prompt will wait there
forever; without this it would be killed as `stalled` after idle_timeout and charged a
strike for a question it had no one to ask. Pure: the recent output (text) in, the question
(for a person to read) or None out. The supervisor asks only once an agent has been idle for
its role's input_timeout, so a question printed in passing by a busy agent is never judged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

# Prompts that wait for a person, as the last lines of output show them. Case-insensitive.
KNOWN_PROMPTS = (
    r"\[(?:y/n|yes/no)\]",  # [y/N], [Y/n], [yes/no]
    r"\((?:y/n|yes/no)\)\s*[:?]?\s*$",  # (y/n)
    r"\bpress (?:enter|return|any key)\b",
    r"^\W*do you want (?:to|me to)\b",  # Claude Code: "Do you want to proceed?"
    # Codex: "Would you like to run the following command?"
    r"^\W*would you like (?:to|me to)\b.*\?",
    r"\b(?:allow|approve)\b[^\n]*\?\s*$",  # "Allow command?", "Approve this edit?"
    r"^\W*(?:continue|proceed|are you sure)\b[^\n]*\?\s*$",
    r"^\W*(?:❯|>)\s*1\.\s*yes\b",  # a numbered choice waiting for a key
    r"\b(?:password|passphrase)\b[^:\n]*:\s*$",
)
QUESTION_LINES = 6  # a question counts only among the last few non-blank lines
QUESTION_LIMIT = 500  # characters kept as the task's reason
# Terminal control sequences (colours, cursor moves) a TUI prompt is wrapped in.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\r")


@lru_cache(maxsize=64)
def _compiled(extra: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE | re.MULTILINE) for p in (*KNOWN_PROMPTS, *extra))


def question_in(recent_output: str, extra_patterns: Iterable[str] = ()) -> str | None:
    """The question the output ends with, from its first line that matches to the end (joined
    on one line, ANSI codes removed), or None when the last lines ask nothing."""
    text = _ANSI.sub("", recent_output)
    lines = [line.strip() for line in text.splitlines() if line.strip()][-QUESTION_LINES:]
    patterns = _compiled(tuple(extra_patterns))
    for index, line in enumerate(lines):
        if any(pattern.search(line) for pattern in patterns):
            question = " ".join(lines[index:])
            return question[:QUESTION_LIMIT]
    return None
