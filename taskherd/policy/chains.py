"""Task chains, pure: the follow-ups a task declares, which of them a settle creates, the
review a role demands, and the limits that keep a chain finite.

No I/O and no clock: the store calls `Workflow.settled` inside the transaction that settles a
task, so a parent is never done while its children are missing (the seeds' fleet created
QA tasks after completion, and a crash between the two lost them). A role's default chain is
the config's, applied whatever the task says: an agent cannot opt out of its QA review.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from taskherd.model import NewTask, Priority, Task, TaskState
from taskherd.model.record import Record
from taskherd.model.settings import DEFAULT_MAX_DEPTH, DEFAULT_MAX_REVIEWS, Config, FollowUp
from taskherd.policy.durations import parse_duration

ON_CHOICES = ("success", "failure", "complete")
# What a template may name; each is text (an unknown name is refused where it is written).
TEMPLATE_FIELDS = ("parent_id", "parent_title", "parent_summary", "parent_role", "parent_log",
                   "parent_reason", "root_id")
FOLLOW_UP_KEYS = {
    "role": "the role that runs it (required)",
    "title": "a title template (required), e.g. 'QA review: {parent_title}'",
    "prompt": "a prompt template",
    "priority": "P0-P3",
    "pool": "a pool from [pools]",
    "on": "success, failure (after the retry budget is spent) or complete",
    "when": "a condition on the parent's summary and output: 'contains:TEXT' or 'regex:PATTERN'",
    "delay": "how long the child waits before it may run, e.g. '10m'",
}
TITLE_LIMIT = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")
# A reviewer's verdict as a line of its output; the last one it printed counts.
APPROVED = re.compile(r"^\s*APPROVED\b")
REJECTED = re.compile(r"^\s*REJECTED:\s*(?P<reason>.*?)\s*$")
REVIEW_OF = "review_of"  # the meta key naming the task a review task reviews


class ChainError(ValueError):
    """A follow-up that cannot be accepted; the message names the key and the value."""


def parse_follow_up(data: Any, where: str) -> FollowUp:
    """One follow-up from plain data (a TOML table, a JSON object), or ChainError."""
    if not isinstance(data, Mapping):
        raise ChainError(f"{where}: a follow-up is a table with keys {', '.join(FOLLOW_UP_KEYS)}")
    unknown = sorted(set(data) - set(FOLLOW_UP_KEYS))
    if unknown:
        raise ChainError(f"{where}.{unknown[0]}: unknown key (accepted: "
                         f"{', '.join(FOLLOW_UP_KEYS)})")
    texts = {}
    for key in ("role", "title", "prompt", "pool", "on", "when"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ChainError(f"{where}.{key} = {value!r}: expected {FOLLOW_UP_KEYS[key]}, as "
                             "a non-empty string")
        texts[key] = value
    for key in ("role", "title"):
        if texts[key] is None:
            raise ChainError(f"{where}.{key} is required ({FOLLOW_UP_KEYS[key]})")
    for key in ("title", "prompt"):
        text = texts[key]
        if text is not None:
            _check_template(text, f"{where}.{key}")
    on = texts["on"] or "success"
    if on not in ON_CHOICES:
        raise ChainError(f"{where}.on = {on!r}: expected one of {', '.join(ON_CHOICES)}")
    if texts["when"] is not None:
        check_condition(texts["when"], f"{where}.when")
    try:
        priority = Priority.parse(data.get("priority", "P2"))
    except ValueError as error:
        raise ChainError(f"{where}.priority: {error}") from None
    delay = 0.0
    if data.get("delay") is not None:
        try:
            delay = parse_duration(data["delay"])
        except ValueError as error:
            raise ChainError(f"{where}.delay = {data['delay']!r}: {error}") from None
    role, title = texts["role"], texts["title"]
    assert role is not None and title is not None  # required, checked above
    return FollowUp(role=role, title=title, prompt=texts["prompt"] or "",
                    priority=priority, pool=texts["pool"], on=on, when=texts["when"],
                    delay=delay)


def parse_chain(value: Any, where: str) -> tuple[FollowUp, ...]:
    """A list of follow-ups (`chain` of a task or of a role)."""
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        raise ChainError(f"{where} = {value!r}: expected a list of follow-up tables")
    return tuple(parse_follow_up(item, f"{where}[{index}]") for index, item in enumerate(value))


def encode_chain(chain: Sequence[FollowUp]) -> str | None:
    """The task row's `chain` column: NULL for none, so a plain task costs nothing."""
    if not chain:
        return None
    return json.dumps([follow_up.to_data() for follow_up in chain], separators=(",", ":"))


