"""What the supervisor keeps in the store about the agents it watches, and the probe after a
rate limit or an endpoint's outage: the interface (mixed into `Store`) and its one
implementation over named SQL (`store/sql/common/queries.sql`, mixed into `SQLStore`).

Verdicts are written when they change, never on every check, so a thousand quiet agents cost
the database nothing; `taskherd runs list` and `task show` read them from here.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.model import Cooldown, EventKind, Liveness
from taskherd.model.delivery import ENDPOINT_DOWN, ENDPOINT_UP
from taskherd.model.record import Record

if TYPE_CHECKING:
    from taskherd.store.connection import Connection


class VerdictChange(Record):
    """A running agent's new liveness verdict."""

    run_id: int
    liveness: Liveness
    since: float  # when it began: for `quiet`, the agent's last sign of work
    note: str | None = None  # the question it waits at, or the repeated block


class WatchStore(abc.ABC):
    @abc.abstractmethod
    def set_liveness(self, changes: Iterable[VerdictChange]) -> int:
        """Record new verdicts of open runs, in one transaction; how many were written."""

    @abc.abstractmethod
    def note_input_needed(self, run_id: int, task_id: int, question: str, now: float) -> None:
        """The agent waits at `question`: record it as the run's verdict, and tell listeners
        (an `input_needed` event), whether the agent is then ended or kept for an answer."""

    @abc.abstractmethod
    def heartbeats_since(self, node: str, since: float) -> dict[int, float]:
        """Open runs of `node` whose agent called in at or after `since`: id → heartbeat_at."""

    @abc.abstractmethod
    def open_run_ids(self, node: str) -> dict[int, float | None]:
        """The open runs of `node`: id → spawned_at (None: not spawned yet)."""

    @abc.abstractmethod
    def renew_due_leases(self, node: str, now: float, lease_seconds: float, batch: int) -> int:
        """Renew up to `batch` of the node's leases that were last renewed more than a third
        of a lease ago, oldest first; how many."""

    @abc.abstractmethod
    def unspawned_run_ids(self, node: str) -> list[int]:
        """The open runs of `node` not spawned yet (an index's few rows, not every open run)."""

    # -- the probe after a rate limit ------------------------------------------------------

    @abc.abstractmethod
    def all_cooldowns(self) -> list[Cooldown]:
        """Every cooldown row: paused runtimes, and lifted ones still waiting for a probe."""

    @abc.abstractmethod
    def take_probe(self, runtime: str, node: str, now: float) -> bool:
        """Take the one probe of a runtime whose cooldown has lifted; False if another did."""

    @abc.abstractmethod
    def attach_probe(self, runtime: str, node: str, run_id: int, now: float) -> None: ...

    @abc.abstractmethod
    def release_probe(self, runtime: str, run_id: int | None = None) -> bool:
        """The probe told nothing (no task to run, crashed, lost): let another one go."""

    @abc.abstractmethod
    def probe_passed(self, runtime: str, run_id: int, now: float,
                     targets: Sequence[str] = ()) -> bool:
        """The probe got past the provider: the cooldown is deleted, the runtime is free. If
        it was an outage, an `endpoint_up` outbox row per delivery alias in `targets`."""

    @abc.abstractmethod
    def endpoint_down(self, runtime: str, until: float, reason: str, span: float,
                      targets: Sequence[str], now: float) -> Cooldown:
        """Pause `runtime` until `until` because its endpoint is down (one transaction). The
        outage's start is kept from a cooldown that is one already; one that begins now is
        told: the event, and an `endpoint_down` outbox row per delivery alias in `targets`."""


