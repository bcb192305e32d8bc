"""The deliverer against real targets: a webhook on 127.0.0.1 that fails, restarts and
recovers; a command fed the event on stdin; a JSON Lines file. Time is passed in."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.ops import BadInput, Queue
from taskherd.ops import delivery as delivery_ops
from taskherd.policy.admission import ClaimRequest
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
    claim = queue.store.claim(ClaimRequest("n1", NOW, 60.0))
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
    (("ops", "webhook", "http://169.254.169.254/latest/meta-data/"), "link-local"),
    (("ops", "webhook", "http://2852039166/latest/"), "169.254.169.254 is a link-local"),
    (("ops", "webhook", "http://[::ffff:a9fe:a9fe]/"), "169.254.169.254 is a link-local"),
    (("ops", "webhook", "http://[fe80::1%25eth0]:8080/"), "fe80::1 is a link-local"),
    (("ops", "webhook", "http://[fd00:ec2::254]/"), "metadata service"),
    (("ops", "webhook", "http://Metadata.Google.Internal./computeMetadata/v1/"),
     "metadata.google.internal is a cloud metadata service"),
    (("ops", "webhook", "https://hooks.example:99999/x"), "port"),
    (("ops", "webhook", "http://[::1/x"), "http:// or https://"),
    (("ops", "webhook", "http://exa mple.example/"), "neither a host name nor an address"),
])
def test_bad_aliases_are_refused_and_change_nothing(queue, args, says):
    with pytest.raises(BadInput, match=says):
        delivery_ops.add_alias(queue, *args, NOW)
    assert queue.store.list_aliases() == []


def test_a_webhooks_secrets_are_kept_for_delivery_and_never_shown(queue, caplog):
    caplog.set_level(logging.DEBUG)
    hook = FakeWebhook([500]).start()
    try:
        url = f"http://robot:hunter2@127.0.0.1:{hook.port}/hook?token=s3cr3t&team=ops"
        delivery_ops.add_alias(queue, "ops", "webhook", url, NOW)
        assert queue.store.get_alias("ops").target == url  # stored as given
        shown = delivery_ops.list_aliases(queue)[0].target
        assert shown == f"http://***@127.0.0.1:{hook.port}/hook?token=***&team=***"
        delivery_ops.add_alias(queue, "cmd", "command",
                               "notify --url https://me:pw@chat.example/x?key=k3y", NOW)
        assert "pw" not in delivery_ops.list_aliases(queue)[0].target
        complete(queue, "ops")
        clock = Clock()
        deliverer = Deliverer(queue.store, clock, DeliverySettings(backoff=1.0))
        assert deliverer.run_once(clock.now)["retrying"] == 1
        clock.now += 1
        assert deliverer.run_once(clock.now)["sent"] == 1
        # The URL's credentials reached the receiver as Basic auth; nothing else shows them.
        assert hook.requests[-1].header("authorization") == "Basic cm9ib3Q6aHVudGVyMg=="
        assert hook.requests[-1].query == "token=s3cr3t&team=ops"
        said = caplog.text + json.dumps(delivery_ops.status(queue))
        for secret in ("hunter2", "s3cr3t", "robot"):
            assert secret not in said
    finally:
        hook.stop()


def test_a_target_refused_today_is_refused_at_delivery_too(queue):
    # An alias added before the check existed, written straight into the store.
    queue.store.add_alias("old", "webhook", "http://169.254.169.254/latest/", NOW)
    complete(queue, "old")
    deliverer = Deliverer(queue.store, Clock(), DeliverySettings(max_attempts=1))
    assert deliverer.run_once(NOW) == {"sent": 0, "retrying": 0, "failed": 1}
    assert "link-local" in delivery_ops.status(queue)["problems"][0]["last_error"]


DELIVER_ONCE = """\
import sys
from taskherd.services.delivery import Deliverer
from taskherd.store.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
print(Deliverer(store, lambda: float(sys.argv[2])).run_once(float(sys.argv[2])))
"""


def deliver_with_hosts(tmp_path, queue, hosts: str, **env: str) -> str:
    """One pass of the deliverer in a process that resolves names by `hosts` (a private
    /etc/hosts, bind-mounted in a mount namespace of its own): the real resolver, a name
    that points where the test says."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a private /etc/hosts needs root and unshare (CI runs as root)")
    (tmp_path / "hosts").write_text(hosts)
    script = tmp_path / "deliver.py"
    script.write_text(DELIVER_ONCE)
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"',
         str(tmp_path / "hosts"), sys.executable, str(script), str(queue.store.path),
         str(NOW)], capture_output=True, text=True, timeout=60, check=False,
        cwd=Path(__file__).parents[2], env={**os.environ, **env})
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"cannot bind-mount a private /etc/hosts here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_host_name_that_resolves_to_a_metadata_address_is_refused_at_delivery(queue, tmp_path):
    hook = FakeWebhook().start()
    try:
        delivery_ops.add_alias(queue, "named", "webhook",
                               f"http://hooks.fleet.test:{hook.port}/hook", NOW)
        complete(queue, "named", title="first")
        sent = deliver_with_hosts(tmp_path, queue, "127.0.0.1 hooks.fleet.test\n")
        assert "'sent': 1" in sent  # resolved, checked, and sent to the address checked
        assert hook.acknowledged[0]["task"]["title"] == "first"
        assert hook.requests[0].header("host") == f"hooks.fleet.test:{hook.port}"
        # A proxy set for everything but this name: still sent straight to the host (an
        # address in the URL would not match the name NO_PROXY lists).
        complete(queue, "named", title="direct")
        direct = deliver_with_hosts(tmp_path, queue, "127.0.0.1 hooks.fleet.test\n",
                                    HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="hooks.fleet.test")
        assert "'sent': 1" in direct and hook.acknowledged[1]["task"]["title"] == "direct"
        complete(queue, "named", title="second")
        refused = deliver_with_hosts(tmp_path, queue, "169.254.169.254 hooks.fleet.test\n")
        assert "'retrying': 1" in refused and len(hook.requests) == 2
        problem = delivery_ops.status(queue)["problems"][0]
        assert "hooks.fleet.test resolves to 169.254.169.254" in problem["last_error"]
    finally:
        hook.stop()


