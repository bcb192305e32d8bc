"""A request an agent's command tries again, on every store: the daemon that applied the first
try may have died before it could answer, so the second try must make nothing again and get
the first's answer, not an error. Each request goes through the agent door's own handling of a
request line (`AgentDoor.answer`, what its socket does with each connection) twice, with the
same request id, as `agent_door.call` sends it after a dropped connection."""

from __future__ import annotations

import json

import pytest

from taskherd.agent.door import AgentDoor
from taskherd.config import load_config
from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.ops import Queue
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.chains import workflow_of
from taskherd.store import open_store

NOW = 1000.0
LEASE = 60.0


@pytest.fixture
def door(tmp_path, database):
    (tmp_path / "taskherd.toml").write_text(f"""
[daemon]
database = "{database}"
data_dir = "data"

[roles.coder]
command = ["true"]
review_by = "qa"

[roles.qa]
command = ["true"]
""")
    config = load_config(tmp_path / "taskherd.toml")
    store = open_store(database, durability="normal", workflow=workflow_of(config))
    yield AgentDoor(Queue(config, store), lambda: NOW + 1)
    store.close()


def run_with_token(store, role: str, token: str, now: float = NOW):
    claimed = store.claim(ClaimRequest("n1", now, LEASE, roles=[role]))
    store.mark_spawned(claimed.run.id, now, LEASE, pid=1, pid_started_at=1.0, log_path="l")
    store.issue_run_credential(claimed.run.id, token, now)
    return claimed.run


def twice(door: AgentDoor, token: str, op: str, args: dict, request_id: str) -> list[dict]:
    line = json.dumps({"token": token, "op": op, "args": args, "request_id": request_id})
    return [door.answer(line.encode()) for _ in range(2)]


def test_a_second_try_of_a_request_makes_nothing_again_and_gets_the_first_answer(door):
    store = door.queue.store
    store.enqueue(NewTask(role="coder", title="build"), NOW)
    run = run_with_token(store, "coder", "coder-token")

    first, second = twice(door, "coder-token", "add_child_task",
                          {"task": {"title": "child", "role": "qa", "pending": True}}, "r1")
    assert first["ok"] and second == first
    assert [c.title for c in store.children_of(run.task_id)] == ["child"]

    first, second = twice(door, "coder-token", "msg_send",
                          {"to": "qa", "body": "hello", "priority": "urgent"}, "r2")
    assert first["ok"] and second == first
    spawn = json.dumps({"title": "spawned", "role": "qa", "pending": True})
    first, second = twice(door, "coder-token", "msg_send",
                          {"to": "qa", "body": spawn, "kind": "spawn"}, "r3")
    assert first["ok"] and second == first
    sent = store.sent_messages(f"task:{run.task_id}")
    assert sorted(m.body for m in sent) == sorted(["hello", spawn])
    assert sorted(c.title for c in store.children_of(run.task_id)) == ["child", "spawned"]

    first, second = twice(door, "coder-token", "memory_add", {"text": "use the cache"}, "r4")
    assert first["ok"] and second == first
    assert [m.text for m in store.list_memories("coder", 10)] == ["use the cache"]

    [hello] = [m for m in store.unread_messages("qa", NOW + 1) if m.body == "hello"]
    store.enqueue(NewTask(role="qa", title="read"), NOW)
    run_with_token(store, "qa", "qa-token")  # a qa agent reads what was sent to its role
    first, second = twice(door, "qa-token", "msg_read", {"ids": [hello.id]}, "r5")
    assert first == second == {"ok": True, "result": {"read": [hello.id]}}

    # A request without an id (an older agent) is tried once, as before: a new child each time.
    line = json.dumps({"token": "coder-token", "op": "add_child_task",
                       "args": {"task": {"title": "again", "role": "qa", "pending": True}}})
    for _ in range(2):
        door.answer(line.encode())
    assert [c.title for c in store.children_of(run.task_id)].count("again") == 2


def test_a_reviewers_verdict_tried_twice_moves_its_task_once_and_answers_alike(door):
    store = door.queue.store
    task = store.enqueue(NewTask(role="coder", title="build"), NOW).task
    built = run_with_token(store, "coder", "coder-token")
    store.finish_run(built.id, RunResult(Outcome.SUCCEEDED),
                     door.queue.config.policy_for("coder"), NOW + 1)
    assert store.get_task(task.id).state is TaskState.NEEDS_REVIEW
    review = run_with_token(store, "qa", "qa-token", NOW + 1)
    first, second = twice(door, "qa-token", "review",
                          {"verdict": "reject", "reason": "no tests"}, "v1")
    assert first["ok"] and second == first
    moved = store.get_task(task.id)
    assert moved.state is TaskState.READY and moved.rejections == 1
    assert store.get_run(review.id).report == "done"


def test_a_request_id_must_be_short_and_plain(door):
    store = door.queue.store
    store.enqueue(NewTask(role="coder", title="build"), NOW)
    run_with_token(store, "coder", "coder-token")
    line = json.dumps({"token": "coder-token", "op": "heartbeat", "args": {},
                       "request_id": "../" + "x" * 80})
    answer = door.answer(line.encode())
    assert answer["kind"] == "bad_input" and answer["error"].startswith("request_id ")