def decode_chain(text: str | None) -> tuple[FollowUp, ...]:
    if not text:
        return ()
    return parse_chain(json.loads(text), "chain")


def condition_holds(when: str | None, text: str) -> bool:
    if when is None:
        return True
    kind, _, operand = when.partition(":")
    if kind == "contains":
        return operand in text
    return re.search(operand, text, re.MULTILINE) is not None


def check_condition(when: str, where: str) -> None:
    kind, colon, operand = when.partition(":")
    if kind not in ("contains", "regex") or not colon or not operand:
        raise ChainError(f"{where} = {when!r}: expected 'contains:TEXT' or 'regex:PATTERN'")
    if kind == "regex":
        try:
            re.compile(operand)
        except re.error as error:
            raise ChainError(f"{where} = {when!r}: not a valid regular expression "
                             f"({error})") from None


def _check_template(template: str, where: str) -> None:
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ChainError(f"{where} = {template!r}: {error} (write a literal brace as "
                         "'{{' or '}}')") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS or spec or conversion:
            raise ChainError(f"{where} = {template!r}: {{{name}}} is not a template field "
                             f"(accepted: {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)})")


def render(template: str, values: Mapping[str, str]) -> str:
    return template.format_map(values)


def template_values(parent: Task, log_path: str | None) -> dict[str, str]:
    return {
        "parent_id": str(parent.id),
        "parent_title": parent.title,
        "parent_summary": parent.summary or "",
        "parent_role": parent.role,
        "parent_log": log_path or "(no log)",
        "parent_reason": parent.reason or "",
        "root_id": str(parent.root_id or parent.id),
    }


def one_line_title(text: str) -> str:
    """A rendered title as the queue accepts one: a single line, at most TITLE_LIMIT."""
    line = _CONTROL.sub(" ", text).strip() or "(untitled)"
    return line if len(line) <= TITLE_LIMIT else line[: TITLE_LIMIT - 1] + "…"


# -- what a role demands -----------------------------------------------------------------


class RoleFlow(Record):
    """A role's part in workflows: its default chain, its reviewer, and the defaults its
    children are created with (the store knows no config)."""

    chain: tuple[FollowUp, ...] = ()
    review_by: str | None = None
    max_reviews: int = DEFAULT_MAX_REVIEWS
    max_attempts: int = 3
    review: bool = False


class Spawn(Record):
    """What a settle creates: the children, and why the chain stopped short, if it did."""

    children: tuple[NewTask, ...] = ()
    refused: str | None = None



class Workflow(Record):
    """Every role's workflow settings and the depth limit, from the config."""

    roles: Mapping[str, RoleFlow] = field(default_factory=dict)
    max_depth: int = DEFAULT_MAX_DEPTH

    def role(self, name: str) -> RoleFlow:
        return self.roles.get(name) or _DEFAULT_FLOW

    def reviewed(self, role: str) -> bool:
        return self.role(role).review_by is not None

    def may_chain(self, task: Task) -> bool:
        """Cheap test first: most settles have nothing to create (the hot path)."""
        return bool(task.chain) or bool(self.role(task.role).chain)

    def follow_ups(self, task: Task) -> tuple[FollowUp, ...]:
        # The role's default chain always applies: the task's own list adds to it.
        return self.role(task.role).chain + decode_chain(task.chain)

    def children(self, parent: Task, now: float, text: str, log_path: str | None) -> Spawn:
        """The children `parent` creates on settling where it is now (COMPLETED or DEAD)."""
        due = [f for f in self.follow_ups(parent) if fires(f, parent.state, text)]
        if not due:
            return Spawn()
        if parent.depth + 1 > self.max_depth:
            roles = ", ".join(sorted({f.role for f in due}))
            return Spawn(refused=(f"chain stopped: a child ({roles}) would be at depth "
                                  f"{parent.depth + 1}, beyond max_depth {self.max_depth}"))
        values = template_values(parent, log_path)
        return Spawn(tuple(self.child(parent, f, values, now) for f in due))

    def child(self, parent: Task, follow_up: FollowUp, values: Mapping[str, str],
              now: float) -> NewTask:
        flow = self.role(follow_up.role)
        return NewTask(
            role=follow_up.role,
            title=one_line_title(render(follow_up.title, values)),
            prompt=render(follow_up.prompt, values),
            priority=follow_up.priority,
            pool=follow_up.pool,
            max_attempts=flow.max_attempts,
            review=flow.review,
            run_after=now + follow_up.delay if follow_up.delay else None,
            parent_id=parent.id,
        )

    def review_task(self, parent: Task, log_path: str | None, now: float) -> NewTask:
        """The task that reviews `parent` (its role has review_by), given where the log of
        `parent`'s last run is: the reviewer's prompt is written here, not by the store."""
        # The prompt builder is imported when a review is made: every command that opens a
        # store builds a Workflow, and only a settle ever writes a review.
        from taskherd.policy.prompt import review_prompt

        reviewer = self.role(parent.role).review_by
        assert reviewer is not None
        return NewTask(
            role=reviewer,
            title=one_line_title(f"Review: {parent.title}"),
            prompt=review_prompt(parent, log_path),
            priority=parent.priority,
            max_attempts=self.role(reviewer).max_attempts,
            parent_id=parent.id,
            meta={REVIEW_OF: parent.id},
        )

    def after_rejection(self, task: Task) -> tuple[TaskState, str | None]:
        """Where a rejected task goes: back to ready, or to a person once it was rejected
        max_reviews times (the reviewer's reason stays in front of whoever comes next)."""
        cap = self.role(task.role).max_reviews
        if task.rejections + 1 >= cap:
            return TaskState.BLOCKED, (f"rejected {task.rejections + 1} times (max_reviews "
                                       f"{cap}): a person decides")
        return TaskState.READY, None


