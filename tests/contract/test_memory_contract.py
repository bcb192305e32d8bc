"""Long-term memory in every store: full-text search ranked by relevance, scopes, forget."""

from __future__ import annotations

from taskherd.store.memory import SHARED, NewMemory, query_words

NOW = 1_700_000_000.0


def test_search_ranks_by_relevance_within_the_role_and_the_shared_scope(store):
    added = store.add_memories([
        NewMemory("coder", "the deploy script needs the VPN", "person"),
        NewMemory("coder", "deploy only after the deploy checklist passes: deploy gate", "agent"),
        NewMemory("coder", "lunch is at noon", "person"),
        NewMemory("qa", "deploy previews break on Mondays", "person"),
        NewMemory(SHARED, "every deploy is announced in the ops channel", "person",
                  section="Learnings"),
    ], NOW)
    found = store.search_memories("coder", query_words("deploy checklist"), 10)
    assert found[0].id == added[1].id  # both words, and the most often
    assert {m.id for m in found} == {added[0].id, added[1].id, added[4].id}  # not qa's
    assert found[-1].section in (None, "Learnings")
    assert store.search_memories("coder", query_words("deploying"), 10)  # stemmed
    assert store.search_memories("coder", [], 10) == []


def test_operators_in_the_words_are_only_words(store):
    store.add_memories([NewMemory("coder", 'quote " and NEAR( and OR', "person")], NOW)
    words = query_words('" NEAR( OR * -x column:text')
    assert store.search_memories("coder", words, 5)  # no syntax error, a match on "near"


def test_list_and_forget(store):
    first, second = store.add_memories([NewMemory("coder", "one", "person"),
                                        NewMemory(SHARED, "two", "person")], NOW)
    assert [m.id for m in store.list_memories("coder", 10)] == [second.id, first.id]
    assert [m.id for m in store.list_memories("qa", 10)] == [second.id]
    assert store.forget_memory(first.id) and not store.forget_memory(first.id)
    assert store.search_memories("coder", ["one"], 5) == []
    assert store.get_memory(first.id) is None
