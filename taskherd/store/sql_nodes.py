"""The node store over named SQL (`store/sql/common/nodes.sql`); mixed into `SQLStore`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from taskherd.model import EventKind, Outcome, Run, RunResult
from taskherd.model.delivery import NODE_PAUSED, NODE_RESUMED
from taskherd.model.nodes import Node
from taskherd.store.nodes import DownNode, NodeStore

if TYPE_CHECKING:
    from taskherd.model import Finished
    from taskherd.model.settings import RetryPolicy
    from taskherd.store.connection import Connection


class SQLNodes(NodeStore):
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _emit(self, kind: EventKind, now: float, **fields: Any) -> None: ...
        def _finish(self, db: Connection, run_id: int, result: RunResult,
                    policy: RetryPolicy, now: float) -> Finished: ...

    def node_up(self, name: str, *, host: str, pid: int, version: str, lease: float,
                roles: Sequence[str], now: float, tags: Sequence[str] = (),
                timeout: float | None = None) -> Node:
        params = {"name": name, "host": host, "pid": pid, "version": version, "lease": lease,
                  "roles": json.dumps(sorted(roles)), "tags": json.dumps(sorted(tags)),
                  "timeout": timeout, "now": now}
        with self._write() as db:
            before = db.execute(self.q["get_node"], {"name": name}).fetchall()
            node = Node.from_row(db.execute(self.q["node_up"], params).fetchall()[0])
        was_down_at = before[0]["down_at"] if before else None
        return replace(node, was_down_at=was_down_at)

    def node_seen(self, name: str, now: float, running: int, roles: Sequence[str],
                  tags: Sequence[str] | None = None) -> Node | None:
        params = {"name": name, "now": now, "running": running,
                  "roles": json.dumps(sorted(roles)),
                  "tags": json.dumps(sorted(tags)) if tags is not None else None}
        with self._write() as db:
            before = db.execute(self.q["get_node"], {"name": name}).fetchall()
            db.execute(self.q["node_seen"], params)
        return Node.from_row(before[0]) if before else None

    def pause_node(self, name: str, reason: str, targets: Sequence[str], now: float) -> bool:
        with self._write() as db:
            before = db.execute(self.q["get_node"], {"name": name}).fetchall()
            db.execute(self.q["pause_node"], {"name": name, "reason": reason, "now": now})
            began = bool(before) and before[0]["paused_at"] is None
            if began:
                self._emit(EventKind.NODE_PAUSED, now)
                self._tell_node(db, NODE_PAUSED, {"name": name, "reason": reason}, targets, now)
        return began

    def resume_node(self, name: str, targets: Sequence[str], now: float) -> bool:
        with self._write() as db:
            before = db.execute(self.q["get_node"], {"name": name}).fetchall()
            ended = db.execute(self.q["resume_node"], {"name": name}).rowcount > 0
            if ended:
                paused = before[0]
                self._emit(EventKind.NODE_RESUMED, now)
                self._tell_node(db, NODE_RESUMED, {
                    "name": name, "paused_at": paused["paused_at"],
                    "paused_reason": paused["paused_reason"]}, targets, now)
        return ended

    def _tell_node(self, db: Connection, event: str, node: dict[str, Any],
                   targets: Sequence[str], now: float) -> None:
        if not targets:
            return
        payload = json.dumps({"event": event, "at": now, "node": node})
        for alias in dict.fromkeys(targets):
            db.execute(self.q["insert_delivery"], {"alias": alias, "event": event,
                                                   "task_id": None, "payload": payload,
                                                   "now": now})
        self._emit(EventKind.DELIVERY_QUEUED, now)

    def node_stopped(self, name: str, now: float) -> None:
        with self._write() as db:
            db.execute(self.q["node_stopped"], {"name": name, "now": now})

    def list_nodes(self) -> list[Node]:
        return [Node.from_row(row) for row in self._all("list_nodes")]

    def rescue_down_nodes(self, by: str, now: float,
                          policy_for: Callable[[str], RetryPolicy]) -> list[DownNode]:
        declared = []
        with self._write() as db:
            for row in db.execute(self.q["silent_nodes"], {"node": by, "now": now}).fetchall():
                node = Node.from_row(row)
                db.execute(self.q["declare_node_down"], {"name": node.name, "by": by, "now": now})
                seen = datetime.fromtimestamp(node.last_seen).astimezone().isoformat(
                    sep=" ", timespec="seconds")
                lost = RunResult(Outcome.LOST, error=(
                    f"node {node.name} went silent (last seen {seen}, node_timeout "
                    f"{node.silence_allowed:g}s): declared down by {by}"))
                rescued = [self._finish(db, run["id"], lost, policy_for(run["role"]), now)
                           for run in db.execute(self.q["open_runs_of_down_node"],
                                                 {"node": node.name}).fetchall()]
                declared.append(DownNode(replace(node, down_at=now, down_by=by), rescued))
        return declared

    def lost_runs_of_node(self, node: str, since: float) -> list[Run]:
        rows = self._all("lost_runs_of_node", {"node": node, "since": since})
        return [Run.from_row(row) for row in rows]
