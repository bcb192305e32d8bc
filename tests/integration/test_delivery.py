"""The deliverer against real targets: a webhook on 127.0.0.1 that fails, restarts and
recovers; a command fed the event on stdin; a JSON Lines file. Time is passed in."""

from __future__ import annotations

import json
import sys

import pytest

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.ops import BadInput, Queue
from taskherd.ops import delivery as delivery_ops
from taskherd.queue import RetryPolicy
from taskherd.services.delivery import Deliverer, DeliverySettings
from taskherd.store.sqlite import SQLiteStore
from tests.e2e.fake_webhook import FakeWebhook

NOW = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def queue(tmp_path):
    config = parse_config({"roles": {"coder": {"command": ["true"]}}}, base_dir=tmp_path)
    store = SQLiteStore(tmp_path / "q.db")
    yield Queue(config, store)
    store.close()


def complete(queue, *aliases, title="t"):
    meta = {"deliver_to": list(aliases), "deliver_on": ["completed"]}
    task = queue.store.enqueue(NewTask(role="coder", title=title, meta=meta), NOW).task
    claim = queue.store.claim("n1", NOW, 60.0)
    queue.store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, 0, summary="ok"),
                           RetryPolicy(), NOW)
    return task


def test_a_webhook_that_fails_twice_and_restarts_gets_each_event_once(queue):
    hook = FakeWebhook([500, 503]).start()
    try:
        delivery_ops.add_alias(queue, "ops", "webhook", hook.url, NOW)
        tasks = [complete(queue, "ops", title=f"task {n}") for n in range(3)]
        clock = Clock()
        deliverer = Deliverer(queue.store, clock, DeliverySettings(backoff=5.0))
        first = deliverer.run_once(clock.now)
        assert first == {"sent": 1, "retrying": 2, "failed": 0}
        hook.restart()  # the receiver goes away and comes back on the same port
        clock.now += 5
        assert deliverer.run_once(clock.now)["sent"] == 2
        clock.now += 3600
        assert deliverer.run_once(clock.now) == {"sent": 0, "retrying": 0, "failed": 0}
        acknowledged = sorted(body["task"]["id"] for body in hook.acknowledged)
        assert acknowledged == [task.id for task in tasks]  # each once, none twice
        assert len({body["delivery_id"] for body in hook.acknowledged}) == 3
        report = delivery_ops.status(queue)
        assert report["aliases"] == [{"alias": "ops", "pending": 0, "sent": 3, "failed": 0}]
    finally:
        hook.stop()


def test_slack_and_discord_bodies(queue):
    hook = FakeWebhook().start()
    try:
        delivery_ops.add_alias(queue, "slack", "webhook", hook.url, NOW, format="slack")
        delivery_ops.add_alias(queue, "discord", "webhook", hook.url, NOW, format="discord")
        complete(queue, "slack", "discord", title="ship it")
        Deliverer(queue.store, Clock()).run_once(NOW)
        texts = sorted(body.get("text") or body.get("content") for body in hook.acknowledged)
        assert all("completed: ship it — ok" in text for text in texts)
        assert sorted(key for body in hook.acknowledged for key in body) == ["content", "text"]
    finally:
        hook.stop()


def test_command_and_file_channels(queue, tmp_path):
    script = tmp_path / "receive.py"
    script.write_text("import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n")
    received = tmp_path / "by-command.jsonl"
    delivery_ops.add_alias(queue, "cmd", "command", f"{sys.executable} {script} {received}", NOW)
    delivery_ops.add_alias(queue, "log", "file", str(tmp_path / "events.jsonl"), NOW)
    task = complete(queue, "cmd", "log")
    assert Deliverer(queue.store, Clock()).run_once(NOW)["sent"] == 2
    for path in (received, tmp_path / "events.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [(e["event"], e["task"]["id"]) for e in lines] == [("completed", task.id)]
    assert oct((tmp_path / "events.jsonl").stat().st_mode & 0o777) == "0o600"


def test_a_delivery_is_kept_as_failed_after_its_attempts(queue):
    delivery_ops.add_alias(queue, "gone", "command", "false", NOW)
    complete(queue, "gone", "nobody")  # an alias that does not exist fails visibly too
    clock = Clock()
    deliverer = Deliverer(queue.store, clock, DeliverySettings(max_attempts=3, backoff=1.0))
    for _ in range(3):
        deliverer.run_once(clock.now)
        clock.now += 100
    report = delivery_ops.status(queue)
    assert {a["alias"]: a["failed"] for a in report["aliases"]} == {"gone": 1, "nobody": 1}
    errors = {p["alias"]: p["last_error"] for p in report["problems"]}
    assert "exited 1" in errors["gone"] and "no alias named 'nobody'" in errors["nobody"]


@pytest.mark.parametrize("args, says", [
    (("ops", "pager", "x"), "channel 'pager'"),
    (("ops", "webhook", "file:///etc/passwd"), "http:// or https://"),
    (("ops", "file", "relative.jsonl"), "absolute path"),
    (("ops", "command", "   "), "empty"),
    (("ops", "command", "echo 'unclosed"), "quotation"),
    (("bad name", "file", "/tmp/x"), "letters, digits"),
])
def test_bad_aliases_are_refused_and_change_nothing(queue, args, says):
    with pytest.raises(BadInput, match=says):
        delivery_ops.add_alias(queue, *args, NOW)
    assert queue.store.list_aliases() == []
