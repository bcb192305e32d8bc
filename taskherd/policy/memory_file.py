"""A role's short-term memory: one markdown file per role with four sections (mistakes,
learnings, feedback, session log) that every run of the role reads and writes.

Kept within its line cap after each run by `trim`: the oldest entries of the largest section
move out (into long-term memory, where `taskherd memory search` finds them). Pure: text in,
text and the moved entries out; the caller stores the moved entries before it rewrites the
file, so a line is never lost, at worst kept twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from taskherd.model.record import Record

SECTIONS = ("Mistakes", "Learnings", "Feedback", "Session log")
DEFAULT_LINES = 80
_HEADING = re.compile(r"^##\s+(?P<title>.+?)\s*$")


def template(role: str) -> str:
    intro = ("Read this before you act. Add one line per entry, newest last; old entries move "
             "to long-term memory (`taskherd memory search`) when the file grows too long.")
    parts = [f"# Memory of role {role}", "", intro, ""]
    for title in SECTIONS:
        parts += [f"## {title}", ""]
    return "\n".join(parts)


class Entry(Record):
    section: str
    text: str  # one line, or a line with its indented continuation lines

    @property
    def lines(self) -> int:
        return self.text.count("\n") + 1


@dataclass
class _Section:
    title: str
    heading: str
    entries: list[str] = field(default_factory=list)  # each a line (plus continuations)
    blank_lines: int = 0


class Trimmed(Record):
    text: str
    moved: tuple[Entry, ...]


def trim(text: str, cap: int = DEFAULT_LINES) -> Trimmed:
    """`text` within `cap` lines: the oldest entries of the section with the most lines move
    out, one at a time, until it fits (or only headings are left). Untouched if it fits."""
    if _line_count(text) <= cap:
        return Trimmed(text, ())
    preamble, sections = _parse(text)
    moved: list[Entry] = []
    while _rendered_lines(preamble, sections) > cap:
        largest = max(sections, key=lambda s: sum(e.count("\n") + 1 for e in s.entries),
                      default=None)
        if largest is None or not largest.entries:
            break
        moved.append(Entry(largest.title, largest.entries.pop(0)))
    return Trimmed(_render(preamble, sections), tuple(moved))


def _parse(text: str) -> tuple[list[str], list[_Section]]:
    preamble: list[str] = []
    sections: list[_Section] = []
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            sections.append(_Section(heading.group("title"), line))
        elif not sections:
            preamble.append(line)
        elif not line.strip():
            sections[-1].blank_lines += 1
        elif line[:1] in " \t" and sections[-1].entries:
            sections[-1].entries[-1] += "\n" + line  # a continuation of the entry above
        else:
            sections[-1].entries.append(line)
    return preamble, sections


def _render(preamble: list[str], sections: list[_Section]) -> str:
    lines = list(preamble)
    for section in sections:
        # One blank line after a heading and after its entries; other blank lines go, as
        # they would only push entries out.
        lines += [section.heading, *section.entries, ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _rendered_lines(preamble: list[str], sections: list[_Section]) -> int:
    return _line_count(_render(preamble, sections))


def _line_count(text: str) -> int:
    return len(text.splitlines())
