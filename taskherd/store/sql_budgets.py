"""Budget pauses in the store (`store/sql/common/budgets.sql`); mixed into `SQLStore`.

A pause is the cooldown `budget:SCOPE`. Starting one and lifting one are each a transition of
its own, made once however many nodes find the budget spent (or free again): the node whose
transaction makes the change emits the event and writes the outbox rows that tell the
delivery targets; every other finds the change made and writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.model import EventKind
from taskherd.model.delivery import BUDGET_PAUSED, BUDGET_RESUMED
from taskherd.model.settings import BUDGET_COOLDOWN

if TYPE_CHECKING:
    from taskherd.store.connection import Connection


class SQLBudgets:
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _order_claims(self, db: Connection) -> None: ...
        def _emit(self, kind: EventKind, now: float, **fields: Any) -> None: ...

    def pause_budget(self, scope: str, until: float, reason: str, targets: Sequence[str],
                     now: float) -> bool:
        """Pause `scope`'s spawns until `until`. True when this call began the pause (no
        pause held, or only a lifted one not yet cleared): then, in the same transaction, the
        event and one outbox row per target. A pause already held only moves to a later
        `until` (a month's limit reached while the day's held), and tells nobody again."""
        name = BUDGET_COOLDOWN + scope
        with self._write() as db:
            self._order_claims(db)  # two nodes pausing at once: one begins it, one sees it
            rows = db.execute(self.q["cooldown_of"], {"runtime": name}).fetchall()
            began = not rows or rows[0]["until"] <= now
            if not began and rows[0]["until"] >= until:
                return False
            params = {"runtime": name, "until": until, "reason": reason, "now": now,
                      "span": None, "down_since": None}
            db.execute(self.q["set_cooldown"], params).fetchall()
            if began:
                self._emit(EventKind.COOLDOWN_SET, now, runtime=name)
                self._emit(EventKind.BUDGET_PAUSED, now, role=scope, runtime=name)
                body = {"scope": scope, "until": until, "reason": reason}
                self._tell(db, BUDGET_PAUSED, body, targets, now)
            return began

    def lift_budget_pause(self, scope: str, until: float, targets: Sequence[str],
                          now: float) -> bool:
        """End `scope`'s pause, the one that ran until `until` (a pause begun or moved since
        by another node is left alone). True when this call ended it: then the event, and
        an outbox row for each target."""
        name = BUDGET_COOLDOWN + scope
        with self._write() as db:
            lifted = db.execute(self.q["lift_budget_pause"],
                                {"runtime": name, "until": until}).rowcount > 0
            if lifted:
                self._emit(EventKind.COOLDOWN_CLEARED, now, runtime=name)
                self._emit(EventKind.BUDGET_RESUMED, now, role=scope, runtime=name)
                self._tell(db, BUDGET_RESUMED, {"scope": scope, "paused_until": until},
                           targets, now)
            return lifted

    def _tell(self, db: Connection, event: str, budget: dict[str, Any],
              targets: Sequence[str], now: float) -> None:
        if not targets:
            return
        payload = json.dumps({"event": event, "at": now, "budget": budget})
        for alias in dict.fromkeys(targets):
            db.execute(self.q["insert_delivery"], {"alias": alias,
                                                   "event": event, "task_id": None,
                                                   "payload": payload, "now": now})
        self._emit(EventKind.DELIVERY_QUEUED, now)
