"""Durations as people write them in taskherd.toml and on the command line.

``parse_duration("1h30m") == 5400.0``. Shared by the config loader (timeouts,
backoff, stagger) and the schedules (``every = "30m"``), so one spelling
works everywhere.
"""

from __future__ import annotations

import math
import re

# Largest unit first; each unit at most once ("1h30m", not "30m1h" or "1h1h"),
# so a typo such as "1m30h" is reported rather than silently meaning 30h01m.
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")

ACCEPTED = "a number of seconds or amounts with units d/h/m/s, e.g. '90s', '10m', '1h30m', '2d'"


class DurationError(ValueError):
    """A duration that cannot be read; the message names the field and value."""


def parse_duration(value: object, *, field: str = "duration") -> float:
    """Return ``value`` in seconds: ``"90s"``, ``"10m"``, ``"1h30m"``, ``"2d"``, ``90``, ``"1.5"``.

    Negative, infinite and NaN values are rejected; zero is allowed (a
    ``stagger = 0`` means "no gap"), callers that need a positive value check it.
    """
    if isinstance(value, bool):  # bool is an int subclass; `timeout = true` is a mistake
        raise _error(field, value)
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value.strip().lower(), field, value)
    else:
        raise _error(field, value)
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise _error(field, value)
    return seconds


def _parse_text(text: str, field: str, original: str) -> float:
    if _NUMBER.fullmatch(text):
        return float(text)
    compact = re.sub(r"\s+", "", text)
    parts = _PART.findall(compact)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise _error(field, original)
    units = [unit for _, unit in parts]
    order = list(_UNITS)
    if units != sorted(set(units), key=order.index):
        raise _error(field, original, "units must appear once each, largest first")
    return sum(float(amount) * _UNITS[unit] for amount, unit in parts)


def _error(field: str, value: object, why: str = "") -> DurationError:
    reason = f" ({why})" if why else ""
    return DurationError(f"{field}: {value!r} is not a duration{reason}; use {ACCEPTED}")