class SQLWatch(WatchStore):
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _emit(self, kind: EventKind, now: float, **fields: Any) -> None: ...
        def _order_claims(self, db: Connection) -> None: ...

    def set_liveness(self, changes: Iterable[VerdictChange]) -> int:
        rows = [{"run_id": c.run_id, "liveness": c.liveness.value, "since": c.since,
                 "note": c.note} for c in changes]
        if not rows:
            return 0
        with self._write() as db:
            for row in rows:
                db.execute(self.q["set_liveness"], row)
        return len(rows)

    def note_input_needed(self, run_id: int, task_id: int, question: str, now: float) -> None:
        row = {"run_id": run_id, "liveness": Liveness.WAITING_INPUT.value, "since": now,
               "note": question}
        with self._write() as db:
            db.execute(self.q["set_liveness"], row)
            self._emit(EventKind.INPUT_NEEDED, now, task_id=task_id, run_id=run_id)

    def heartbeats_since(self, node: str, since: float) -> dict[int, float]:
        rows = self._all("heartbeats_since", {"node": node, "since": since})
        return {row["id"]: row["heartbeat_at"] for row in rows}

    def open_run_ids(self, node: str) -> dict[int, float | None]:
        return {row["id"]: row["spawned_at"] for row in self._all("open_run_ids", {"node": node})}

    def renew_due_leases(self, node: str, now: float, lease_seconds: float, batch: int) -> int:
        params = {"node": node, "lease_until": now + lease_seconds,
                  "renew_before": now + lease_seconds * 2 / 3, "batch": batch}
        with self._write() as db:
            return db.execute(self.q["renew_due_leases"], params).rowcount

    def unspawned_run_ids(self, node: str) -> list[int]:
        return [row["id"] for row in self._all("unspawned_run_ids", {"node": node})]

    def all_cooldowns(self) -> list[Cooldown]:
        return [Cooldown.from_row(row) for row in self._all("all_cooldowns")]

    def take_probe(self, runtime: str, node: str, now: float) -> bool:
        with self._write() as db:
            params = {"runtime": runtime, "node": node, "now": now}
            return db.execute(self.q["take_probe"], params).rowcount > 0

    def attach_probe(self, runtime: str, node: str, run_id: int, now: float) -> None:
        with self._write() as db:
            params = {"runtime": runtime, "node": node, "run_id": run_id, "now": now}
            db.execute(self.q["attach_probe"], params)

    def release_probe(self, runtime: str, run_id: int | None = None) -> bool:
        with self._write() as db:
            params = {"runtime": runtime, "run_id": run_id}
            return db.execute(self.q["release_probe"], params).rowcount > 0

    def probe_passed(self, runtime: str, run_id: int, now: float,
                     targets: Sequence[str] = ()) -> bool:
        with self._write() as db:
            params = {"runtime": runtime, "run_id": run_id, "now": now}
            rows = db.execute(self.q["probe_passed"], params).fetchall()
            if rows:
                self._emit(EventKind.COOLDOWN_CLEARED, now, runtime=runtime)
                lifted = Cooldown.from_row(rows[0])
                if lifted.down_since is not None:
                    self._tell_outage(db, ENDPOINT_UP, lifted, targets, now)
            return bool(rows)

    def endpoint_down(self, runtime: str, until: float, reason: str, span: float,
                      targets: Sequence[str], now: float) -> Cooldown:
        with self._write() as db:
            self._order_claims(db)  # a claim under way either sees the pause or precedes it
            rows = db.execute(self.q["cooldown_of"], {"runtime": runtime}).fetchall()
            since = rows[0]["down_since"] if rows else None
            params = {"runtime": runtime, "until": until, "reason": reason, "now": now,
                      "span": span, "down_since": now if since is None else since}
            cooldown = Cooldown.from_row(db.execute(self.q["set_cooldown"], params).fetchall()[0])
            self._emit(EventKind.COOLDOWN_SET, now, runtime=runtime)
            if since is None:
                self._tell_outage(db, ENDPOINT_DOWN, cooldown, targets, now)
            return cooldown

    def _tell_outage(self, db: Connection, event: str, cooldown: Cooldown,
                     targets: Sequence[str], now: float) -> None:
        if not targets:
            return
        body = {"runtime": cooldown.runtime, "down_since": cooldown.down_since,
                "reason": cooldown.reason}
        payload = json.dumps({"event": event, "at": now, "endpoint": body})
        for alias in dict.fromkeys(targets):
            db.execute(self.q["insert_delivery"], {"alias": alias, "event": event,
                                                   "task_id": None, "payload": payload,
                                                   "now": now})
        self._emit(EventKind.DELIVERY_QUEUED, now)
