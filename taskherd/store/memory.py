"""Long-term memory's store interface: entries per role (or shared), full-text search
ranked by relevance, and the vectors hybrid search compares (`ops/memory.py`)."""

from __future__ import annotations

import abc
import re
from collections.abc import Sequence
from typing import Any

from taskherd.model import row_fields
from taskherd.model.record import Record
from taskherd.store.requests import RequestKey

SHARED = "@shared"  # the scope every role searches besides its own
WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_WORDS = 32


class NewMemory(Record):
    scope: str
    text: str
    source: str  # agent, person, short-term
    section: str | None = None
    embedding: str | None = None  # a JSON array of floats
    embedding_model: str | None = None


class Memory(Record):
    id: int
    scope: str
    section: str | None
    text: str
    source: str
    created_at: float
    embedding: str | None
    embedding_model: str | None

    @classmethod
    def from_row(cls, row: Any) -> Memory:
        return cls(**row_fields(row))

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        del data["embedding"]  # a vector is for ranking, not for reading
        return data


def query_words(text: str) -> list[str]:
    """The words of a search, lower-cased, each once, as the store's query is built from:
    punctuation and operators in the caller's text mean nothing to it."""
    return list(dict.fromkeys(word.lower() for word in WORD.findall(text)))[:MAX_QUERY_WORDS]


class MemoryStore(abc.ABC):
    @abc.abstractmethod
    def add_memories(self, batch: Sequence[NewMemory], now: float,
                     once: RequestKey | None = None) -> list[Memory]:
        """All in one transaction (with `once`, noted as that agent request's work)."""

    @abc.abstractmethod
    def get_memory(self, memory_id: int) -> Memory | None: ...

    @abc.abstractmethod
    def search_memories(self, scope: str, words: Sequence[str], limit: int) -> list[Memory]:
        """Entries of `scope` and shared ones matching any of `words`, best first."""

    @abc.abstractmethod
    def list_memories(self, scope: str | None, limit: int) -> list[Memory]:
        """Newest first; scope None lists all."""

    @abc.abstractmethod
    def forget_memory(self, memory_id: int) -> bool: ...

    @abc.abstractmethod
    def embedded_memories(self, scope: str, model: str) -> list[tuple[int, str]]:
        """(id, JSON vector) of every entry of `scope` and shared embedded with `model`."""
