"""Spawn requests on both stores: a `spawn` message carries a task spec or a job spec, each
checked by its own door's check (`task add`, `jobs add`) and counted within the sender's
spawn limits (max_spawn, max_depth), the same rule as an agent's `task add`. The answer is a
`result` message naming the new id or the refusal, and a refused spec changes nothing but
the request and its answer."""

from __future__ import annotations

import json
import sqlite3
import textwrap

import pytest

from taskherd.config import load_config
from taskherd.model import NewTask
from taskherd.ops import Queue
from taskherd.ops import messages as message_ops
from taskherd.ops.agent import SpawnRefused, add_child_task
from taskherd.policy.admission import ClaimRequest
from taskherd.store import open_store

NOW = 1_700_000_000.0
DIGEST = {"name": "nightly-digest", "cron": "0 2 * * *", "timezone": "UTC",
          "title": "digest {date}", "prompt": "Summarise the day."}


@pytest.fixture
def queue(tmp_path, database):
    (tmp_path / "taskherd.toml").write_text(textwrap.dedent(f"""
        [daemon]
        database = "{database}"
        max_depth = 2
        [monitor]
        max_spawn = 2
        [roles.planner]
        command = ["true"]
        [roles.worker]
        command = ["true"]
    """))
    config = load_config(tmp_path / "taskherd.toml")
    with Queue(config, open_store(database)) as opened:
        yield opened


def running(queue: Queue, title: str = "plan", parent: int | None = None):
    """A planner task, claimed: its run is the sender."""
    task = queue.store.enqueue(NewTask(role="planner", title=title, parent_id=parent), NOW).task
    claim = queue.store.claim(ClaimRequest("n1", NOW, 60.0, roles=["planner"]))
    assert claim.task.id == task.id
    return claim.run


def spawn(queue: Queue, run, spec: object, at: float = NOW + 1):
    body = spec if isinstance(spec, str) else json.dumps(spec)
    return message_ops.send(queue, message_ops.agent(run), "worker", body, at, kind="spawn")


def every_row(queue: Queue, database: str) -> dict[str, list[str]]:
    """Every table's rows, as text, but the messages'."""
    if database.startswith("postgres"):
        import psycopg

        with psycopg.connect(database) as db:
            names = [row[0] for row in db.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
            return {name: sorted(map(repr, db.execute(f'SELECT * FROM "{name}"').fetchall()))
                    for name in names if name != "messages"}
    db = sqlite3.connect(database)
    try:
        names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = "
                                              "'table' AND name NOT LIKE 'sqlite_%'")]
        return {name: sorted(map(repr, db.execute(f'SELECT * FROM "{name}"').fetchall()))
                for name in names if name != "messages"}
    finally:
        db.close()


def test_a_job_spec_makes_a_job_and_counts_within_max_spawn(queue):
    run = running(queue)
    asked, answer = spawn(queue, run, DIGEST)
    job = queue.store.get_job("nightly-digest")
    assert (job.source, job.template["role"], job.trigger["cron"]) == ("cli", "worker",
                                                                      "0 2 * * *")
    assert job.next_run_at == NOW - NOW % 86400 + 86400 + 2 * 3600  # the next 02:00 UTC
    assert (asked.kind, answer.kind, answer.reply_to) == ("spawn", "result", asked.id)
    assert answer.recipient == f"task:{run.task_id}"
    assert answer.body.startswith(f"spawned job {job.id} 'nightly-digest' (role worker): "
                                  "first fire 2023-11-15 02:00:00 UTC")
    # The job and a child task are this run's two spawns (max_spawn 2): a third of either
    # kind is refused, whichever door asks.
    _, second = spawn(queue, run, {"title": "write the parser"})
    assert second.body.startswith("spawned task ")
    _, third = spawn(queue, run, DIGEST | {"name": "weekly"})
    assert third.body == ("spawn refused, nothing was created: refused: this run already "
                          "added 2 tasks and jobs (max_spawn 2)")
    with pytest.raises(SpawnRefused, match=r"max_spawn 2"):
        add_child_task(queue, run, {"role": "worker", "title": "one more"}, NOW + 2)
    # A later run of another task starts its own count.
    queue.store.enqueue(NewTask(role="planner", title="another plan"), NOW + 3)
    other = queue.store.claim(ClaimRequest("n1", NOW + 3, 60.0, roles=["planner"])).run
    assert spawn(queue, other, DIGEST | {"name": "weekly"}, NOW + 4)[1].body.startswith(
        "spawned job ")


def test_a_refused_spec_changes_nothing_but_the_request_and_its_answer(queue, database):
    run = running(queue)
    spawn(queue, run, DIGEST)  # its name is taken from here on
    deep = running(queue, "deep", parent=queue.store.enqueue(
        NewTask(role="worker", title="mid", parent_id=run.task_id), NOW).task.id)
    refusals = [
        (run, "{not json", "not a JSON task or job spec"),
        (run, DIGEST | {"cron": "61 * * * *"}, "cron"),
        (run, DIGEST | {"name": "other", "colour": "blue"}, "colour: unknown key"),
        (run, DIGEST, "a job named 'nightly-digest' already exists"),
        (run, DIGEST | {"name": "past", "cron": None, "at": "2020-01-01T00:00:00Z"},
         "in the past"),
        (run, DIGEST | {"name": "nobody", "role": "ghost"}, "ghost"),
        (run, {"title": "bad", "priority": "P9"}, "priority 'P9'"),
        (deep, DIGEST | {"name": "too-deep"}, "depth 3 of its chain, beyond max_depth 2"),
        (deep, {"title": "too deep"}, "depth 3 of its chain, beyond max_depth 2"),
    ]
    for sender, spec, reason in refusals:
        if isinstance(spec, dict):
            spec = {key: value for key, value in spec.items() if value is not None}
        before = every_row(queue, database)
        messages = len(queue.store.sent_messages(f"task:{sender.task_id}", 1000))
        asked, answer = spawn(queue, sender, spec)
        assert every_row(queue, database) == before, spec
        assert len(queue.store.sent_messages(f"task:{sender.task_id}", 1000)) == messages + 1
        assert asked.kind == "spawn" and answer.kind == "result"
        assert answer.body.startswith("spawn refused, nothing was created: "), answer.body
        assert reason in answer.body, (spec, answer.body)
    assert [job.name for job in queue.store.list_jobs()] == ["nightly-digest"]


def test_a_person_writing_as_a_task_is_held_to_its_latest_runs_count(queue):
    run = running(queue)
    add_child_task(queue, run, {"role": "worker", "title": "one"}, NOW + 1)
    add_child_task(queue, run, {"role": "worker", "title": "two"}, NOW + 1)
    person = message_ops.Sender(f"task:{run.task_id}")
    _, answer = message_ops.send(queue, person, "worker", json.dumps(DIGEST), NOW + 2,
                                 kind="spawn")
    assert "max_spawn 2" in answer.body
    assert queue.store.list_jobs() == []
