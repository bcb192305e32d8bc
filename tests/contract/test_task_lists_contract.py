"""Lists of tasks by any filter, and a person's change of priority, on every store."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import TransitionRefused
from taskherd.store.task_lists import TaskFilter

NOW = 1000.0


def test_every_filter_narrows_and_every_sort_orders(store):
    def add(**fields) -> int:
        return store.enqueue(NewTask(**({"role": "coder", "title": "t"} | fields)), NOW).task.id

    plain = add(title="plain", priority=2)
    urgent = add(title="Fix the 100%_done bar", priority=0, role="qa", max_attempts=1)
    prompt = add(title="other", prompt="see the Widget", priority=1)
    ran = store.claim(ClaimRequest("node-a", NOW, 60, roles=["qa"]))
    store.finish_run(ran.run.id, RunResult(Outcome.FAILED), RetryPolicy(), NOW + 5)
    cancelled = add(title="gone")
    store.cancel(cancelled, NOW + 10)

    def ids(sort: str = "newest", **wanted) -> list[int]:
        return [t.id for t in store.filter_tasks(TaskFilter(**wanted), sort=sort)]

    assert ids() == [cancelled, prompt, urgent, plain]
    assert ids("oldest") == [plain, urgent, prompt, cancelled]
    assert ids("priority") == [urgent, prompt, plain, cancelled]
    assert ids(state=TaskState.READY) == [prompt, plain]
    assert ids(state=TaskState.DEAD) == [urgent]
    assert ids(role="qa") == [urgent] and ids(priority=1) == [prompt]
    assert ids(node="node-a") == [urgent] and ids(node="node-b") == []
    assert ids(text="widget") == [prompt]  # the prompt, any case
    assert ids(text="100%_done") == [urgent] and ids(text="100%xdone") == []  # literal % _
    assert ids(text=f"#{plain}") == [plain]  # that task, by its key
    assert ids(text=f"#{plain}", state=TaskState.DEAD) == []
    assert ids(text=f"#{urgent}", state=TaskState.DEAD) == [urgent]
    assert ids(text=str(prompt)) == [prompt]  # a number is also its task's id
    assert ids(state=TaskState.CANCELLED, finished_from=NOW + 10, finished_to=NOW + 11) \
        == [cancelled]
    assert ids(finished_from=NOW + 11) == []
    assert [t.id for t in store.filter_tasks(TaskFilter(), limit=2, offset=1)] == [prompt,
                                                                                   urgent]
    assert store.count_filtered_tasks(TaskFilter(), 100) == 4
    assert store.count_filtered_tasks(TaskFilter(), 3) == 3  # counted up to the cap only
    assert store.count_filtered_tasks(TaskFilter(state=TaskState.READY, role="qa"), 100) == 0


def test_a_person_changes_an_open_tasks_priority_and_it_is_claimed_in_its_new_place(store):
    first = store.enqueue(NewTask(role="coder", title="first", priority=2), NOW).task
    later = store.enqueue(NewTask(role="coder", title="later", priority=2), NOW).task
    moved = store.set_priority(later.id, 0, NOW + 1)
    assert moved.priority == 0 and moved.updated_at == NOW + 1
    assert store.claim(ClaimRequest("n1", NOW + 2, 60)).task.id == later.id
    store.cancel(first.id, NOW + 3)
    with pytest.raises(TransitionRefused, match="it is cancelled"):
        store.set_priority(first.id, 0, NOW + 4)
    assert store.get_task(first.id).priority == 2


def _found(store, text: str, **wanted) -> list[int]:
    return [t.id for t in store.filter_tasks(TaskFilter(text=text, **wanted))]


def test_search_finds_part_of_a_word_in_any_case_through_the_index(store):
    """Three characters or more are looked up in the trigram index: part of a word, any case,
    a word across a space, and characters the index must not read as query syntax."""
    deploy = store.enqueue(NewTask(role="coder", title="Deploy the Gateway",
                                   prompt='roll "blue-green" AND wait'), NOW).task.id
    other = store.enqueue(NewTask(role="coder", title="write the changelog"), NOW).task.id
    assert _found(store, "gatew") == [deploy]  # the start of a word
    assert _found(store, "ATEWA") == [deploy]  # its middle, upper-cased
    assert _found(store, "the ") == [other, deploy]  # a space is part of the text
    assert _found(store, "he gate") == [deploy]
    assert _found(store, '"blue-green" and') == [deploy]  # quotes and AND: plain text
    assert _found(store, "yawetag") == []  # every trigram is not enough: in order
    assert _found(store, "gateway", state=TaskState.DEAD) == []
    assert store.count_filtered_tasks(TaskFilter(text="THE"), 10) == 2


def test_a_search_of_one_or_two_characters_still_finds(store):
    """Below a trigram's length there is nothing to look up: the newest tasks are read."""
    one = store.enqueue(NewTask(role="coder", title="a Q&A page"), NOW).task.id
    two = store.enqueue(NewTask(role="coder", title="plain", prompt="see Qa"), NOW).task.id
    assert _found(store, "q&") == [one]
    assert _found(store, "QA") == [two]
    assert _found(store, "&") == [one]
    assert _found(store, str(one)) == [one]  # its number, if nothing else holds it


