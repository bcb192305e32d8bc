"""The text of tasks added in a batch is searchable at once, on every store.

PostgreSQL indexes a statement's tasks together (migration 0039: one trigger call per
statement, GIN's pending list merged in bulk), so a batch is read back here both from the
pending list and from the index's tree it was merged into.
"""

from __future__ import annotations

from taskherd.model import NewTask
from taskherd.store.task_lists import TaskFilter

NOW = 1000.0
WORDS = "deploy build parser flaky module review retry cache schema migrate docs".split()


def _prompt(n: int) -> str:
    # ~200 characters of ordinary words: enough trigrams that 600 tasks outgrow the 256 kB
    # pending list several times over.
    words = " ".join(f"{WORDS[(n + i) % len(WORDS)]}{n % 97}" for i in range(22))
    return f"{words} ref{n:04d}x"


def _found(store, text: str) -> list[int]:
    return sorted(t.id for t in store.filter_tasks(TaskFilter(text=text), limit=1000))


def test_every_task_of_a_batch_is_found_by_its_own_text(store):
    batch = [NewTask(role="coder", title=f"batch item {n:04d}", prompt=_prompt(n))
             for n in range(600)]
    assert store.enqueue_many(batch, NOW) == 600
    ids = _found(store, "batch item")
    assert len(ids) == 600
    # The first and last of the batch (merged into the tree, or still pending), by title.
    assert _found(store, "item 0000") == ids[:1] and _found(store, "item 0599") == ids[-1:]
    assert _found(store, "REF0296X") == [ids[296]]  # by its prompt, in any case
    late = store.enqueue(NewTask(role="coder", title="a single one", prompt="Kestrel"), NOW)
    assert _found(store, "kestrel") == [late.task.id]


def test_a_batch_duplicate_adds_no_text(store):
    """A task whose dedup key an open task holds is not added, nor is its text."""
    store.enqueue(NewTask(role="coder", title="first holder", dedup_key="k1"), NOW)
    added = store.enqueue_many([NewTask(role="coder", title="second holder", dedup_key="k1"),
                                NewTask(role="coder", title="third holder", dedup_key="k2"),
                                NewTask(role="coder", title="fourth holder", dedup_key="k2")],
                               NOW)
    assert added == 1
    assert [t.title for t in store.filter_tasks(TaskFilter(text="holder"), sort="oldest")] == [
        "first holder", "third holder"]
