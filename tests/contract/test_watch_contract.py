"""The supervisor's verdicts and the probe after a rate limit, on every store."""

from __future__ import annotations

import asyncio
import json

from taskherd.model import EventKind, Liveness, NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store.watch import VerdictChange

NOW = 1_800_000_000.0


def running_run(store, node: str = "n1"):
    store.enqueue(NewTask(role="coder", title="t"), NOW)
    claim = store.claim(ClaimRequest(node, NOW, 60.0))
    store.mark_spawned(claim.run.id, NOW, 60.0, pid=4242, pid_started_at=NOW,
                       log_path="/tmp/run.log")
    return claim.run


def test_verdicts_are_kept_on_the_open_run(store):
    run = running_run(store)
    assert store.set_liveness([VerdictChange(run.id, Liveness.QUIET, NOW - 5)]) == 1
    quiet = store.get_run(run.id)
    assert (quiet.liveness, quiet.liveness_since, quiet.liveness_note) == ("quiet", NOW - 5, None)
    store.note_input_needed(run.id, run.task_id, "Continue? [y/N]", NOW + 1)
    waiting = store.get_run(run.id)
    assert waiting.liveness == "waiting_input" and waiting.liveness_note == "Continue? [y/N]"
    assert store.open_run_ids("n1") == {run.id: NOW}
    assert store.unspawned_run_ids("n1") == []
    store.heartbeat(run.id, NOW + 2, 60.0)
    assert store.heartbeats_since("n1", NOW + 1) == {run.id: NOW + 2}
    assert store.heartbeats_since("n1", NOW + 3) == {}
    finished = store.finish_run(run.id, RunResult(Outcome.NEEDS_INPUT, error="Continue? [y/N]"),
                                RetryPolicy(), NOW + 3)
    assert finished.task.state.value == "blocked" and finished.task.attempts == 0
    assert finished.task.reason == "Continue? [y/N]"
    assert store.open_run_ids("n1") == {}
    assert store.set_liveness([VerdictChange(run.id, Liveness.ACTIVE, NOW + 4)]) == 1
    assert store.get_run(run.id).liveness == "waiting_input"  # an ended run is not rewritten


def test_the_unspawned_runs_of_a_node_are_only_those_claimed_and_not_started(store):
    store.enqueue_many([NewTask(role="coder", title=f"t{i}") for i in range(3)], NOW)
    waiting = store.claim(ClaimRequest("n1", NOW, 60.0)).run
    elsewhere = store.claim(ClaimRequest("n2", NOW, 60.0)).run
    started = running_run(store)  # claimed and spawned
    assert store.unspawned_run_ids("n1") == [waiting.id]
    assert store.unspawned_run_ids("n2") == [elsewhere.id]
    store.mark_spawned(waiting.id, NOW + 1, 60.0, pid=4243, pid_started_at=NOW + 1,
                       log_path="/tmp/run2.log")
    assert store.unspawned_run_ids("n1") == []
    assert started.id in store.open_run_ids("n1")


def test_one_node_takes_the_probe_and_its_success_lifts_the_cooldown(store, reopen):
    store.set_cooldown("claude", NOW + 60, "429", NOW)
    assert not store.take_probe("claude", "n1", NOW + 30)  # still paused
    other = reopen()
    try:
        assert store.take_probe("claude", "n1", NOW + 61)
        assert not other.take_probe("claude", "n2", NOW + 61)  # one probe, across nodes
        store.attach_probe("claude", "n1", 7, NOW + 61)
        [probing] = other.all_cooldowns()
        assert (probing.probe_node, probing.probe_run_id) == ("n1", 7)
        assert probing.probing(NOW + 61) and not probing.active(NOW + 61)
        assert not store.probe_passed("claude", 8, NOW + 62)  # not the probe's run
        assert store.release_probe("claude", 7)  # it told nothing: another may go
        assert other.take_probe("claude", "n2", NOW + 63)
        other.attach_probe("claude", "n2", 9, NOW + 63)
        # A new limit ends the probe; the next one waits for the new reset.
        store.set_cooldown("claude", NOW + 200, "429 again", NOW + 64)
        assert store.cooldown_of("claude").probe_node is None
        assert store.take_probe("claude", "n1", NOW + 201)
        store.attach_probe("claude", "n1", 10, NOW + 201)
        assert store.probe_passed("claude", 10, NOW + 202)
        assert store.all_cooldowns() == [] and store.cooldown_of("claude") is None
    finally:
        other.close()


def test_an_endpoint_outage_keeps_its_start_and_tells_its_begin_and_end_once(store, reopen):
    store.add_alias("ops", "file", "/tmp/ops.jsonl", NOW)
    down = store.endpoint_down("chat", NOW + 1, "endpoint down: ConnectError", 1.0, ["ops"], NOW)
    assert (down.down_since, down.until, down.span) == (NOW, NOW + 1, 1.0)
    other = reopen()
    try:
        # Another run cut off by the same restart, and a probe that finds it still down, on
        # another node: the outage's start is kept, nobody is told again.
        other.endpoint_down("chat", NOW + 1, "endpoint down: 502", 1.0, ["ops"], NOW + 0.5)
        assert other.take_probe("chat", "n2", NOW + 2)
        other.attach_probe("chat", "n2", 7, NOW + 2)
        again = other.endpoint_down("chat", NOW + 5, "endpoint down: 503", 2.0, ["ops"], NOW + 3)
        assert (again.down_since, again.until, again.span) == (NOW, NOW + 5, 2.0)
        assert again.probe_node is None  # the failed probe is over: the next waits for until
        assert store.take_probe("chat", "n1", NOW + 6)
        store.attach_probe("chat", "n1", 8, NOW + 6)
        assert store.probe_passed("chat", 8, NOW + 7, ["ops"])
        assert other.cooldown_of("chat") is None
    finally:
        other.close()
    told = [json.loads(d.payload) for d in sorted(store.list_deliveries(), key=lambda d: d.id)]
    assert [(t["event"], t["endpoint"]["down_since"]) for t in told] == [
        ("endpoint_down", NOW), ("endpoint_up", NOW)]
    # A rate limit is no outage: its probe's success tells nobody, and a later outage
    # begins afresh.
    store.set_cooldown("chat", NOW + 20, "429", NOW + 10)
    assert store.cooldown_of("chat").down_since is None
    assert store.take_probe("chat", "n1", NOW + 21)
    store.attach_probe("chat", "n1", 9, NOW + 21)
    assert store.probe_passed("chat", 9, NOW + 21, ["ops"])
    assert len(store.list_deliveries()) == 2
    assert store.endpoint_down("chat", NOW + 31, "down", 1.0, [], NOW + 30).down_since == NOW + 30


def test_waiting_for_input_is_an_event(store):
    run = running_run(store)

    async def heard():
        async with store.listen() as events:
            store.note_input_needed(run.id, run.task_id, "Press Enter", NOW)
            while (event := await asyncio.wait_for(anext(events), 10)).kind is not (
                    EventKind.INPUT_NEEDED):
                pass
            return event

    event = asyncio.run(heard())
    assert (event.task_id, event.run_id) == (run.task_id, run.id)