def test_search_sees_an_edited_text_and_forgets_deleted_and_pruned_tasks(store):
    kept = store.enqueue(NewTask(role="coder", title="rename the flag"), NOW).task.id
    gone = store.enqueue(NewTask(role="coder", title="old flag cleanup"), NOW).task.id
    # No command edits a task's text yet: the database is written as an edit would.
    with store._write() as db:
        db.execute(f"UPDATE tasks SET title = 'drop the switch', prompt = 'Kestrel' "
                   f"WHERE id = {kept}")
    assert _found(store, "flag") == [gone]
    assert _found(store, "switch") == [kept] and _found(store, "kestr") == [kept]
    store.cancel(gone, NOW + 1)
    assert _found(store, "cleanup") == [gone]
    assert store.prune(before=NOW + 2) == 1
    assert _found(store, "cleanup") == [] and _found(store, "flag") == []
    with store._write() as db:
        db.execute(f"DELETE FROM tasks WHERE id = {kept}")
    assert _found(store, "switch") == [] and _found(store, "kestrel") == []


def test_a_rare_word_is_looked_up_in_the_index_not_read_from_every_task(tmp_path):
    """SQLite: a word held by one task is found in about as many steps among 4,000 tasks as
    among 200 (before the index, twenty times as many: every task was read). Steps are the
    database's virtual machine's, counted by a progress handler: no clock. PostgreSQL plans
    by its statistics (bench/api.py measures it at a million)."""
    from taskherd.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "search.db", durability="normal")
    steps = [0]

    def counted(read) -> list[int]:
        steps[0] = 0
        store._conn.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1) or 0, 100)
        try:
            return [t.id for t in read()]
        finally:
            store._conn.set_progress_handler(None, 0)

    def routine(count: int) -> list[NewTask]:
        return [NewTask(role="coder", title=f"routine task {n}", prompt="check the build")
                for n in range(count)]

    store.enqueue_many(routine(200), NOW)
    rare = store.enqueue(NewTask(role="coder", title="calibrate the Kestrel"), NOW).task.id
    caught_up(store)
    assert counted(lambda: store.filter_tasks(TaskFilter(text="kestrel"))) == [rare]
    among_few = steps[0]
    store.enqueue_many(routine(4000), NOW)
    caught_up(store)
    assert counted(lambda: store.filter_tasks(TaskFilter(text="kestrel"))) == [rare]
    assert steps[0] < 2 * among_few + 10, (among_few, steps[0])
    store.close()