_DEFAULT_FLOW = RoleFlow()
NO_WORKFLOW = Workflow()


def review_verdict(*texts: str | None) -> tuple[str, str | None] | None:
    """The reviewer's verdict in its output: ("approve", None), ("reject", reason) or None.
    The last marker printed wins (a reviewer may think aloud before deciding)."""
    verdict: tuple[str, str | None] | None = None
    for text in texts:
        for line in (text or "").splitlines():
            if APPROVED.match(line):
                verdict = ("approve", None)
            elif (rejected := REJECTED.match(line)) is not None:
                verdict = ("reject", rejected.group("reason") or "rejected without a reason")
    return verdict


def review_of(task: Task) -> int | None:
    value = task.meta.get(REVIEW_OF) if task.meta else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- limits checked when the config loads --------------------------------------------------


def find_cycle(chains: Mapping[str, Iterable[FollowUp]]) -> list[str] | None:
    """A loop of roles through their default chains (coder → qa → coder) that has a link
    without a `when` condition, or None. A loop whose every link carries a condition may end
    by itself; one with an unconditional link relies on the depth limit alone to stop.
    """
    edges: dict[str, dict[str, bool]] = {}  # role → next role → has an unconditional link
    for role, follow_ups in chains.items():
        for follow_up in follow_ups:
            links = edges.setdefault(role, {})
            links[follow_up.role] = links.get(follow_up.role, False) or follow_up.when is None
    for role in sorted(edges):
        for nxt in sorted(edges[role]):
            if edges[role][nxt]:
                back = _path(edges, nxt, role)
                if back is not None:
                    return [role, *back]
    return None


def _path(edges: Mapping[str, Mapping[str, bool]], start: str, goal: str) -> list[str] | None:
    """The shortest path of roles from `start` to `goal` (both included), or None."""
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for role in frontier:
            if role == goal:
                path = [role]
                while (previous := came_from[path[-1]]) is not None:
                    path.append(previous)
                return path[::-1]
            for nxt in sorted(edges.get(role, {})):
                if nxt not in came_from:
                    came_from[nxt] = role
                    following.append(nxt)
        frontier = following
    return None


def fires(follow_up: FollowUp, state: TaskState, text: str) -> bool:
    """Whether a parent that settled in `state`, with `text` (its summary and output tail),
    creates `follow_up`'s child. Cancelled and waiting states create nothing."""
    if state is TaskState.COMPLETED:
        wanted = follow_up.on in ("success", "complete")
    elif state is TaskState.DEAD:
        wanted = follow_up.on in ("failure", "complete")
    else:
        return False
    return wanted and condition_holds(follow_up.when, text)


def workflow_of(config: Config) -> Workflow:
    """What the store applies when a task settles: default chains, reviewers, limits."""
    flows = {name: RoleFlow(chain=role.chain, review_by=role.review_by,
                            max_reviews=role.max_reviews, max_attempts=role.max_attempts,
                            review=role.review)
             for name, role in config.roles.items()}
    return Workflow(flows, max_depth=config.daemon.max_depth)
