"""Nodes: each running daemon records that it is up and keeps saying so, so anyone reading
the store (`taskherd status`, another node) can tell a live node from one that died.

A `kill -9` leaves no goodbye: a node is judged down when it has not been seen for
`DOWN_AFTER_LEASES` of its own lease periods, and its running tasks are orphans until a
lease rescue returns them to the queue.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskherd.model import ANY_ROLE

DOWN_AFTER_LEASES = 3


@dataclass(frozen=True)
class Node:
    name: str
    host: str
    pid: int | None
    version: str | None
    lease: float  # the node's own lease period: "not seen for long" is judged by it
    started_at: float
    last_seen: float
    stopped_at: float | None  # set by a clean stop; None while up, or after a crash
    running: int  # agents it ran when last seen
    roles: tuple[str, ...] = ()  # the roles its config defines: what it can run

    @classmethod
    def from_row(cls, row: Any) -> Node:
        data = dict(row)
        data["roles"] = tuple(json.loads(data.get("roles") or "[]"))
        return cls(**data)

    def runs(self, role: str) -> bool:
        return role == ANY_ROLE or role in self.roles

    def status(self, now: float) -> str:
        """`up`, `stopped` (said goodbye) or `down` (silent for too long: it died)."""
        if self.stopped_at is not None:
            return "stopped"
        return "up" if now - self.last_seen <= DOWN_AFTER_LEASES * self.lease else "down"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"roles": list(self.roles)}


class NodeStore(abc.ABC):
    @abc.abstractmethod
    def node_up(self, name: str, *, host: str, pid: int, version: str, lease: float,
                roles: Sequence[str], now: float) -> Node:
        """Record that the daemon `name` started now (a restart starts it afresh)."""

    @abc.abstractmethod
    def node_seen(self, name: str, now: float, running: int, roles: Sequence[str]) -> None:
        """The node's heartbeat: it is alive now, runs `running` agents and defines `roles`."""

    @abc.abstractmethod
    def node_stopped(self, name: str, now: float) -> None:
        """A clean stop: the node said goodbye."""

    @abc.abstractmethod
    def list_nodes(self) -> list[Node]: ...
