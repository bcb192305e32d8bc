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


def test_a_large_memory_ranks_the_newest_thousand_of_a_common_word_and_all_of_a_rare_one(store):
    # 12,000 entries: more than the newest 10,000 the PostgreSQL search walks before it turns
    # to its index. Every entry has "filler"; every 20th also "sparse" (600 in all).
    def entry(number: int) -> str:
        return "filler sparse note" if number % 20 == 0 else f"filler note {number}"

    oldest = store.add_memories([
        NewMemory("coder", "needle in the oldest entry", "agent"),
        NewMemory("coder", "filler filler filler filler", "agent"),  # best "filler", but old
        NewMemory("coder", "sparse sparse sparse", "agent"),  # best "sparse", oldest of 601
    ], NOW)
    store.add_memories([NewMemory("coder", entry(n), "agent") for n in range(12_000)], NOW)
    newest = store.add_memories([NewMemory("coder", "filler filler filler", "agent")], NOW)[0]

    assert [m.id for m in store.search_memories("coder", ["needle"], 5)] == [oldest[0].id]
    assert store.search_memories("coder", ["sparse"], 5)[0].id == oldest[2].id
    by_filler = store.search_memories("coder", ["filler"], 5)
    assert by_filler[0].id == newest.id  # the oldest, better entry is past the newest 1,000
    assert oldest[1].id not in {m.id for m in by_filler}
