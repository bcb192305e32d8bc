"""What the store's shared logic needs of a dialect's connection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Cursor(Protocol):
    """What is read of a statement's cursor: its rows (sqlite3.Row or psycopg's dict rows,
    both read by column name) and how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchall(self) -> list[Any]: ...

    def fetchone(self) -> Any: ...


class Connection(Protocol):
    """sqlite3's and psycopg's connections both run `execute(sql, params)` and return a cursor
    with `fetchall()` and `rowcount`."""

    def execute(self, sql: str, params: Mapping[str, Any] = ..., /) -> Cursor: ...