def test_a_number_finds_its_task_among_the_tasks_holding_it_page_by_page(store):
    """Digits are looked up in the index and are also a task's id: that task takes its place
    in the order, on whichever page it falls."""
    store.enqueue_many([NewTask(role="coder", title="filler") for _ in range(125)], NOW)
    early = store.enqueue(NewTask(role="coder", title="before", prompt="ticket 1234"),
                          NOW).task.id
    late = store.enqueue(NewTask(role="coder", title="ticket 123 again"), NOW).task.id
    assert store.get_task(123).title == "filler" and 123 < early < late

    def pages(sort: str) -> list[int]:
        return [t.id for offset in range(4)
                for t in store.filter_tasks(TaskFilter(text="123"), sort=sort, limit=1,
                                            offset=offset)]

    assert _found(store, "123") == pages("newest") == [late, early, 123]
    assert pages("oldest") == [123, early, late]
    assert [t.id for t in store.filter_tasks(TaskFilter(text="123"), limit=2, offset=1)] \
        == [early, 123]
    assert store.count_filtered_tasks(TaskFilter(text="123"), 10) == 3
    assert _found(store, "1234") == [early]  # no task 1234: the text alone
    assert _found(store, "123", role="qa") == []


def caught_up(store) -> int:
    """The indexer's passes until none is left (the daemon's text_index service)."""
    indexed = 0
    while taken := store.index_task_text(100):
        indexed += taken
    return indexed


def test_tasks_added_since_the_last_indexing_are_found_and_still_once_it_catches_up(store):
    """A task is indexed in batches after it is added (SQLite; PostgreSQL as it is added):
    a search finds it either way, in the same order, on every page and in the count."""
    def add(title: str, **fields) -> int:
        return store.enqueue(NewTask(role="coder", title=title, **fields), NOW).task.id

    older = [add(f"rotate the gateway keys {n}") for n in range(3)]
    add("unrelated")
    caught_up(store)
    newer = [add(f"Gateway timeout {n}") for n in range(3)]
    done = add("unrelated gateway")
    store.cancel(done, NOW + 1)

    def seen() -> tuple:
        pages = [[t.id for t in store.filter_tasks(TaskFilter(text="gateway"), sort=sort,
                                                   limit=2, offset=offset)]
                 for sort in ("newest", "oldest") for offset in (0, 2, 4, 6)]
        return (pages, _found(store, "GATEW"), _found(store, "gateway",
                                                      state=TaskState.CANCELLED),
                store.count_filtered_tasks(TaskFilter(text="gateway"), 100),
                store.count_filtered_tasks(TaskFilter(text="gateway"), 5))

    every = [*older, *newer, done]
    before = seen()
    assert before[0] == [every[::-1][:2], every[::-1][2:4], every[::-1][4:6], every[::-1][6:],
                         every[:2], every[2:4], every[4:6], every[6:]]
    assert before[1:] == (every[::-1], [done], 7, 5)
    caught_up(store)
    assert store.index_task_text(100) == 0  # nothing left
    assert seen() == before


def test_an_edit_or_a_delete_reaches_the_search_before_and_after_indexing(store):
    """The text of a task not indexed yet is read as it is now; once indexed, the index
    follows its edits and forgets it when it goes."""
    early = store.enqueue(NewTask(role="coder", title="early plover"), NOW).task.id
    caught_up(store)
    late = store.enqueue(NewTask(role="coder", title="late plover"), NOW).task.id
    for task_id, title in ((early, "early heron"), (late, "late heron")):
        with store._write() as db:  # no command edits a task's text yet
            db.execute(f"UPDATE tasks SET title = '{title}' WHERE id = {task_id}")
    assert _found(store, "plover") == [] and _found(store, "heron") == [late, early]
    caught_up(store)
    assert _found(store, "plover") == [] and _found(store, "heron") == [late, early]
    with store._write() as db:
        db.execute(f"DELETE FROM tasks WHERE id = {late}")
    assert _found(store, "heron") == [early]
