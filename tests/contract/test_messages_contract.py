"""Messages in every store: what a starting run receives (in the claim's transaction),
receipts, threads, expiry, waking a role, pruning."""

from __future__ import annotations

from taskherd.model import InboxLimit, NewTask, TaskState
from taskherd.policy.admission import ClaimRequest
from taskherd.store.messages import NewMessage

NOW = 1_700_000_000.0


def send(store, recipient, body, at=NOW, **fields):
    return store.send_messages([NewMessage("@person", recipient, body, **fields)], at)[0]


def test_a_starting_run_receives_urgent_first_then_oldest_and_the_rest_waits(store):
    old = send(store, "coder", "old normal", at=NOW - 30)
    urgent = send(store, "coder", "urgent one", at=NOW - 10, priority=2)
    high = send(store, "coder", "high one", at=NOW - 20, priority=1)
    newer = send(store, "coder", "newer normal", at=NOW - 5)
    send(store, "qa", "not for coder")
    store.enqueue(NewTask(role="coder", title="first"), NOW)
    store.enqueue(NewTask(role="coder", title="second"), NOW)

    first = store.claim(ClaimRequest("n1", NOW, 60.0, inbox=InboxLimit(messages=3)))
    assert [m.id for m in first.inbox] == [urgent.id, high.id, old.id]
    assert all(m.delivered_at == NOW and m.delivered_run_id == first.run.id
               for m in first.inbox)

    second = store.claim(ClaimRequest("n1", NOW + 1, 60.0, inbox=InboxLimit(messages=3)))
    assert [m.id for m in second.inbox] == [newer.id]  # delivered ones are not sent again


def test_the_inbox_stops_at_its_size_and_a_task_gets_its_own_messages(store):
    task = store.enqueue(NewTask(role="coder", title="t"), NOW).task
    big = send(store, "coder", "x" * 600, at=NOW - 3)
    mine = send(store, f"task:{task.id}", "for this task only", at=NOW - 2)
    later = send(store, "coder", "y" * 600, at=NOW - 1)
    claim = store.claim(ClaimRequest("n1", NOW, 60.0, inbox=InboxLimit(messages=10, bytes=1000)))
    assert [m.id for m in claim.inbox] == [big.id, mine.id]  # the third would pass 1000 bytes
    assert store.get_message(later.id).delivered_at is None


def test_an_expired_message_is_not_delivered_nor_listed(store):
    send(store, "coder", "stale", at=NOW - 100, expires_at=NOW - 1)
    fresh = send(store, "coder", "fresh", expires_at=NOW + 100)
    store.enqueue(NewTask(role="coder", title="t"), NOW)
    assert [m.id for m in store.unread_messages("coder", NOW)] == [fresh.id]
    assert store.count_unread_messages("coder", NOW) == 1
    claimed = store.claim(ClaimRequest("n1", NOW, 60.0, inbox=InboxLimit()))
    assert [m.id for m in claimed.inbox] == [fresh.id]


def test_a_claim_without_an_inbox_delivers_nothing(store):
    waiting = send(store, "coder", "hello")
    store.enqueue(NewTask(role="coder", title="t"), NOW)
    assert store.claim(ClaimRequest("n1", NOW, 60.0)).inbox == ()
    assert store.get_message(waiting.id).delivered_at is None


def test_read_receipts_threads_and_outbox(store):
    first = send(store, "coder", "question")
    answer = store.send_messages([NewMessage("task:7", "qa", "answer", reply_to=first.id,
                                             thread_id=first.thread, sender_role="coder")],
                                 NOW + 1)[0]
    again = store.send_messages([NewMessage("@person", "coder", "follow-up",
                                            reply_to=answer.id, thread_id=answer.thread)],
                                NOW + 2)[0]
    assert [m.id for m in store.message_thread(again.id)] == [first.id, answer.id, again.id]
    assert [m.id for m in store.sent_messages("coder")] == [answer.id]  # by its agent's role
    assert [m.id for m in store.mark_messages_read([first.id, first.id], NOW + 3)] == [first.id]
    assert store.get_message(first.id).read_at == NOW + 3
    assert store.mark_all_messages_read("coder", NOW + 4) == 1
    assert store.count_unread_messages("coder", NOW + 5) == 0


def test_an_urgent_message_wakes_a_role_only_when_nothing_is_ready(store):
    wake = NewTask(role="coder", title="wake", dedup_key="wake-on-urgent:coder")
    store.send_messages([NewMessage("@person", "coder", "now!", priority=2)], NOW, [wake])
    store.send_messages([NewMessage("@person", "coder", "again!", priority=2)], NOW, [wake])
    ready = store.list_tasks(state=TaskState.READY, role="coder")
    assert [t.title for t in ready] == ["wake"]


