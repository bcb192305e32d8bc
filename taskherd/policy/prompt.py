"""The one place an agent's prompt is assembled: the task's own prompt, then the context the
queue holds for it, each part under its own heading with its text fenced, so an agent (and a
person reading the prompt file) can tell the task from what taskherd added.

Sections with nothing to say are left out; a task with no context gets its prompt unchanged,
byte for byte, as it was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from taskherd.model import Message, MessagePriority, Task
from taskherd.model.record import Record
from taskherd.policy.gates import is_gate_failure

SECTION_LIMIT = 8000  # characters of one section's text: a log tail must not drown the task
PRIORITY_WORDS = {int(MessagePriority.NORMAL): "normal", int(MessagePriority.HIGH): "high",
                  int(MessagePriority.URGENT): "URGENT"}


class PromptContext(Record):
    """What the queue holds for one run beyond its task: the messages delivered to it at its
    claim (their size was bounded there), and its role's short-term memory."""

    inbox: tuple[Message, ...] = ()
    memory: str | None = None  # the role's memory file, as it stood when the run started
    memory_path: str | None = None


class Section(Record):
    """One delimited part of a prompt: a heading, a line saying what it is, a fenced text."""

    title: str
    note: str
    text: str
    limit: int | None = SECTION_LIMIT  # None: bounded where the text was chosen

    def render(self) -> str:
        text = self.text if self.limit is None or len(self.text) <= self.limit else (
            "…" + self.text[-self.limit:])
        fence = _fence_for(text)
        return f"## {self.title}\n\n{self.note}\n\n{fence}\n{text}\n{fence}"


def build_prompt(task: Task, context: PromptContext = PromptContext()) -> str:
    """What the agent of `task` is given: its prompt, or its title when it has none (a task
    added without --prompt must not start its agent on nothing)."""
    prompt = task.prompt if task.prompt.strip() else task.title
    sections = [s for s in context_sections(task, context) if s.text.strip()]
    if not sections:
        return prompt
    return "\n\n".join([prompt.rstrip("\n"), *(s.render() for s in sections)]) + "\n"


def context_sections(task: Task, context: PromptContext = PromptContext()) -> Iterable[Section]:
    """Every section in the order an agent should read them: why it runs again, what was
    sent to it, what its role remembers."""
    if task.reason:
        yield Section("Reviewer's reason",
                      "A reviewer sent this task back. Address this before anything else:",
                      task.reason)
    if is_gate_failure(task.last_error):
        yield Section("Quality gate failed",
                      "Your last attempt reported success, but a check the role requires "
                      "failed. Fix what it reports; it runs again when you finish:",
                      _failure_text(task))
    elif task.attempts > 0 or task.last_error:
        yield Section("Previous attempt failed",
                      f"An earlier attempt ({task.attempts} strike(s) so far) ended with:",
                      _failure_text(task))
    if context.inbox:
        yield Section("Messages for you",
                      f"{len(context.inbox)} message(s) arrived for this role or task, urgent "
                      "first. Answer with `taskherd msg send TO TEXT --reply-to ID`:",
                      "\n\n".join(_message_text(m) for m in context.inbox), limit=None)
    if context.memory is not None:
        where = f" ({context.memory_path})" if context.memory_path else ""
        yield Section("Your role's memory",
                      f"What earlier runs of this role wrote down{where}. Read it before "
                      "acting; add to it before you finish. Older entries are searchable with "
                      "`taskherd memory search WORDS`:",
                      context.memory)


def _message_text(message: Message) -> str:
    sent = datetime.fromtimestamp(message.created_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    sender = message.sender + (f" ({message.sender_role})" if message.sender_role else "")
    thread = f", reply to #{message.reply_to}" if message.reply_to else ""
    head = (f"#{message.id} [{PRIORITY_WORDS.get(message.priority, message.priority)} "
            f"{message.kind}] from {sender} to {message.recipient}, {sent}{thread}")
    return f"{head}\n{message.body}"


def _failure_text(task: Task) -> str:
    parts = [task.last_error or "no error was recorded"]
    if task.error_tail:
        parts += ["", "Last lines of its log:", task.error_tail]
    return "\n".join(parts)


def _fence_for(text: str) -> str:
    """A fence longer than any run of backticks in the text, so the text cannot close it."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def review_prompt(task: Task, log_path: str | None) -> str:
    """The prompt of the task that reviews `task`: what was asked, what its agent said it
    did, where its log is, and how to give the verdict."""
    sections = [
        Section("Task under review", f"Task {task.id} ({task.role}): {task.title}. It asked:",
                task.prompt or "(no prompt)"),
        Section("What its agent reported", "Its agent's summary of the work:",
                task.summary or "(no summary)"),
        Section("Its log", "The agent's full output is in this file:", log_path or "(no log)"),
    ]
    return "\n\n".join([
        f"Review the work done for task {task.id}: {task.title}",
        *(section.render() for section in sections),
        ("Check the work itself, not the agent's report of it. Then give your verdict: run "
         "`taskherd approve`, or `taskherd reject --reason \"what must change\"` (or print a "
         "line `APPROVED`, or `REJECTED: what must change`). A rejection sends the task back "
         "with your reason in its next prompt."),
    ]) + "\n"


def planner_prompt(instructions: str, counts: Mapping[tuple[str, str], int],
                   failures: Sequence[Task]) -> str:
    """The planner's prompt: its instructions, then a snapshot of the queue (open tasks by
    role and state, recent dead letters)."""
    rows = [f"{role:<16} {state:<13} {count}" for (role, state), count in sorted(counts.items())]
    board = "\n".join([f"{'role':<16} {'state':<13} tasks", *rows]) if rows else "(empty)"
    dead = "\n".join(f"task {t.id} ({t.role}) {t.title}: {t.reason or t.last_error or '?'}"
                     for t in failures)
    sections = [Section("Queue now", "Tasks by role and state:", board),
                Section("Recent failures", "Tasks that died recently (attempts exhausted):",
                        dead)]
    return "\n\n".join([instructions.rstrip("\n"),
                         *(s.render() for s in sections if s.text.strip())]) + "\n"
