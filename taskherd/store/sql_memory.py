"""Long-term memory over named SQL (`store/sql/common/memory.sql`, and each dialect's
`search_memories`); mixed into `SQLStore`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.store.memory import SHARED, Memory, MemoryStore, NewMemory

if TYPE_CHECKING:
    from taskherd.store.connection import Connection
    from taskherd.store.requests import RequestKey


class SQLMemory(MemoryStore):
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _note_request(self, db: Connection, key: RequestKey | None,
                          made: dict[str, Any]) -> None: ...

    def _text_query(self, words: Sequence[str]) -> str:
        """The dialect's full-text query matching any of `words` (letters and digits only)."""
        raise NotImplementedError

    def add_memories(self, batch: Sequence[NewMemory], now: float,
                     once: RequestKey | None = None) -> list[Memory]:
        with self._write() as db:
            added = [Memory.from_row(db.execute(self.q["insert_memory"], {
                "scope": new.scope, "section": new.section, "text": new.text,
                "source": new.source, "now": now, "embedding": new.embedding,
                "embedding_model": new.embedding_model}).fetchall()[0]) for new in batch]
            self._note_request(db, once, {"memories": [memory.id for memory in added]})
            return added

    def get_memory(self, memory_id: int) -> Memory | None:
        rows = self._all("get_memory", {"id": memory_id})
        return Memory.from_row(rows[0]) if rows else None

    def search_memories(self, scope: str, words: Sequence[str], limit: int) -> list[Memory]:
        if not words:
            return []
        params = {"query": self._text_query(words), "scope": scope, "shared": SHARED,
                  "limit": limit}
        return [Memory.from_row(row) for row in self._all("search_memories", params)]

    def list_memories(self, scope: str | None, limit: int) -> list[Memory]:
        params = {"scope": scope, "shared": SHARED if scope else None, "limit": limit}
        return [Memory.from_row(row) for row in self._all("list_memories", params)]

    def forget_memory(self, memory_id: int) -> bool:
        with self._write() as db:
            return db.execute(self.q["forget_memory"], {"id": memory_id}).rowcount > 0

    def embedded_memories(self, scope: str, model: str) -> list[tuple[int, str]]:
        params = {"scope": scope, "shared": SHARED, "embedding_model": model}
        return [(row["id"], row["embedding"]) for row in self._all("embedded_memories", params)]
