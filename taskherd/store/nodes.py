"""Nodes: each running daemon records that it is up and keeps saying so, so anyone reading
the store (`taskherd status`, another node) can tell a live node from one that died.

A `kill -9` leaves no goodbye: a node is down when it has not been seen for its own
`node_timeout`. Any other node then declares it down and rescues its runs at once (`lost`,
no strike), so a dead machine's work moves on within seconds, not after a lease's length.
A node recorded before node_timeout existed is judged by `DOWN_AFTER_LEASES` of its leases.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from taskherd.model import Run
from taskherd.model.nodes import Node
from taskherd.model.record import Record

if TYPE_CHECKING:
    from taskherd.model import Finished
    from taskherd.model.settings import RetryPolicy


class DownNode(Record):
    """A node declared down, and what its runs became."""

    node: Node
    rescued: list[Finished]


class NodeStore(abc.ABC):
    @abc.abstractmethod
    def node_up(self, name: str, *, host: str, pid: int, version: str, lease: float,
                roles: Sequence[str], now: float, tags: Sequence[str] = (),
                timeout: float | None = None) -> Node:
        """Record that the daemon `name` started now (a restart starts it afresh); the record
        says in `was_down_at` whether its earlier life had been declared down."""

    @abc.abstractmethod
    def node_seen(self, name: str, now: float, running: int, roles: Sequence[str],
                  tags: Sequence[str] | None = None) -> Node | None:
        """The node's heartbeat: it is alive now, runs `running` agents and can run `roles`.
        Returns the record as it was before, so a node learns it had been declared down."""

    @abc.abstractmethod
    def rescue_down_nodes(self, by: str, now: float,
                          policy_for: Callable[[str], RetryPolicy]) -> list[DownNode]:
        """Declare down every node (other than `by`) silent for longer than its node_timeout,
        and end its open runs `lost` (no strike), their tasks back in the queue, in one
        transaction; what was declared and rescued."""

    @abc.abstractmethod
    def lost_runs_of_node(self, node: str, since: float) -> list[Run]:
        """Runs of `node` rescued from it (ended `lost`) since `since`: their agents, if
        any still run on that node, are to be stopped."""

    @abc.abstractmethod
    def pause_node(self, name: str, reason: str, targets: Sequence[str], now: float) -> bool:
        """The node starts nothing new, for `reason` (its disk). True when this call began
        the pause: then, in the same transaction, the event and an outbox row for each
        delivery alias in `targets`; a pause already on record only takes the new reason."""

    @abc.abstractmethod
    def resume_node(self, name: str, targets: Sequence[str], now: float) -> bool:
        """End the node's pause. True when this call ended it (and told `targets`)."""

    @abc.abstractmethod
    def node_stopped(self, name: str, now: float) -> None:
        """A clean stop: the node said goodbye."""

    @abc.abstractmethod
    def list_nodes(self) -> list[Node]: ...
