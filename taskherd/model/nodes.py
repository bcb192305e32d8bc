"""A node: a running daemon as the store records it (up since, last seen, its roles and tags,
its pause)."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from taskherd.model import ANY_ROLE, row_fields
from taskherd.model.record import Record

DOWN_AFTER_LEASES = 3


def runs_role(roles: Collection[str], role: str) -> bool:
    """Whether a node that runs `roles` (those it defines and has the tags for) takes a task
    of `role`: one for role `any` goes to any node."""
    return role == ANY_ROLE or role in roles


class Node(Record):
    name: str
    host: str
    pid: int | None
    version: str | None
    lease: float  # the node's own lease period: "not seen for long" is judged by it
    started_at: float
    last_seen: float
    stopped_at: float | None  # set by a clean stop; None while up, or after a crash
    running: int  # agents it ran when last seen
    roles: tuple[str, ...] = ()  # the roles it defines and has the tags for: what it can run
    tags: tuple[str, ...] = ()  # [daemon] tags
    timeout: float | None = None  # its node_timeout: a silence this long means it died
    down_at: float | None = None  # when another node declared it down (None: not since it started)
    down_by: str | None = None
    # Since when, and why, the node starts nothing new: the machine's fault (faults.py), a
    # full disk or one below min_free_disk. None while it may start runs.
    paused_at: float | None = None
    paused_reason: str | None = None
    # On the record `node_up` returns: when an earlier life of the node was declared down (its
    # runs rescued meanwhile, their agents to be stopped if they still run). Not a column.
    was_down_at: float | None = None

    @classmethod
    def from_row(cls, row: Any) -> Node:
        data = row_fields(row)
        data["roles"] = tuple(json.loads(data.get("roles") or "[]"))
        data["tags"] = tuple(json.loads(data.get("tags") or "[]"))
        return cls(**data)

    @property
    def silence_allowed(self) -> float:
        return self.timeout if self.timeout is not None else DOWN_AFTER_LEASES * self.lease

    def runs(self, role: str) -> bool:
        return runs_role(self.roles, role)

    def status(self, now: float) -> str:
        """`up`, `stopped` (said goodbye) or `down` (silent for too long: it died)."""
        if self.stopped_at is not None:
            return "stopped"
        if self.down_at is not None:
            return "down"
        return "up" if now - self.last_seen <= self.silence_allowed else "down"

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__) | {"roles": list(self.roles), "tags": list(self.tags)}
        del data["was_down_at"]
        return data
