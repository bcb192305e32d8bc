"""A runtime's cooldown (its rate limit, or its endpoint down), set and lifted; a part of
`SQLStore`."""

from __future__ import annotations

import time

from taskherd.model import Cooldown, EventKind
from taskherd.store.sql_parts import SQLParts
from taskherd.store.sql_parts import one_row as _one


class SQLCooldowns(SQLParts):
    def set_cooldown(self, runtime: str, until: float, reason: str, now: float,
                     span: float | None = None) -> Cooldown:
        params = {"runtime": runtime, "until": until, "reason": reason, "now": now, "span": span,
                  "down_since": None}
        with self._write() as db:
            self._order_claims(db)  # a claim under way either sees the cooldown or precedes it
            cooldown = Cooldown.from_row(_one(db.execute(self.q["set_cooldown"], params)))
            self._emit(EventKind.COOLDOWN_SET, now, runtime=runtime)
            return cooldown

    def active_cooldowns(self, now: float) -> list[Cooldown]:
        return [Cooldown.from_row(row) for row in self._all("active_cooldowns", {"now": now})]

    def cooldown_of(self, runtime: str) -> Cooldown | None:
        rows = self._all("cooldown_of", {"runtime": runtime})
        return Cooldown.from_row(rows[0]) if rows else None

    def clear_cooldown(self, runtime: str, now: float | None = None) -> bool:
        with self._write() as db:
            cleared = db.execute(self.q["clear_cooldown"], {"runtime": runtime}).rowcount > 0
            if cleared:
                at = time.time() if now is None else now  # only the event's stamp
                self._emit(EventKind.COOLDOWN_CLEARED, at, runtime=runtime)
            return cleared
