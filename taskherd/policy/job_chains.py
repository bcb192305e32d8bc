"""Job chains, pure: a job that names a parent job fires when the parent's task settles.

A link is kept in the job's template as `after` ({job, on, when, delay}), so it travels with
the definition; `parent`, `on`, `when` and `delay` are how a [[jobs]] table or `jobs add`
write it. A link fires only once the parent's fire is final: a failure with a retry to come
is not one (the seeds' scheduler: "failures don't cascade prematurely").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from taskherd.model import FireStatus
from taskherd.policy.chains import ON_CHOICES, ChainError, check_condition, condition_holds
from taskherd.policy.durations import parse_duration

LINK_KEYS = ("parent", "on", "when", "delay")
AFTER = "after"  # the template key holding the link
MAX_JOB_DEPTH = 10


class JobChainError(ValueError):
    pass


def parse_link(table: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """The link a job table declares (None: it names no parent), or JobChainError."""
    if "parent" not in table:
        extra = [key for key in LINK_KEYS if key in table]
        if extra:
            raise JobChainError(f"{where}{extra[0]}: only a job with a parent has it (give "
                                "parent = 'NAME' of the job it follows)")
        return None
    parent = table["parent"]
    if not isinstance(parent, str) or not parent:
        raise JobChainError(f"{where}parent = {parent!r}: expected the name of another job")
    on = table.get("on", "success")
    if on not in ON_CHOICES:
        raise JobChainError(f"{where}on = {on!r}: expected one of {', '.join(ON_CHOICES)}")
    when = table.get("when")
    if when is not None:
        if not isinstance(when, str):
            raise JobChainError(f"{where}when = {when!r}: expected 'contains:TEXT' or "
                                "'regex:PATTERN'")
        try:
            check_condition(when, f"{where}when")
        except ChainError as error:
            raise JobChainError(str(error)) from None
    delay = 0.0
    if table.get("delay") is not None:
        try:
            delay = parse_duration(table["delay"])
        except ValueError as error:
            raise JobChainError(f"{where}delay = {table['delay']!r}: {error}") from None
    return {"job": parent, "on": on, "when": when, "delay": delay}


def link_table(link: Mapping[str, Any] | None) -> dict[str, Any]:
    """A stored link as the table keys that would declare it."""
    if not link:
        return {}
    table = {"parent": link["job"], "on": link["on"]}
    if link.get("when"):
        table["when"] = link["when"]
    if link.get("delay"):
        table["delay"] = link["delay"]
    return table


def parent_of(template: Mapping[str, Any]) -> str | None:
    link = template.get(AFTER)
    return link.get("job") if isinstance(link, Mapping) else None


def fires_after(link: Mapping[str, Any], status: str, final: bool, text: str) -> bool:
    """Whether a child with `link` fires after its parent's fire ended with `status`;
    `final` is False while a retry of the parent's fire is still to come."""
    if status == FireStatus.OK:
        wanted = link["on"] in ("success", "complete")
    elif status in (FireStatus.ERROR, FireStatus.TIMEOUT):
        wanted = final and link["on"] in ("failure", "complete")
    else:  # cancelled or skipped: the parent's work did not happen
        return False
    return wanted and condition_holds(link.get("when"), text)


def find_job_cycle(parents: Mapping[str, str | None]) -> list[str] | None:
    """A loop of jobs through their parents (a → b → a), or None."""
    for start in sorted(parents):
        path, here = [start], parents.get(start)
        while here is not None and here in parents:
            if here in path:
                loop = path[path.index(here):] + [here]
                return loop[::-1]
            path.append(here)
            here = parents.get(here)
    return None


def depth_of(name: str, parents: Mapping[str, str | None]) -> int:
    depth, here, seen = 0, parents.get(name), {name}
    while here is not None and here not in seen:
        depth, seen = depth + 1, seen | {here}
        here = parents.get(here)
    return depth


def check_links(parents: Mapping[str, str | None], known: set[str]) -> None:
    """Every parent exists, no loop, no chain deeper than MAX_JOB_DEPTH; else JobChainError."""
    for name, parent in sorted(parents.items()):
        if parent is not None and parent not in known:
            raise JobChainError(f"job {name!r}: parent = {parent!r} is not a job")
    loop = find_job_cycle(parents)
    if loop:
        raise JobChainError(f"jobs would fire each other forever: {' → '.join(loop)}")
    for name in parents:
        if depth_of(name, parents) > MAX_JOB_DEPTH:
            raise JobChainError(f"job {name!r} is {depth_of(name, parents)} links below its "
                                f"first parent (at most {MAX_JOB_DEPTH})")
