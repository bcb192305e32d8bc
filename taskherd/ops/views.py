"""Views of a live queue that more than one command draws: the status board and the run history.

They read the store and the run logs only (never the daemon's memory), so they show the same
thing whether the daemon is this process, another one, or gone. The board's snapshot is
`ops.board.live_board`; `taskherd status --watch` and `taskherd.demo` draw it here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from taskherd.model import Run, Task, TaskState
from taskherd.model.record import Record
from taskherd.store import Store

# The supervisor's first line of every run log (procs.HEADER_PREFIX); not imported from
# there, which would load psutil into every `taskherd status`.
LOG_HEADER_PREFIX = "# taskherd "

PLAIN_EVERY = 2.0  # at most one board per this many seconds into a pipe or a log
# Enough for the last line of any sane log, a Claude Code event included; never a whole log.
TAIL_BYTES = 64 * 1024
ARROW = " → "


class RunningAgent(Record):
    run_id: int
    pid: int | None
    role: str
    task_id: int
    title: str
    last_line: str
    progress: str | None = None  # the agent's own note (`taskherd heartbeat --progress`)


class Board(Record):
    """One snapshot of the queue: tasks by state, and the agents running now."""

    by_state: dict[str, int]
    running: tuple[RunningAgent, ...]

    @property
    def total(self) -> int:
        return sum(self.by_state.values())


def last_line(log_path: str | os.PathLike[str]) -> str:
    """The last non-empty line an agent wrote, skipping the supervisor's header line; a Claude
    Code event is shown as its text (what the assistant said, a tool call on one line)."""
    try:
        with open(log_path, "rb") as log_file:
            size = log_file.seek(0, os.SEEK_END)
            log_file.seek(max(0, size - TAIL_BYTES))
            tail = log_file.read().decode("utf-8", "replace")
    except OSError:
        return ""
    # The renderer is imported here: print_table, which every command's table uses, lives
    # in this module too.
    from taskherd.runtimes.claude_render import render_line

    for line in reversed(tail.splitlines()):
        if not line.strip() or line.startswith(LOG_HEADER_PREFIX):
            continue
        shown = render_line(line)
        if shown:
            return shown[-1].strip()
    return ""


def board_lines(board: Board, width: int | None = None) -> list[str]:
    """The board as lines of text, each clipped to `width` so a redraw never wraps."""
    if not width:
        import shutil  # only --watch draws the board: shutil loads zlib, bz2 and lzma with it

        width = shutil.get_terminal_size((100, 24)).columns
    counts = "  ".join(f"{state} {count}" for state, count in board.by_state.items() if count)
    lines = [f"queue   {counts or 'empty'}   (total {board.total})"]
    if not board.running:
        lines.append("running (none)")
    for agent in board.running:
        pid = agent.pid if agent.pid is not None else "-"
        said = f"[{agent.progress}] {agent.last_line}" if agent.progress else agent.last_line
        lines.append(f"running pid {pid:<7} {agent.role:<8} #{agent.task_id} "
                     f"{clip(agent.title, 28):<28} | {said}")
    # Truncate, never wrap: a wrapped line would break the in-place redraw's line count.
    return [line if len(line) <= width else line[: width - 1] + "…" for line in lines]


def outcome_path(runs: Sequence[Run], task: Task) -> str:
    """How a task got where it is, e.g. 'failed → failed → succeeded', or '(never ran)'."""
    steps = [run.outcome.value if run.outcome else "running" for run in runs]
    verdict = task.state.value
    if task.state in (TaskState.DEAD, TaskState.BLOCKED, TaskState.CANCELLED) and (
            not steps or steps[-1] != verdict):
        steps.append(verdict)  # the verdict on the task, not only on its last run
    return ARROW.join(steps) or "(never ran)"


def history_rows(store: Store, tasks: Sequence[Task]) -> list[list[Any]]:
    """One row per task: id, title, role, state, runs, outcome path, and its last word."""
    rows = []
    for task in tasks:
        runs = sorted(store.runs_of_task(task.id), key=lambda run: run.id)
        word = task.summary or "" if task.state is TaskState.COMPLETED else "; ".join(
            dict.fromkeys(w for w in (task.reason, task.last_error) if w))
        rows.append([task.id, clip(task.title, 30), task.role, task.state.value, len(runs),
                     outcome_path(runs, task), clip(word, 70)])
    return rows


HISTORY_HEADERS = ["id", "task", "role", "state", "runs", "outcomes", "summary / error"]


def clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


class Screen:
    """Redraws a board in place on a terminal; into a pipe or a log, prints it when it has
    changed, at most every PLAIN_EVERY seconds, so a log stays readable."""

    def __init__(self, tty: bool):
        self.tty = tty
        self.drawn = 0
        self.last_plain = -PLAIN_EVERY
        self.last_lines: list[str] = []

    def draw(self, elapsed: float, lines: list[str], final: bool = False) -> None:
        head = f"[{elapsed:5.1f}s]"
        if self.tty:
            # Up to the first line we drew last time, then clear below: no flicker, no scroll.
            up = f"\x1b[{self.drawn}F\x1b[J" if self.drawn else ""
            sys.stdout.write(up + "\n".join([head, *lines]) + "\n")
            sys.stdout.flush()
            self.drawn = len(lines) + 1
        elif final or (lines != self.last_lines and elapsed - self.last_plain >= PLAIN_EVERY):
            self.last_plain, self.last_lines = elapsed, lines
            print("\n".join(f"{head} {line}" for line in lines), flush=True)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table: readable in a terminal, a log, or a service manager's journal."""
    cells = [[str(header) for header in headers]] + [
        ["-" if value is None else str(value) for value in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        # strict=False: a cell past the headers is not shown, as before.
        padded = (value.ljust(width) for value, width in zip(row, widths, strict=False))
        click.echo("  ".join(padded).rstrip())
        if index == 0:
            click.echo("  ".join("-" * width for width in widths))
