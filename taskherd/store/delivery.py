"""Delivery targets' store interface: aliases, and the outbox of events to send to them.

The outbox rows of a settle are written by the settle itself (`SQLStore._finalize`, from the
task's `deliver_to` and `deliver_on`), those of a budget pause by the pause's own transition
(`store/sql_budgets.py`, to the role's); `services/delivery.py` sends them after the commit.
"""

from __future__ import annotations

import abc

from taskherd.model.delivery import Alias, Delivery


class DeliveryStore(abc.ABC):
    @abc.abstractmethod
    def add_alias(self, name: str, channel: str, target: str, now: float, *,
                  format: str = "json", description: str | None = None) -> Alias:
        """Raise StoreError when the name is taken."""

    @abc.abstractmethod
    def get_alias(self, name: str) -> Alias | None: ...

    @abc.abstractmethod
    def list_aliases(self) -> list[Alias]: ...

    @abc.abstractmethod
    def remove_alias(self, name: str) -> bool: ...

    @abc.abstractmethod
    def due_deliveries(self, now: float, limit: int = 50) -> list[Delivery]: ...

    @abc.abstractmethod
    def take_delivery(self, delivery: Delivery, retry_at: float) -> Delivery | None:
        """Count an attempt and move its next try to `retry_at`; None if another took it."""

    @abc.abstractmethod
    def delivery_sent(self, delivery_id: int, now: float) -> None: ...

    @abc.abstractmethod
    def delivery_failed(self, delivery_id: int, error: str, retry_at: float | None) -> None:
        """Try again at `retry_at`, or (None) keep it as failed."""

    @abc.abstractmethod
    def get_delivery(self, delivery_id: int) -> Delivery | None: ...

    @abc.abstractmethod
    def retry_deliveries(self, now: float, delivery_id: int | None = None) -> int:
        """Failed rows (one, or every one) due again at `now`, their attempts counted afresh;
        how many. A pending or sent row is left as it is."""

    @abc.abstractmethod
    def list_deliveries(self, *, alias: str | None = None, state: str | None = None,
                        limit: int = 50) -> list[Delivery]: ...

    @abc.abstractmethod
    def delivery_counts(self) -> dict[str, dict[str, int]]:
        """alias → state → how many."""
