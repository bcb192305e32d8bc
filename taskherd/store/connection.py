"""What the store's shared logic needs of a dialect's connection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Connection(Protocol):
    """sqlite3's and psycopg's connections both run `execute(sql, params)` and return a cursor
    with `fetchall()` and `rowcount`."""

    def execute(self, sql: str, params: Mapping[str, Any] = ..., /) -> Any: ...
