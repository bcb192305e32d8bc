"""The deliverer: sends the outbox rows settles wrote (`store/sql_delivery.py`) to their
aliases, after the commit, retried with backoff until acknowledged, then kept as failed.

Each attempt is taken in the store before it is made (its next try moves past the send's
timeout), so two nodes never send one row at once; a row is marked sent once its target
acknowledged, and never sent again after that. Runs in a thread: a slow webhook must not
hold the daemon's loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from taskherd.host.senders import DeliveryFailed, direct_client, send
from taskherd.host.webhook_urls import redact_in
from taskherd.model.delivery import Delivery
from taskherd.model.settings import DeliveryConfig
from taskherd.store import Store

log = logging.getLogger("taskherd.delivery")


@dataclass(frozen=True)
class DeliverySettings:
    max_attempts: int = 8  # then the row is kept as failed (`taskherd alias status`, doctor)
    backoff: float = 5.0  # seconds before the second attempt, doubling after each failure
    backoff_cap: float = 600.0
    timeout: float = 10.0  # of one send
    interval: float = 2.0  # fallback look for due rows; settles also wake it
    batch: int = 50

    @classmethod
    def of(cls, config: DeliveryConfig) -> DeliverySettings:
        return cls(max_attempts=config.max_attempts, backoff=config.backoff,
                   backoff_cap=config.backoff_cap, timeout=config.timeout)


class Deliverer:
    def __init__(self, store: Store, clock: Callable[[], float],
                 settings: DeliverySettings = DeliverySettings()):
        self.store = store
        self.clock = clock
        self.settings = settings

    def run_once(self, now: float) -> dict[str, int]:
        counts = {"sent": 0, "retrying": 0, "failed": 0}
        due = self.store.due_deliveries(now, self.settings.batch)
        if not due:
            return counts
        # Made only when there is something to send: most passes find nothing.
        with direct_client(self.settings.timeout) as client:
            for delivery in due:
                # Taken for longer than a send can last: no other pass sends it meanwhile.
                taken = self.store.take_delivery(delivery, now + self.settings.timeout * 3)
                if taken is not None:
                    counts[self._attempt(taken, client)] += 1
        return counts

    def _attempt(self, delivery: Delivery, client: object) -> str:
        alias = self.store.get_alias(delivery.alias)
        try:
            if alias is None:
                raise DeliveryFailed(f"no alias named {delivery.alias!r} (taskherd alias add)")
            send(alias, delivery, self.settings.timeout, client)
        except DeliveryFailed as error:
            # Kept in the row (alias status) and logged: never with the URL's secrets.
            said = redact_in(str(error), alias.target) if alias is not None else str(error)
            return self._failed(delivery, said)
        self.store.delivery_sent(delivery.id, self.clock())
        log.info("delivery %s: %s of task %s sent to @%s", delivery.id, delivery.event,
                 delivery.task_id, delivery.alias)
        return "sent"

    def _failed(self, delivery: Delivery, error: str) -> str:
        if delivery.attempts >= self.settings.max_attempts:
            self.store.delivery_failed(delivery.id, error, None)
            log.error("delivery %s to @%s failed after %s attempts: %s", delivery.id,
                      delivery.alias, delivery.attempts, error)
            return "failed"
        wait = min(self.settings.backoff * 2 ** (delivery.attempts - 1), self.settings.backoff_cap)
        self.store.delivery_failed(delivery.id, error, self.clock() + wait)
        log.warning("delivery %s to @%s: attempt %s failed (%s); again in %.0fs", delivery.id,
                    delivery.alias, delivery.attempts, error, wait)
        return "retrying"

    def next_wake(self, now: float) -> float:
        return now + self.settings.interval
