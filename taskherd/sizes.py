"""Sizes in bytes as people write them in taskherd.toml: ``"64MiB"``, ``"512KiB"``, ``65536``.

``parse_size("64MiB") == 67108864``. Binary units (KiB, MiB, GiB) and their decimal cousins
(KB, MB, GB) are both read, each as it says; a bare number is bytes.
"""

from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "k": 1 << 10, "m": 1 << 20,
          "g": 1 << 30}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
ACCEPTED = "a size in bytes, or with a unit such as '64MiB', '512KiB', '1GiB'"


def parse_size(value: object) -> int:
    """The number of bytes `value` stands for; ValueError (TypeError) when it is not a size."""
    if isinstance(value, bool):  # an int subclass: `max_log_bytes = true` is a mistake
        raise TypeError(f"{value!r} is not a size")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value!r} is negative")
        return value
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a size")
    match = _SIZE.fullmatch(value.strip().lower())
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"{value!r} is not a size")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def format_size(count: int) -> str:
    """`count` bytes the short way a person reads them: '64MiB', '1.5GiB', '900B'."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= factor:
            return f"{count / factor:.4g}{unit}"
    return f"{count}B"
