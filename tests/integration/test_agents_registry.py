"""The agents registry over a real store: each role's state, last run and spend today, and
agents registered from outside."""

from __future__ import annotations

import pytest

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.ops import BadInput, Queue, messages, registry
from taskherd.policy.admission import ClaimRequest
from taskherd.store.sqlite import SQLiteStore

NOW = 1_700_000_000.0


@pytest.fixture
def queue(tmp_path):
    config = parse_config({
        "daemon": {"timezone": "UTC"},
        "roles": {"coder": {"runtime": "claude", "capabilities": ["python", "git"],
                            "description": "writes code"},
                  "qa": {"command": ["true"]}},
    }, base_dir=tmp_path)
    store = SQLiteStore(tmp_path / "q.db")
    yield Queue(config, store)
    store.close()


def run_once(queue, role, result, at):
    queue.store.enqueue(NewTask(role=role, title="t"), at)
    claim = queue.store.claim(ClaimRequest("n1", at, 60.0, roles=[role]))
    queue.store.mark_spawned(claim.run.id, at, 60.0, pid=None, pid_started_at=None, log_path=None)
    queue.store.finish_run(claim.run.id, result, RetryPolicy(), at + 5)
    return claim


def test_each_role_shows_its_state_last_run_and_spend_today(queue):
    run_once(queue, "coder", RunResult(Outcome.SUCCEEDED, 0, cost_usd=0.25), NOW - 100)
    run_once(queue, "coder", RunResult(Outcome.FAILED, 1, error="x", cost_usd=0.5), NOW - 50)
    queue.store.enqueue(NewTask(role="qa", title="running"), NOW)
    queue.store.claim(ClaimRequest("n1", NOW, 60.0, roles=["qa"]))
    queue.store.set_cooldown("claude", NOW + 600, "429", NOW)

    agents = {a["name"]: a for a in registry.list_agents(queue, NOW + 1)}
    coder, qa = agents["coder"], agents["qa"]
    assert coder["capabilities"] == ["python", "git"] and coder["description"] == "writes code"
    assert coder["state"] == "cooling down" and coder["cooldown_until"] == NOW + 600
    assert coder["last_outcome"] == "failed" and coder["last_seen_at"] == NOW - 45
    assert coder["runs_today"] == 2 and coder["cost_today"] == pytest.approx(0.75)
    assert qa["state"] == "running 1" and qa["last_outcome"] is None
    assert qa["last_seen_at"] == NOW


def test_an_external_agent_is_registered_listed_and_can_receive_messages(queue):
    registry.register(queue, "scout", NOW, runtime="custom", capabilities=["web"],
                      description="reads the news")
    registry.register(queue, "scout", NOW + 10, capabilities=["web", "rss"])
    scout = registry.get_agent(queue, "scout", NOW + 20)
    assert scout["kind"] == "external" and scout["runtime"] == "custom"
    assert scout["capabilities"] == ["web", "rss"] and scout["description"] == "reads the news"
    assert scout["last_seen_at"] == NOW + 10 and scout["state"] == "idle"
    messages.send(queue, messages.person(), "scout", "new feed", NOW + 30)
    assert [m.body for m in messages.inbox(queue, "scout", NOW + 31)] == ["new feed"]


@pytest.mark.parametrize("name, says", [("coder", "is a role in the config"),
                                        ("@all", "letters, digits"), ("any", "letters, digits"),
                                        ("x" * 65, "1 to 64")])
def test_a_bad_registration_is_refused_and_changes_nothing(queue, name, says):
    with pytest.raises(BadInput, match=says):
        registry.register(queue, name, NOW)
    assert queue.store.list_agents() == []
