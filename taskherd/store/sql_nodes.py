"""The node store over named SQL (`store/sql/common/nodes.sql`); mixed into `SQLStore`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.store.nodes import Node, NodeStore

if TYPE_CHECKING:
    from taskherd.store.connection import Connection


class SQLNodes(NodeStore):
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...

    def node_up(self, name: str, *, host: str, pid: int, version: str, lease: float,
                roles: Sequence[str], now: float) -> Node:
        params = {"name": name, "host": host, "pid": pid, "version": version, "lease": lease,
                  "roles": json.dumps(sorted(roles)), "now": now}
        with self._write() as db:
            return Node.from_row(db.execute(self.q["node_up"], params).fetchall()[0])

    def node_seen(self, name: str, now: float, running: int, roles: Sequence[str]) -> None:
        params = {"name": name, "now": now, "running": running, "roles": json.dumps(sorted(roles))}
        with self._write() as db:
            db.execute(self.q["node_seen"], params)

    def node_stopped(self, name: str, now: float) -> None:
        with self._write() as db:
            db.execute(self.q["node_stopped"], {"name": name, "now": now})

    def list_nodes(self) -> list[Node]:
        return [Node.from_row(row) for row in self._all("list_nodes")]
