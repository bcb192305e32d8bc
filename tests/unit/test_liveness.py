"""The liveness tiers as one pure rule: what `runs stale` shows and the monitor can share."""

from __future__ import annotations

from dataclasses import replace

from taskherd.model import Run
from taskherd.policy.liveness import last_activity, next_threshold, stale_reason, verdict_text

NOW = 1_800_000_000.0


def run(**fields) -> Run:
    empty = dict.fromkeys(("pid", "pid_started_at", "log_path", "spawned_at", "heartbeat_at",
                           "progress", "ended_at", "exit_code", "outcome", "summary", "error",
                           "cost_usd", "input_tokens", "output_tokens", "turns", "session_id"))
    base = empty | {"id": 1, "task_id": 1, "attempt": 1, "node": "n1", "role": "qa",
                    "runtime": "command", "claimed_at": NOW - 100}
    return Run(**(base | fields))


def limits(**overrides) -> dict:
    return {"spawn_timeout": 30.0, "idle_timeout": 600.0, "now": NOW} | overrides


def test_a_fresh_spawned_run_is_alive() -> None:
    assert stale_reason(run(spawned_at=NOW - 90), NOW + 60, **limits()) is None


def test_each_tier_names_why() -> None:
    assert "lease expired 5s ago" in stale_reason(run(spawned_at=NOW), NOW - 5, **limits())
    assert "never spawned" in stale_reason(run(), None, **limits())
    quiet = run(spawned_at=NOW - 700, claimed_at=NOW - 701)
    assert "no heartbeat or progress for 700s" in stale_reason(quiet, None, **limits())
    assert stale_reason(quiet, None, **limits(idle_timeout=800)) is None


def test_last_activity_is_the_latest_sign_of_life() -> None:
    assert last_activity(run(spawned_at=NOW - 50, heartbeat_at=NOW - 10)) == NOW - 10


def test_the_verdict_of_a_running_run_in_words_and_its_next_threshold() -> None:
    spawned = run(spawned_at=NOW - 60)
    thresholds = {"input_timeout": 60.0, "idle_timeout": 600.0, "timeout": 1800.0, "now": NOW}
    assert verdict_text(spawned, NOW) == "active"
    assert next_threshold(spawned, **thresholds) == ("timeout", NOW - 60 + 1800)
    quiet = run(spawned_at=NOW - 60, liveness="quiet", liveness_since=NOW - 30)
    assert verdict_text(quiet, NOW).startswith("quiet since ")
    assert next_threshold(quiet, **thresholds) == ("stalled", NOW - 30 + 600)
    waiting = run(spawned_at=NOW - 60, liveness="waiting_input", liveness_since=NOW - 5,
                  liveness_note="Continue? [y/N]")
    assert verdict_text(waiting, NOW) == 'waiting for input: "Continue? [y/N]"'
    assert next_threshold(waiting, **thresholds)[0] == "timeout"  # waiting is not stalling
    assert verdict_text(run(spawned_at=NOW, liveness="looping"), NOW) == "looping"
    assert verdict_text(run(), NOW) == "starting"
    assert next_threshold(run(), **thresholds) is None


def test_a_run_on_a_stopped_or_silent_node_says_so() -> None:
    from taskherd.model.nodes import Node
    from taskherd.policy.liveness import node_down_reason

    box = Node("box-1", "h", 1, "1", lease=30.0, started_at=NOW - 900, last_seen=NOW - 600,
               stopped_at=None, running=1)
    assert node_down_reason(box, NOW).startswith("its node box-1 is down (last seen ")
    stopped = replace(box, stopped_at=NOW - 500)
    assert node_down_reason(stopped, NOW).startswith("its node box-1 stopped at ")
    assert node_down_reason(replace(box, last_seen=NOW), NOW) is None
