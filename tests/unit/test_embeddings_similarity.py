"""Hybrid search's inner loop: cosine similarity of a query (normalised once) and entries."""

from __future__ import annotations

import math

from taskherd.host.embeddings import cosine, similarity, unit


def test_cosine_is_the_angle_not_the_length():
    assert math.isclose(cosine([1.0, 0.0], [3.0, 3.0]), math.sqrt(0.5))
    assert math.isclose(cosine([2.0, 1.0], [4.0, 2.0]), 1.0)
    assert math.isclose(cosine([1.0, 0.0], [-5.0, 0.0]), -1.0)
    assert cosine([1.0, 2.0], [0.0, 0.0]) == 0.0 and cosine([0.0, 0.0], [1.0, 2.0]) == 0.0


def test_a_unit_query_ranks_entries_as_cosine_does():
    query = [0.2, 0.0, 0.9, 0.1]
    entries = [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 5.0, 0.0], [0.3, 0.1, 0.8, 0.0], [0.0] * 4]
    once = unit(query)
    assert math.isclose(math.hypot(*once), 1.0)
    for entry in entries:
        assert math.isclose(similarity(once, entry), cosine(query, entry), abs_tol=1e-12)
