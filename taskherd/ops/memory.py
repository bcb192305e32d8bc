"""Role memory. Short-term: a markdown file per role (`memory_file.py`) that each run reads
in its prompt and writes; kept within its line cap after each run by moving the oldest
entries into long-term memory. Long-term: entries per role (or shared by every role),
searched by relevance (full-text; with `[memory] embeddings`, hybrid with vector
similarity), so an agent searches before acting: `taskherd memory search WORDS`.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from taskherd.config import make_private_dir
from taskherd.model.settings import Config
from taskherd.ops import BadInput, Queue
from taskherd.ops.agent import made_before
from taskherd.policy import memory_file
from taskherd.store import StoreError
from taskherd.store.memory import SHARED as SHARED  # the shared scope, for the pages too
from taskherd.store.memory import Memory, NewMemory, query_words
from taskherd.store.requests import RequestKey

log = logging.getLogger("taskherd.memory")
MAX_TEXT = 8000  # characters of one entry: a lesson, not a document
CANDIDATES = 50  # of each ranking, fused into one (reciprocal rank fusion)
RRF_K = 60  # the usual constant: a rank's weight is 1 / (RRF_K + rank)
SOURCES = ("agent", "person", "short-term")


def scope_of(queue: Queue, role: str | None, shared: bool = False) -> str:
    """The scope an entry belongs to: a role (defined, or a registered agent) or shared."""
    if shared:
        if role is not None:
            raise BadInput("give a role or --shared, not both")
        return SHARED
    if role is None:
        raise BadInput("name the role (--role NAME) or --shared")
    known = set(queue.config.roles) | {agent.name for agent in queue.store.list_agents()}
    if known and role not in known and role != SHARED:
        raise BadInput(f"role {role!r} is not defined (roles: {', '.join(sorted(known))})")
    return role


def add(queue: Queue, scope: str, text: object, now: float, *, source: str = "person",
        section: str | None = None, once: RequestKey | None = None) -> Memory:
    """Add an entry; a second try of an agent's request `once` gets the first's entry."""
    if (made := made_before(queue, once)) is not None:
        found = queue.store.get_memory(made["memories"][0])
        if found is None:
            raise StoreError(f"memory {made['memories'][0]}, which this request added, was "
                             "forgotten since")
        return found
    if not isinstance(text, str) or not text.strip():
        raise BadInput("a memory needs some text")
    if len(text) > MAX_TEXT:
        raise BadInput(f"the text is {len(text)} characters long (at most {MAX_TEXT})")
    if source not in SOURCES:
        raise BadInput(f"source {source!r} is not one of: {', '.join(SOURCES)}")
    return _store(queue, [NewMemory(scope, text.strip(), source, section)], now, once)[0]


def search(queue: Queue, scope: str, text: object, *, limit: int = 5) -> list[Memory]:
    """The entries of `scope` (and shared ones) most relevant to `text`, best first."""
    if not isinstance(text, str) or not query_words(text):
        raise BadInput("search for some words")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        raise BadInput(f"limit = {limit!r}: expected a whole number from 1 to 100")
    words = query_words(text)
    settings = queue.config.memory.embeddings
    if settings is None:
        return queue.store.search_memories(scope, words, limit)
    by_text = queue.store.search_memories(scope, words, CANDIDATES)
    from taskherd.host.embeddings import EmbeddingsUnavailable

    try:
        by_meaning = _nearest(queue, scope, text, CANDIDATES)
    except EmbeddingsUnavailable as error:  # the endpoint is away: full text still answers
        log.warning("memory search: embeddings unavailable, full-text ranking only: %s", error)
        return by_text[:limit]
    return _fused(queue, [[m.id for m in by_text], by_meaning], {m.id: m for m in by_text},
                  limit)


def list_memories(queue: Queue, scope: str | None, *, limit: int = 50) -> list[Memory]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise BadInput(f"limit = {limit!r}: expected a whole number from 1 to 1000")
    return queue.store.list_memories(scope, limit)


def forget(queue: Queue, memory_id: int) -> None:
    if not queue.store.forget_memory(memory_id):
        raise BadInput(f"no memory with id {memory_id}")


# -- the short-term file ---------------------------------------------------------------


def short_term_file(config: Config, role: str) -> Path:
    """The role's memory file, created from the template (private) when missing."""
    path = config.memory.file_of(config.daemon.data_dir, role)
    if not path.exists():
        make_private_dir(path.parent)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with open(fd, "w", encoding="utf-8") as out:
            out.write(memory_file.template(role))
    return path


def keep_short_term(queue: Queue, role: str, now: float) -> int:
    """After a run: bring the role's file within its cap, the overflow stored in long-term
    memory first and the file rewritten after, so a crash in between keeps a line twice,
    never loses one. Returns how many entries moved."""
    path = queue.config.memory.file_of(queue.config.daemon.data_dir, role)
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return 0
    trimmed = memory_file.trim(text, queue.config.memory.short_term_lines)
    if not trimmed.moved:
        return 0
    _store(queue, [NewMemory(role, entry.text, "short-term", entry.section)
                   for entry in trimmed.moved], now)
    partial = path.with_name(path.name + ".trim")
    fd = os.open(partial, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with open(fd, "w", encoding="utf-8") as out:
        out.write(trimmed.text)
    os.replace(partial, path)
    return len(trimmed.moved)


# -- embeddings -------------------------------------------------------------------------


def _store(queue: Queue, batch: list[NewMemory], now: float,
           once: RequestKey | None = None) -> list[Memory]:
    """Write `batch`, with vectors when an endpoint is set; when it is away the entries are
    kept without them (full-text search still finds them): memory is never dropped for it."""
    settings = queue.config.memory.embeddings
    if settings is not None:
        from taskherd.host.embeddings import EmbeddingsUnavailable, embed

        try:
            vectors = embed(settings, [new.text for new in batch])
            batch = [NewMemory(new.scope, new.text, new.source, new.section,
                               json.dumps(vector), settings.model)
                     for new, vector in zip(batch, vectors, strict=True)]
        except EmbeddingsUnavailable as error:
            log.warning("memory: stored without vectors: %s", error)
    return queue.store.add_memories(batch, now, once)


def _nearest(queue: Queue, scope: str, text: str, count: int) -> list[int]:
    from taskherd.host.embeddings import embed, similarity, unit

    settings = queue.config.memory.embeddings
    assert settings is not None
    query = unit(embed(settings, [text])[0])
    scored = ((similarity(query, json.loads(vector)), memory_id)
              for memory_id, vector in queue.store.embedded_memories(scope, settings.model))
    return [memory_id for _, memory_id in heapq.nlargest(count, scored)]


def _fused(queue: Queue, rankings: Sequence[list[int]], known: dict[int, Memory],
           limit: int) -> list[Memory]:
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, memory_id in enumerate(ranking, start=1):
            scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (RRF_K + rank)
    best = sorted(scores, key=lambda memory_id: (-scores[memory_id], -memory_id))[:limit]
    found = [known.get(memory_id) or queue.store.get_memory(memory_id) for memory_id in best]
    return [memory for memory in found if memory is not None]
