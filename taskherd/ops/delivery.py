"""Delivery targets: named aliases tasks, roles and jobs tell when a task settles
(`deliver_to = ["@ops"]`, `on = [...]`), and the status of what was sent to them."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from taskherd.host.webhook_urls import RefusedTarget, check_url, redacted
from taskherd.model.delivery import CHANNELS, FORMATS, Alias, Delivery
from taskherd.ops import BadInput, Queue
from taskherd.store import StoreError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
STATES = ("pending", "sent", "failed")


class DeliveryNotFailed(StoreError):
    """A retry asked of a delivery that is pending or sent: nothing to do."""


def add_alias(queue: Queue, name: str, channel: str, target: str, now: float, *,
              format: str = "json", description: str | None = None) -> Alias:
    """Add an alias. `target` is a URL (webhook), a command line split into argv without a
    shell (command), or an absolute path (file)."""
    name = name.removeprefix("@")
    if not NAME.match(name):
        raise BadInput(f"alias {name!r}: letters, digits, '_', '.' and '-' (1 to 64)")
    if channel not in CHANNELS:
        raise BadInput(f"channel {channel!r} is not one of: {', '.join(CHANNELS)}")
    if format not in FORMATS:
        raise BadInput(f"format {format!r} is not one of: {', '.join(FORMATS)}")
    if format != "json" and channel != "webhook":
        raise BadInput(f"format {format!r} shapes a webhook's body; channel {channel} sends JSON")
    return queue.store.add_alias(name, channel, _target(channel, target), now, format=format,
                                 description=description)


def _target(channel: str, target: str) -> str:
    if channel == "webhook":
        try:
            check_url(target)  # never a link-local or metadata address (see webhook_urls)
        except RefusedTarget as error:
            raise BadInput(str(error)) from None
        return target  # as given, credentials too: delivery needs them; listings redact
    if channel == "command":
        try:
            argv = shlex.split(target)
        except ValueError as error:
            raise BadInput(f"command target {target!r}: {error}") from error
        if not argv:
            raise BadInput("command target is empty: give the program and its arguments")
        return json.dumps(argv)  # run as this argv, never through a shell
    path = Path(target).expanduser()
    if not path.is_absolute():
        raise BadInput(f"file target {target!r}: expected an absolute path")
    if not path.parent.is_dir():
        raise BadInput(f"file target {target!r}: folder {path.parent} does not exist")
    return str(path)


def list_aliases(queue: Queue) -> list[Alias]:
    """Every alias, its target as people may see it (`shown_target`)."""
    return [replace(alias, target=shown_target(alias)) for alias in queue.store.list_aliases()]


def deliveries_of(queue: Queue, alias: str, *, limit: int = 20) -> list[Delivery]:
    """An alias's latest deliveries, newest first."""
    return queue.store.list_deliveries(alias=alias, limit=limit)


def shown_target(alias: Alias) -> str:
    """A target without its secrets: a URL's credentials, query values and token-like path
    segments redacted (a command's URL arguments too); the store keeps it as given."""
    if alias.channel == "webhook":
        return redacted(alias.target)
    if alias.channel == "command":
        argv = json.loads(alias.target)
        return shlex.join(redacted(arg) if "://" in arg else arg for arg in argv)
    return alias.target


def retry(queue: Queue, now: float, delivery_id: int | None = None) -> int:
    """Put a failed delivery (or, with None, every failed one) back to due, its attempts
    counted afresh: for after its target was fixed. How many went back."""
    if delivery_id is None:
        return queue.store.retry_deliveries(now)
    found = queue.store.get_delivery(delivery_id)
    if found is None:
        raise BadInput(f"no delivery with id {delivery_id} (taskherd alias status lists them)")
    if found.state != "failed":
        raise DeliveryNotFailed(f"delivery {delivery_id} is {found.state}, not failed: only a "
                                "failed delivery is retried")
    if not queue.store.retry_deliveries(now, delivery_id):
        raise DeliveryNotFailed(f"delivery {delivery_id} is no longer failed")
    return 1


def remove_alias(queue: Queue, name: str) -> None:
    if not queue.store.remove_alias(name.removeprefix("@")):
        raise BadInput(f"no alias named {name!r}")


def status(queue: Queue, *, limit: int = 20) -> dict[str, Any]:
    """Per alias: deliveries pending, sent and failed; and the latest that did not succeed."""
    counts = queue.store.delivery_counts()
    names = sorted({alias.name for alias in queue.store.list_aliases()} | set(counts))
    troubled = [d for d in queue.store.list_deliveries(limit=limit * 5)
                if d.state == "failed" or d.last_error][:limit]
    return {
        "aliases": [{"alias": name, **{state: counts.get(name, {}).get(state, 0)
                                       for state in STATES}} for name in names],
        "problems": [_problem(d) for d in troubled],
    }


def _problem(delivery: Delivery) -> dict[str, Any]:
    return {key: getattr(delivery, key) for key in (
        "id", "alias", "event", "task_id", "state", "attempts", "last_error", "created_at",
        "next_attempt_at")}