def test_pruning_keeps_what_nobody_received(store):
    unread = send(store, "coder", "never received", at=NOW - 1000)
    read = send(store, "coder", "read long ago", at=NOW - 1000)
    store.mark_messages_read([read.id], NOW - 900)
    expired = send(store, "coder", "expired", at=NOW - 1000, expires_at=NOW - 800)
    recent = send(store, "coder", "recent and read", at=NOW - 10)
    store.mark_messages_read([recent.id], NOW - 5)
    store.prune(before=NOW - 100)
    assert store.get_message(unread.id) is not None
    assert store.get_message(recent.id) is not None
    assert store.get_message(read.id) is None and store.get_message(expired.id) is None


def test_a_spawn_request_its_child_and_its_answer_are_written_together(store):
    parent = store.enqueue(NewTask(role="coder", title="parent"), NOW).task
    request = NewMessage(f"task:{parent.id}", "qa", '{"title": "child"}', kind="spawn",
                         priority=1)
    child = NewTask(role="qa", title="child", parent_id=parent.id)
    asked, answer, child_id = store.spawn_from_message(request, child, None, NOW)
    assert store.get_task(child_id).parent_id == parent.id
    assert (answer.sender, answer.recipient, answer.kind, answer.reply_to, answer.priority) == (
        "@taskherd", f"task:{parent.id}", "result", asked.id, 1)
    assert f"spawned task {child_id}" in answer.body

    refused = store.spawn_from_message(request, None, "priority 'P9' is not one of", NOW)
    assert refused[2] is None and "nothing was created: priority 'P9'" in refused[1].body
    assert len(store.list_tasks()) == 2  # the parent and the one child


def test_a_spawned_job_is_counted_and_a_name_taken_meanwhile_is_answered(store):
    from taskherd.model.jobs import JobDefinition
    from taskherd.store.messages import NewJob

    parent = store.enqueue(NewTask(role="coder", title="parent"), NOW).task
    request = NewMessage(f"task:{parent.id}", "qa", '{"name": "digest"}', kind="spawn")
    job = NewJob(JobDefinition("digest", {"role": "qa", "title": "digest"}, {"every": 3600},
                               "UTC"), NOW + 3600, parent.id)
    _, answer, job_id = store.spawn_from_message(request, job, None, NOW)
    assert answer.body.startswith(f"spawned job {job_id} 'digest' (role qa): first fire ")
    assert store.get_job("digest").id == job_id
    assert store.children_since(parent.id, NOW) == 1  # the job counts against max_spawn
    # Another writer took the name between the request's check and its write.
    _, taken, none = store.spawn_from_message(request, job, None, NOW + 1)
    assert none is None
    assert taken.body == "spawn refused, nothing was created: a job named 'digest' already exists"
    assert store.children_since(parent.id, NOW) == 1 and len(store.list_jobs()) == 1


def test_the_last_place_of_max_spawn_is_counted_in_the_transaction_that_adds(store):
    """Two additions of one run at once each pass the check made before the write; the store
    counts again, in the adding transaction under a lock on the task, so only one gets the
    last place: `task add` is refused, a spawn request is answered with the refusal."""
    import threading

    import pytest

    from taskherd.store.errors import SpawnAllowance, SpawnLimitReached

    parent = store.enqueue(NewTask(role="coder", title="parent"), NOW).task
    allowance = SpawnAllowance(parent.id, NOW, max_spawn=2)
    store.enqueue(NewTask(role="qa", title="first", parent_id=parent.id), NOW, allowance)
    request = NewMessage(f"task:{parent.id}", "qa", '{"title": "second"}', kind="spawn")
    second = NewTask(role="qa", title="second", parent_id=parent.id)
    _, answer, second_id = store.spawn_from_message(request, second, None, NOW, allowance)
    assert second_id is not None and store.children_since(parent.id, NOW) == 2

    with pytest.raises(SpawnLimitReached, match=r"already added 2 tasks and jobs \(max_spawn 2\)"):
        store.enqueue(NewTask(role="qa", title="third", parent_id=parent.id), NOW, allowance)
    third = NewTask(role="qa", title="third", parent_id=parent.id)
    _, refused, none = store.spawn_from_message(request, third, None, NOW, allowance)
    assert none is None
    assert refused.body == ("spawn refused, nothing was created: refused: this run already "
                            "added 2 tasks and jobs (max_spawn 2)")
    children = sorted(t.title for t in store.list_tasks() if t.parent_id == parent.id)
    assert children == ["first", "second"]

    # Eight threads race for the last places of a fresh allowance: exactly max_spawn win.
    other = store.enqueue(NewTask(role="coder", title="racer"), NOW).task
    racing = SpawnAllowance(other.id, NOW, max_spawn=3)
    won, start = [], threading.Barrier(8)

    def add(i):
        start.wait(10)
        try:
            store.enqueue(NewTask(role="qa", title=f"r{i}", parent_id=other.id), NOW, racing)
            won.append(i)
        except SpawnLimitReached:
            pass

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(won) == 3 and store.children_since(other.id, NOW) == 3