def test_a_failed_delivery_is_sent_again_on_retry(queue):
    hook = FakeWebhook([500, 500]).start()
    try:
        delivery_ops.add_alias(queue, "ops", "webhook", hook.url, NOW)
        complete(queue, "ops", title="one")
        complete(queue, "ops", title="two")
        clock = Clock()
        deliverer = Deliverer(queue.store, clock, DeliverySettings(max_attempts=1))
        assert deliverer.run_once(clock.now)["failed"] == 2
        failed = [d.id for d in queue.store.list_deliveries(state="failed")]
        clock.now += 3600
        assert deliverer.run_once(clock.now)["sent"] == 0  # failed rows stay failed
        assert delivery_ops.retry(queue, clock.now, failed[0]) == 1
        with pytest.raises(delivery_ops.DeliveryNotFailed, match="pending, not failed"):
            delivery_ops.retry(queue, clock.now, failed[0])
        with pytest.raises(BadInput, match="no delivery with id 999"):
            delivery_ops.retry(queue, clock.now, 999)
        assert deliverer.run_once(clock.now)["sent"] == 1
        assert delivery_ops.retry(queue, clock.now) == 1  # --all: the other one
        assert deliverer.run_once(clock.now)["sent"] == 1
        assert sorted(b["task"]["title"] for b in hook.acknowledged) == ["one", "two"]
        assert delivery_ops.status(queue)["aliases"][0]["sent"] == 2
    finally:
        hook.stop()


def test_the_alias_commands_redact_and_retry(tmp_path):
    (tmp_path / "taskherd.toml").write_text(
        '[daemon]\ndatabase = "q.db"\n\n[roles.coder]\ncommand = ["true"]\n')

    def taskherd(*args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "TASKHERD_HOME": str(tmp_path / "home")}
        env.pop("TASKHERD_CONFIG", None)
        return subprocess.run([sys.executable, "-m", "taskherd", "alias", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=60, check=False)

    refused = taskherd("add", "meta", "webhook", "http://169.254.169.254/latest/")
    assert refused.returncode == 2 and "link-local" in refused.stderr
    added = taskherd("add", "ops", "webhook", "https://u:pw@hooks.example/x?token=t0k")
    assert added.returncode == 0, added.stderr
    listed = taskherd("list", "--json")
    assert json.loads(listed.stdout)[0]["target"] == "https://***@hooks.example/x?token=***"
    assert "pw" not in listed.stdout and "t0k" not in taskherd("list").stdout
    assert taskherd("retry").returncode == 2 and taskherd("retry", "1", "--all").returncode == 2
    none = taskherd("retry", "--all")
    assert none.returncode == 0 and "0 failed deliveries are due again" in none.stdout
    missing = taskherd("retry", "7")
    assert missing.returncode == 2 and "no delivery with id 7" in missing.stderr
