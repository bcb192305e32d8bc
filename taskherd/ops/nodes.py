"""Nodes: which daemons serve the queue now. Light on purpose: `taskherd task add` asks it
after every write, and loads neither the board nor the wait rules for that."""

from __future__ import annotations

from taskherd.model.nodes import Node
from taskherd.ops import Queue


def nodes_up(queue: Queue, now: float) -> list[Node]:
    """The nodes whose daemon is up now."""
    return [node for node in queue.store.list_nodes() if node.status(now) == "up"]
