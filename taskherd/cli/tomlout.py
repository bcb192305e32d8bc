"""A TOML writer for the plain values taskherd writes out (`taskherd import`'s fragment,
`taskherd export`): strings, numbers, booleans, lists and tables. Python reads TOML in the
standard library but cannot write it, and this subset is all we print.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else value(name)


def value(item: Any) -> str:
    """One inline value. A JSON string is a TOML basic string (same escapes)."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int | float):
        return repr(item)
    if isinstance(item, str):
        return json.dumps(item, ensure_ascii=False)
    if isinstance(item, Mapping):
        return "{" + ", ".join(f"{key(k)} = {value(v)}" for k, v in item.items()) + "}"
    if isinstance(item, Sequence):
        return "[" + ", ".join(value(v) for v in item) + "]"
    raise TypeError(f"no TOML form for {item!r}")


def table(header: str, items: Mapping[str, Any]) -> list[str]:
    """`[header]` (or `[[header]]` when given so) and its keys, None values left out."""
    lines = [header]
    lines += [f"{key(k)} = {value(v)}" for k, v in items.items() if v is not None]
    return lines
