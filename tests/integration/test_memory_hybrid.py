"""Hybrid memory search against a scripted embeddings endpoint on 127.0.0.1: vectors are
stored with each entry, a query ranks by meaning as well as by words, and when the endpoint
is away nothing is lost and full-text ranking still answers."""

from __future__ import annotations

import pytest

from taskherd.config import parse_config
from taskherd.ops import Queue
from taskherd.ops import memory as memory_ops
from taskherd.store.sqlite import SQLiteStore
from tests.e2e.fake_embeddings import FakeEmbeddings

NOW = 1_700_000_000.0
SYNONYMS = [{"car", "automobile", "vehicle"}, {"broken", "fails", "trouble", "failing"}]


@pytest.fixture
def embeddings():
    server = FakeEmbeddings(SYNONYMS).start()
    yield server
    server.stop()


def open_queue(tmp_path, embeddings=None):
    raw = {"roles": {"coder": {"command": ["true"]}}}
    if embeddings is not None:
        raw["memory"] = {"embeddings": {"base_url": f"{embeddings.base_url}/v1",
                                        "model": embeddings.model}}
    return Queue(parse_config(raw, base_dir=tmp_path), SQLiteStore(tmp_path / "q.db"))


def test_hybrid_ranking_finds_by_meaning_what_words_alone_miss(tmp_path, embeddings):
    with open_queue(tmp_path, embeddings) as queue:
        for text in ["the automobile fails to start when it is cold",
                     "car parks are full on Fridays",
                     "the invoice template lives in docs/billing"]:
            memory_ops.add(queue, "coder", text, NOW)
        assert all(m.embedding_model == embeddings.model
                   for m in queue.store.list_memories("coder", 10))
        hybrid = memory_ops.search(queue, "coder", "vehicle broken", limit=2)
        assert hybrid[0].text.startswith("the automobile fails")
        both = memory_ops.search(queue, "coder", "car", limit=3)
        assert both[0].text.startswith("car parks")  # the literal match still leads

    with open_queue(tmp_path) as words_only:  # the same entries, no endpoint configured
        assert memory_ops.search(words_only, "coder", "vehicle broken", limit=2) == []


def test_an_endpoint_that_fails_loses_nothing(tmp_path, embeddings):
    with open_queue(tmp_path, embeddings) as queue:
        embeddings.failing = True
        kept = memory_ops.add(queue, "coder", "rotate the API keys every quarter", NOW)
        assert kept.embedding is None  # kept without a vector
        found = memory_ops.search(queue, "coder", "rotate keys")
        assert [m.id for m in found] == [kept.id]  # full-text ranking answers alone
