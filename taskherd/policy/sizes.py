"""Sizes as people write them in taskherd.toml: ``parse_size("512MiB") == 512 * 2**20``.

Binary units (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (kB, MB, GB, TB) of 1000,
as `df -h` and `df -H` print them; a bare number is bytes. A unit is read whatever its case
("512mib"), but "M" or "G" alone is refused: which of the two it meant is a guess.
"""

from __future__ import annotations

import math
import re

_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")

ACCEPTED = "a size such as '512MiB', '2GiB', '500MB' or a number of bytes"


def parse_size(value: object) -> int:
    """`value` in bytes: ``"512MiB"``, ``"1.5 GiB"``, ``"500MB"``, ``1048576``, ``"0"``.
    ValueError (naming what is accepted) for anything else, negative or fractional bytes;
    TypeError for a value that is no number nor text (a boolean, a list)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{value!r}: expected {ACCEPTED}")
    if isinstance(value, str):
        match = _SIZE.fullmatch(value.strip().lower())
        if match is None or match.group(2) not in _UNITS:
            raise ValueError(f"{value!r}: expected {ACCEPTED}")
        amount = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        amount = float(value)
    if math.isnan(amount) or math.isinf(amount) or amount < 0 or amount != int(amount):
        raise ValueError(f"{value!r}: expected {ACCEPTED}")
    return int(amount)


def format_size(size: int) -> str:
    """`size` bytes as a person reads it: '0 B', '812 KiB', '37.5 MiB', '2.0 GiB'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            amount = size / scale
            return f"{amount:.1f} {unit}" if amount < 100 else f"{amount:.0f} {unit}"
    return f"{size} B"
