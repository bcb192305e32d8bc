"""Times for machines and people: ISO 8601 with its offset beside the unix seconds.

The CLI's --json shows `created_at` as ISO 8601 and keeps the number as `created_at_epoch`.
The HTTP API and its event stream always gave the number as `created_at`; clients read it,
so it keeps that meaning there and the ISO form is added beside it as `created_at_iso`, in
the fleet's zone ([daemon] timezone; the machine's when unset).
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from typing import Any

# Times whose name does not end in `_at`.
TIME_FIELDS = frozenset({"at", "until", "run_after", "scheduled_for", "last_seen", "up_since"})


def is_time(key: str, value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and (key.endswith("_at") or key in TIME_FIELDS))


def iso_time(timestamp: float, zone: tzinfo | None = None) -> str:
    """ISO 8601 with its offset, to the millisecond, in `zone` (None: the machine's)."""
    if zone is not None:
        return _iso_in(timestamp, zone)
    return datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec="milliseconds")


@lru_cache(maxsize=1024)
def _iso_in(timestamp: float, zone: tzinfo) -> str:
    # Kept: an answer's times repeat (a task just added is created, updated and due at the
    # same moment). A new moment is its second's text with its milliseconds put in: a zone
    # changes its offset only at a whole second, and a burst's moments share their seconds,
    # where each made its own datetime in its zone (6 µs, a tenth of the API's work on a task
    # added). The machine's own zone (None) is read each time, as it may change.
    fraction, whole = math.modf(timestamp)
    micro = round(fraction * 1e6)  # as datetime.fromtimestamp rounds: half to even
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    elif micro < 0:
        whole, micro = whole - 1, micro + 1_000_000
    head, tail = _second_in(int(whole), zone)
    return f"{head}.{micro // 1000:03d}{tail}"


@lru_cache(maxsize=256)
def _second_in(second: int, zone: tzinfo) -> tuple[str, str]:
    """A whole second's ISO 8601 text in `zone`, cut where its milliseconds go."""
    text = datetime.fromtimestamp(second, zone).isoformat(timespec="seconds")
    return text[:19], text[19:]  # YYYY-MM-DDTHH:MM:SS, then its offset


def zone_named(name: str | None) -> tzinfo | None:
    """The zone of [daemon] timezone (validated by the config), None when unset."""
    if not name:
        return None
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def with_iso(data: Any, zone: tzinfo | None = None) -> Any:
    """`data` with `<name>_iso` beside every time `<name>` (unix seconds), at any depth;
    records in it (a `to_dict`, or a dataclass) as their dicts; everything else, and the
    numbers themselves, as they were. One walk: on a busy API route, walking an answer
    twice cost more than the operation."""
    if data is None or isinstance(data, str | int | float):  # (a bool is an int)
        return data
    if isinstance(data, dict):
        shown: dict[str, Any] = {}
        for key, value in data.items():
            kind = type(value)
            # Most values of an answer are plain: they are taken as they are, without a
            # call each (a task's answer is forty of them, on the API's busiest routes).
            if kind is int or kind is float:
                shown[key] = value
                iso_key = _ISO_KEYS.get(key)
                if iso_key is None:
                    iso_key = _iso_key(key)
                if iso_key:
                    shown[iso_key] = _iso_in(value, zone) if zone is not None else iso_time(value)
            elif kind is str or value is None or kind is bool:
                shown[key] = value
            else:
                shown[key] = with_iso(value, zone)
        return shown
    if isinstance(data, list | tuple):
        return [with_iso(item, zone) for item in data]
    if hasattr(data, "to_dict"):
        return with_iso(data.to_dict(), zone)
    if hasattr(data, "__dataclass_fields__"):
        return with_iso(dict(data.__dict__), zone)
    return data


_ISO_KEYS: dict[str, str] = {}  # a name's `_iso` name, "" when it is no time: kept


def _iso_key(key: str) -> str:
    iso_key = f"{key}_iso" if key.endswith("_at") or key in TIME_FIELDS else ""
    if len(_ISO_KEYS) < 4096:  # an answer's own names; a meta table's may be any
        _ISO_KEYS[key] = iso_key
    return iso_key


def reading_zone(name: str | None) -> tzinfo:
    """The zone a reset clock printed without one ("resets 3am") is read in: the daemon's
    `timezone` when set, else this machine's own zone, the one the CLI printed it in."""
    # zoneinfo where a zone is read, as in zone_named: every CLI command imports this module.
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if name:
        try:
            return UTC if name.upper() in ("UTC", "GMT", "Z") else ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return UTC
    tz_env = os.environ.get("TZ", "").lstrip(":")
    if tz_env:
        try:
            return ZoneInfo(tz_env)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        with open("/etc/localtime", "rb") as local:
            return ZoneInfo.from_file(local)
    except (OSError, ValueError):
        return datetime.now().astimezone().tzinfo or UTC
