"""Delivery targets over named SQL (`store/sql/common/delivery.sql`); mixed into `SQLStore`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.model import EventKind, Task, TaskState
from taskherd.model.delivery import DEFAULT_EVENTS, Alias, Delivery
from taskherd.store.delivery import DeliveryStore
from taskherd.store.errors import StoreError

if TYPE_CHECKING:
    from taskherd.store.connection import Connection

# The event a settle into each state tells.
EVENT_OF_STATE = {TaskState.COMPLETED: "completed", TaskState.DEAD: "dead",
                  TaskState.BLOCKED: "blocked", TaskState.NEEDS_REVIEW: "needs_review",
                  TaskState.CANCELLED: "cancelled"}


class SQLDelivery(DeliveryStore):
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _is_unique_error(self, error: Exception) -> bool: ...
        def _emit(self, kind: EventKind, now: float, **fields: Any) -> None: ...

    def add_alias(self, name: str, channel: str, target: str, now: float, *,
                  format: str = "json", description: str | None = None) -> Alias:
        params = {"name": name, "channel": channel, "target": target, "format": format,
                  "description": description, "now": now}
        try:
            with self._write() as db:
                return Alias.from_row(db.execute(self.q["add_alias"], params).fetchall()[0])
        except Exception as error:
            if self._is_unique_error(error):
                raise StoreError(f"alias {name!r} exists: remove it first") from error
            raise

    def get_alias(self, name: str) -> Alias | None:
        rows = self._all("get_alias", {"name": name})
        return Alias.from_row(rows[0]) if rows else None

    def list_aliases(self) -> list[Alias]:
        return [Alias.from_row(row) for row in self._all("list_aliases")]

    def remove_alias(self, name: str) -> bool:
        with self._write() as db:
            return db.execute(self.q["remove_alias"], {"name": name}).rowcount > 0

    def due_deliveries(self, now: float, limit: int = 50) -> list[Delivery]:
        rows = self._all("due_deliveries", {"now": now, "limit": limit})
        return [Delivery.from_row(row) for row in rows]

    def take_delivery(self, delivery: Delivery, retry_at: float) -> Delivery | None:
        params = {"id": delivery.id, "attempts": delivery.attempts, "retry_at": retry_at}
        with self._write() as db:
            rows = db.execute(self.q["take_delivery"], params).fetchall()
        return Delivery.from_row(rows[0]) if rows else None

    def delivery_sent(self, delivery_id: int, now: float) -> None:
        with self._write() as db:
            db.execute(self.q["delivery_sent"], {"id": delivery_id, "now": now})

    def delivery_failed(self, delivery_id: int, error: str, retry_at: float | None) -> None:
        params = {"id": delivery_id, "error": error[:2000],
                  "state": "pending" if retry_at is not None else "failed",
                  "retry_at": retry_at if retry_at is not None else 0.0}
        with self._write() as db:
            db.execute(self.q["delivery_failed"], params)

    def get_delivery(self, delivery_id: int) -> Delivery | None:
        rows = self._all("get_delivery", {"id": delivery_id})
        return Delivery.from_row(rows[0]) if rows else None

    def retry_deliveries(self, now: float, delivery_id: int | None = None) -> int:
        with self._write() as db:
            retried = int(db.execute(self.q["retry_deliveries"],
                                     {"now": now, "id": delivery_id}).rowcount)
            if retried:  # due again: the daemons' deliverers wake for it, as for a settle's
                self._emit(EventKind.DELIVERY_QUEUED, now)
            return retried

    def list_deliveries(self, *, alias: str | None = None, state: str | None = None,
                        limit: int = 50) -> list[Delivery]:
        params = {"alias": alias, "state": state, "limit": limit}
        return [Delivery.from_row(row) for row in self._all("list_deliveries", params)]

    def delivery_counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for row in self._all("delivery_counts"):
            counts.setdefault(row["alias"], {})[row["state"]] = row["n"]
        return counts

    def _write_outbox(self, db: Connection, task: Task, now: float) -> int:
        """Inside the settle's transaction: one outbox row per alias the task names, for an
        event it asked to tell (`deliver_to`, `deliver_on` in its meta)."""
        targets = task.meta.get("deliver_to") if task.meta else None
        event = EVENT_OF_STATE.get(task.state)
        if not targets or event is None:
            return 0
        wanted = task.meta.get("deliver_on") or DEFAULT_EVENTS
        events = [event] if event in wanted else []
        if event == "dead" and "job" in task.meta and "job_error" in wanted:
            events.append("job_error")
        for name in events:
            payload = json.dumps({"event": name, "at": now, "task": _shown(task)})
            for alias in targets:
                db.execute(self.q["insert_delivery"], {"alias": alias.removeprefix("@"),
                                                       "event": name, "task_id": task.id,
                                                       "payload": payload, "now": now})
        return len(events) * len(targets)


def _shown(task: Task) -> dict[str, Any]:
    return {"id": task.id, "title": task.title, "role": task.role, "state": task.state.value,
            "summary": task.summary, "last_error": task.last_error, "reason": task.reason,
            "parent_id": task.parent_id, "job": task.meta.get("job"),
            "finished_at": task.finished_at, "updated_at": task.updated_at}
