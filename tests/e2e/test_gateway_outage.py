"""A chat gateway that restarts is not the agents' fault: the real daemon against a loopback
OpenAI-compatible server that is stopped (connections refused), started again on its port
answering 503 for a while, then answering. No task takes a strike or dies, every one completes
once it is back, one probe request goes per pause, and `status`, `doctor` and the delivery
targets say the endpoint is down since when. Scaled down: 10 tasks, an outage of a few seconds
(bench/gateway_outage.py measures 50 tasks and 2 minutes)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from taskherd.model import Outcome, TaskState
from tests.e2e.fake_openai import ApiError, StopMidStream, Text
from tests.fleet import Fleet

TASKS = 10


@pytest.fixture
def gateway_fleet(tmp_path):
    fleets = []

    def make(api, max_concurrent: int = 3) -> Fleet:
        fleet = Fleet(tmp_path, f"""
            [daemon]
            database = "q.db"
            data_dir = "data"
            timezone = "UTC"
            max_concurrent = {max_concurrent}

            [roles.writer]
            runtime = "chat"
            base_url = "{api.base_url}"
            model = "fake-model"
            max_attempts = 2
            backoff = "0.3s"
            deliver_to = ["@ops"]
            on = ["dead", "endpoint_down", "endpoint_up"]
        """)
        fleet.cli("alias", "add", "ops", "file", str(tmp_path / "told.jsonl"))
        fleets.append(fleet)
        fleet.up()
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()


def endpoint_runs(fleet: Fleet) -> list:
    """The ended runs the endpoint's outage ended, in the order they were claimed."""
    runs = [run for task_id in range(1, TASKS + 1) for run in fleet.store.runs_of_task(task_id)]
    return sorted((r for r in runs if r.ended_at and (r.error or "").startswith("endpoint down")),
                  key=lambda r: r.claimed_at)


def test_a_gateway_that_restarts_costs_no_strike_and_is_probed_once_a_pause(
        gateway_fleet, start_fake_openai):
    api = start_fake_openai([], after_script=Text("TASK_COMPLETE: answered"))
    port = urlsplit(api.base_url).port
    fleet = gateway_fleet(api)
    api.stop()  # the gateway goes away: every connection is refused
    tasks = [fleet.add(f"ask {n}", role="writer", prompt=f"question {n}") for n in range(TASKS)]

    # The runs under way meet it together; then one probe at a time, each pause longer.
    fleet.wait_until(lambda: len(endpoint_runs(fleet)) >= 5, what="probes while it is down")
    down = fleet.store.cooldown_of("chat")
    assert down.down_since is not None and "ConnectError" in down.reason
    status = fleet.cli("status").stdout
    assert "runtime chat: endpoint down since " in status and "no strike" in status, status
    board = json.loads(fleet.cli("status", "--json").stdout)
    assert board["endpoints_down"][0]["since"] == down.down_since
    doctor = fleet.cli("doctor", check=False).stdout
    assert any(line.startswith("problem runtime chat: endpoint down since ")
               and f"start the gateway at {api.base_url}" in line
               for line in doctor.splitlines()), doctor

    # Back on its port, but its upstream not yet: the next probe is answered 503, then a
    # reply cut mid-answer (no TASK_COMPLETE yet: the probe passes on its first words, so
    # the cut is an outage of its own, begun again).
    api.script, api.after_script = [ApiError(503, "upstream unavailable")], \
        Text("TASK_COMPLETE: answered")
    api.start(port)
    for task in tasks:
        done = fleet.wait_final(task.id, timeout=60)
        assert done.state is TaskState.COMPLETED and done.summary == "answered"
        assert (done.attempts, done.rate_limits, done.rescues) == (0, 0, 0)

    failed = endpoint_runs(fleet)
    assert all(run.outcome is Outcome.LOST for run in failed)
    assert any("HTTP 503" in run.error for run in failed)
    first_pause = min(run.ended_at for run in failed)
    probes = [run for run in failed if run.claimed_at >= first_pause]
    # One probe per pause: none overlaps another, and each waited longer than the last.
    for before, after in itertools.pairwise(probes):
        assert after.claimed_at >= before.ended_at
    gaps = [after.claimed_at - before.ended_at for before, after in itertools.pairwise(probes)]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0], gaps
    assert fleet.store.all_cooldowns() == []  # the passing probe lifted it
    told = [json.loads(line)["event"] for line in
            (fleet.root / "told.jsonl").read_text().splitlines()]
    assert told == ["endpoint_down", "endpoint_up"], told


def test_a_reply_cut_mid_answer_is_asked_again_with_no_strike(gateway_fleet, start_fake_openai):
    api = start_fake_openai([StopMidStream("I was saying", after_chunks=2, drop_connection=True)],
                            after_script=Text("TASK_COMPLETE: whole"))
    fleet = gateway_fleet(api, max_concurrent=1)
    task = fleet.add("cut", role="writer", prompt="p")
    done = fleet.wait_final(task.id)
    assert done.state is TaskState.COMPLETED and done.summary == "whole"
    assert done.attempts == 0
    cut, whole = fleet.store.runs_of_task(task.id)
    assert cut.outcome is Outcome.LOST and cut.error.startswith("endpoint down: ")
    assert "I w" in Path(cut.log_path).read_text()  # what it had said stays in its log
    assert whole.outcome is Outcome.SUCCEEDED
