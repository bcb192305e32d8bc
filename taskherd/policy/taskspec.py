"""A task described as plain data (a JSON line, CLI options, a job's template) → NewTask.

One validator for every way a task enters the queue, so each rejects bad input alike:
naming the field, the value and what would be accepted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskherd.model import NewTask, Priority

if TYPE_CHECKING:  # the config imports this module (to check [[jobs]]) at load, not the reverse
    from taskherd.model.settings import Config

TASK_FIELDS = {
    "role": "the role that runs it (required)",
    "title": "a one-line title (required)",
    "prompt": "the agent's instructions",
    "priority": "P0-P3",
    "pool": "a pool from [pools]",
    "dedup_key": "a key: an open task with the same key is returned instead",
    "max_attempts": "a whole number ≥ 1",
    "review": "true to wait for approval after success",
    "pending": "true to wait for approval before running",
    "run_after": "unix seconds before which it is not claimed",
    "parent_id": "the id of the task that made it",
    "meta": "a table of extra data",
    "deliver_to": "delivery aliases told when it settles, e.g. ['@ops']",
    "on": "the events told: completed, dead, blocked, needs_review, cancelled, job_error",
    "chain": "follow-up tasks it creates when it settles (a list of tables: role, title, …)",
}
_FIELD_NAMES = frozenset(TASK_FIELDS)
# A priority as most tasks give it (or as its default), taken without parsing.
_PRIORITY_NAMED = {priority.name: priority for priority in Priority}
ALIAS_NAME = re.compile(r"^@?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


TITLE_LIMIT = 500  # characters: a title is what a board line or a notification shows
# Control characters (newlines, escapes) would break a board line, or rewrite a terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Bytes that were not UTF-8 reach Python as lone surrogates (argv, surrogateescape).
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class TaskSpecError(ValueError):
    pass


def new_task_from(data: Mapping[str, Any], config: Config) -> NewTask:
    if not isinstance(data, Mapping):
        raise TaskSpecError(f"a task must be an object with keys {', '.join(TASK_FIELDS)}")
    unknown = sorted(data.keys() - _FIELD_NAMES)
    if unknown:
        raise TaskSpecError(f"unknown field {unknown[0]!r} (accepted: {', '.join(TASK_FIELDS)})")
    role = _text(data, "role", required=True)
    assert role is not None  # required: _text raised otherwise
    try:
        config.check_role(role)
    except ValueError as error:  # the config's ConfigError, naming the roles it defines
        raise TaskSpecError(str(error)) from error
    role_config = config.role(role)
    pool = _text(data, "pool")
    if pool is not None and pool not in config.pools:
        known = ", ".join(sorted(config.pools)) or "none defined"
        raise TaskSpecError(f"pool {pool!r} is not defined in [pools] ({known})")
    return NewTask(
        role=role,
        title=_title(data),
        prompt=_prompt(data, config.daemon.max_prompt_bytes),
        priority=_priority(data.get("priority", "P2")),
        pool=pool,
        dedup_key=_text(data, "dedup_key"),
        max_attempts=_positive_int(data, "max_attempts", role_config.max_attempts),
        review=_flag(data, "review", role_config.review),
        pending=_flag(data, "pending", False),
        run_after=_number(data, "run_after"),
        parent_id=_positive_int(data, "parent_id", None),
        meta=_with_delivery(_mapping(data, "meta"), data, role_config),
        chain=_chain(data, config),
    )


def _with_delivery(meta: dict[str, Any], data: Mapping[str, Any], role: Any) -> dict[str, Any]:
    """The delivery targets a settle of the task tells (the task's own, else its role's),
    kept in its meta so they hold for its whole life, whatever the config becomes."""
    if not (role.deliver_to or role.deliver_on or "deliver_to" in data or "on" in data):
        return meta  # most tasks: nothing to tell, and no import to look up
    from taskherd.model.delivery import DEFAULT_EVENTS, EVENTS

    # A role's `on` may also name its budget's events, which are not a task's to tell: a role
    # that asks for those alone gives its tasks no targets.
    role_events = [event for event in role.deliver_on if event in EVENTS]
    role_targets = [] if role.deliver_on and not role_events else list(role.deliver_to)
    targets = data.get("deliver_to", role_targets)
    events = data.get("on", role_events or None)
    if not targets:
        if events:
            raise TaskSpecError("on is given without deliver_to: name the aliases to tell")
        return meta
    if not isinstance(targets, list) or not all(
            isinstance(t, str) and ALIAS_NAME.match(t) for t in targets):
        raise TaskSpecError(f"deliver_to = {targets!r}: expected {TASK_FIELDS['deliver_to']}")
    if events is not None and (not isinstance(events, list) or not events
                               or not all(e in EVENTS for e in events)):
        raise TaskSpecError(f"on = {events!r}: expected a list of: {', '.join(EVENTS)}")
    return {**meta, "deliver_to": [t.removeprefix("@") for t in dict.fromkeys(targets)],
            "deliver_on": list(events or DEFAULT_EVENTS)}




def _chain(data: Mapping[str, Any], config: Config) -> tuple[Any, ...]:
    if data.get("chain") is None:
        return ()
    from taskherd.policy.chains import ChainError, parse_chain

    try:
        chain = parse_chain(data["chain"], "chain")
    except ChainError as error:
        raise TaskSpecError(str(error)) from None
    for index, follow_up in enumerate(chain):
        try:
            config.check_role(follow_up.role)
        except ValueError as error:
            raise TaskSpecError(f"chain[{index}].{error}") from None
        if follow_up.pool is not None and follow_up.pool not in config.pools:
            raise TaskSpecError(f"chain[{index}].pool = {follow_up.pool!r} is not defined in "
                                "[pools]")
    return chain


def _text(data: Mapping[str, Any], key: str, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise TaskSpecError(f"{key} is required ({TASK_FIELDS[key]})")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise TaskSpecError(
            f"{key} = {value!r}: expected {TASK_FIELDS[key]}, as a non-empty string")
    bad = _SURROGATE.search(value)
    if bad:
        raise TaskSpecError(f"{key} is not valid UTF-8 (an undecodable byte at character "
                            f"{bad.start()}): give text in UTF-8")
    return value


def _title(data: Mapping[str, Any]) -> str:
    title = _text(data, "title", required=True)
    assert title is not None
    control = _CONTROL.search(title)
    if control:
        raise TaskSpecError(f"title = {_clip(title)!r}: expected one line without control "
                            f"characters (found {control.group()!r} at {control.start()}); "
                            "put details in the prompt")
    if len(title) > TITLE_LIMIT:
        raise TaskSpecError(f"title is {len(title)} characters: expected at most {TITLE_LIMIT}; "
                            "put details in the prompt")
    return title


def _prompt(data: Mapping[str, Any], limit: int) -> str:
    # The limit ([daemon] max_prompt_bytes, 1 MiB): a runaway import or a log pasted whole
    # would otherwise sit in every claim's row and every agent's argv or stdin.
    prompt = _text(data, "prompt") or ""
    size = len(prompt.encode())
    if size > limit:
        raise TaskSpecError(f"prompt is {size} bytes: expected at most {limit} "
                            "([daemon] max_prompt_bytes); give the agent a file to read instead")
    return prompt


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _priority(value: Any) -> Priority:
    if type(value) is str and value in _PRIORITY_NAMED:
        return _PRIORITY_NAMED[value]
    try:
        return Priority.parse(value)
    except ValueError as error:
        raise TaskSpecError(str(error)) from error


def _positive_int(data: Mapping[str, Any], key: str, default: int | None) -> Any:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TaskSpecError(f"{key} = {value!r}: expected a whole number ≥ 1")
    return value


def _flag(data: Mapping[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise TaskSpecError(f"{key} = {value!r}: expected true or false")
    return value


def _number(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    # NaN and infinity pass JSON and isinstance alike; NaN reached the database as NULL.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TaskSpecError(f"{key} = {value!r}: expected {TASK_FIELDS[key]}")
    return float(value)


def _mapping(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise TaskSpecError(f"{key} = {value!r}: expected {TASK_FIELDS[key]}")
    return value
