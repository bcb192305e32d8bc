"""Liveness both ways, with the real daemon and real agent processes: an agent waiting at a
question is blocked (no strike) or kept for an answer, a silent CPU-bound agent is left to
work, a looping agent is ended, an honest run with varied output is not, and `runs list` /
`task show` name the verdict. Thresholds are short so the tests are quick."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from taskherd.model import EventKind, Liveness, Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

ASKS = """
    import sys, time
    print("reading the config", flush=True)
    sys.stdout.write("Overwrite the existing config? [y/N] ")
    sys.stdout.flush()
    time.sleep(600)  # a headless agent at a prompt nobody will answer
"""

ASKS_AND_READS = """
    import sys
    print("about to migrate", flush=True)
    sys.stdout.write("Do you want to proceed? [y/N] ")
    sys.stdout.flush()
    answer = sys.stdin.readline().strip()
    print()  # no terminal echoes the answer and its Enter here
    print(f"TASK_COMPLETE: answered {answer}")
"""

COMPUTES = """
    import time
    end = time.time() + 6  # three idle_timeouts of work, printing nothing
    total = 0
    while time.time() < end:
        total += sum(range(1000))
    print("TASK_COMPLETE: computed", total > 0)
"""

LOOPS = """
    import time
    while True:
        print("checking the build status", flush=True)
        print("status: pending", flush=True)
        time.sleep(0.01)
"""

# An honest run: thousands of lines, with the repetition real work has (progress dots, the
# same header for every file, blank lines, a line repeated a few times) but always moving on.
VARIED = """
    import time
    for module in range(60):
        print("=" * 40)
        print("collecting tests")
        print("=" * 40)
        for case in range(40):
            print(f"tests/test_mod{module}.py::test_case_{case} PASSED")
        for _ in range(5):
            print("waiting for the database")
        print()
        print(f"{module + 1}/60 modules, {(module + 1) * 40} passed")
        time.sleep(0.02)
    print("TASK_COMPLETE: 2400 passed")
"""


def fleet_for(tmp_path, roles: dict[str, dict[str, str]]) -> Fleet:
    text = "".join(f"\n[roles.{name}]\n" + "".join(f"{k} = {v}\n" for k, v in opts.items())
                   for name, opts in roles.items())
    fleet = Fleet(tmp_path, """
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        max_concurrent = 4
        path = "/usr/bin:/bin"
        """ + text)
    fleet.up()
    return fleet


def command(tmp_path, name: str, body: str) -> str:
    return json.dumps([PYTHON, "-S", agent(tmp_path, name, body)])


@pytest.fixture
def fleets():
    made: list[Fleet] = []
    yield made
    for fleet in made:
        fleet.close()


def test_an_agent_at_a_question_is_blocked_with_it_and_charged_nothing(tmp_path, fleets):
    fleets.append(fleet := fleet_for(tmp_path, {"asker": {
        "command": command(tmp_path, "asker", ASKS), "input_timeout": '"1s"',
        "idle_timeout": '"30s"', "max_attempts": "1"}}))

    async def added_and_heard():
        async with fleet.store.listen() as events:
            task = fleet.add("migrate", role="asker")
            while (event := await asyncio.wait_for(anext(events), 30)).kind is not (
                    EventKind.INPUT_NEEDED):
                pass
            return task, event

    task, event = asyncio.run(added_and_heard())  # listeners hear that it waits
    blocked = fleet.wait_until(
        lambda: (t := fleet.store.get_task(task.id)).state is TaskState.BLOCKED and t,
        timeout=30, what="the task to be blocked")
    assert event.task_id == task.id
    [run] = fleet.store.runs_of_task(task.id)
    assert run.outcome is Outcome.NEEDS_INPUT
    assert blocked.attempts == 0  # no strike: a headless agent could not ask anyone
    assert "Overwrite the existing config? [y/N]" in blocked.reason
    # Ended within input_timeout + 2 s of its last output (the prompt).
    last_output = os.stat(run.log_path).st_mtime
    assert run.ended_at - last_output <= 1 + 2
    assert run.liveness == Liveness.WAITING_INPUT and "[y/N]" in run.liveness_note
    shown = fleet.cli("task", "show", str(task.id)).stdout
    assert "needs_input" in shown and "Overwrite the existing config?" in shown


def test_on_input_wait_keeps_the_agent_for_a_persons_answer(tmp_path, fleets):
    fleets.append(fleet := fleet_for(tmp_path, {"asker": {
        "command": command(tmp_path, "asker", ASKS_AND_READS), "prompt_via": '"file"',
        "on_input": '"wait"', "input_timeout": '"1s"', "idle_timeout": '"3s"'}}))
    task = fleet.add("migrate", role="asker")
    run = fleet.wait_until(
        lambda: (runs := fleet.store.runs_of_task(task.id))
        and runs[-1].liveness == "waiting_input" and runs[-1],
        timeout=30, what="the agent to be seen waiting")
    assert run.liveness_note == "Do you want to proceed? [y/N]"
    listed = fleet.cli("runs", "list").stdout
    assert 'waiting for input: "Do you want to proceed? [y/N]"' in listed
    assert "waiting for input" in fleet.cli("runs", "running").stdout
    shown = fleet.cli("task", "show", str(task.id)).stdout
    assert "liveness: waiting for input" in shown and "timeout at" in shown
    # Kept alive past idle_timeout: waiting for a person is not stalling.
    fleet.wait_until(lambda: time.time() - run.liveness_since > 3 + 1, timeout=10,
                     what="idle_timeout to pass")
    assert fleet.store.get_task(task.id).state is TaskState.RUNNING
    # Bad answers change nothing; then the answer reaches the agent's stdin.
    assert fleet.cli("task", "answer", str(task.id), "", check=False).returncode == 2
    assert fleet.cli("task", "answer", "999", "y", check=False).returncode != 0
    fleet.cli("task", "answer", str(task.id), "--", "-y")
    done = fleet.wait_final(task.id, timeout=30)
    assert done.state is TaskState.COMPLETED and done.summary == "answered -y"
    assert done.attempts == 0
    refused = fleet.cli("task", "answer", str(task.id), "y", check=False)
    assert refused.returncode == 1 and "completed" in refused.stderr


def test_a_silent_cpu_bound_agent_is_never_stalled(tmp_path, fleets):
    fleets.append(fleet := fleet_for(tmp_path, {"cruncher": {
        "command": command(tmp_path, "cruncher", COMPUTES), "idle_timeout": '"2s"',
        "input_timeout": '"1s"', "max_attempts": "1"}}))
    task = fleet.add("crunch", role="cruncher")
    done = fleet.wait_final(task.id, timeout=60)
    [run] = fleet.store.runs_of_task(task.id)
    assert run.outcome is Outcome.SUCCEEDED, (run.outcome, run.error)
    assert done.state is TaskState.COMPLETED


def test_a_looping_agent_is_ended_within_its_window_with_the_block(tmp_path, fleets):
    fleets.append(fleet := fleet_for(tmp_path, {"looper": {
        "command": command(tmp_path, "looper", LOOPS), "loop_repeats": "20",
        "loop_window": '"30s"', "max_attempts": "2", "backoff": '"60s"'}}))
    task = fleet.add("watch the build", role="looper")
    run = fleet.wait_until(lambda: (runs := fleet.store.runs_of_task(task.id))
                           and runs[0].ended_at and runs[0],
                           timeout=30, what="the loop to be ended")
    assert run.outcome is Outcome.LOOPING
    assert run.ended_at - run.spawned_at <= 30
    task = fleet.store.get_task(task.id)
    assert task.attempts == 1  # a strike: the work went nowhere
    assert "checking the build status\nstatus: pending" in task.last_error
    assert "looping" in fleet.cli("runs", "list").stdout


def test_a_long_honest_run_with_varied_output_is_not_a_loop(tmp_path, fleets):
    fleets.append(fleet := fleet_for(tmp_path, {"tester": {
        "command": command(tmp_path, "tester", VARIED), "loop_repeats": "20",
        "loop_window": '"2m"', "max_attempts": "1"}}))
    task = fleet.add("run the suite", role="tester")
    done = fleet.wait_final(task.id, timeout=60)
    [run] = fleet.store.runs_of_task(task.id)
    assert run.outcome is Outcome.SUCCEEDED, run.error
    assert done.summary == "2400 passed"


# A provider with a limit: for LIMIT_FOR seconds after the first call every call is refused
# with a Retry-After of 2 s; after that, the work takes a moment and succeeds.
PROVIDER = """
    import os, sys, time
    first = os.environ["FIRST_CALL"]
    try:
        with open(first, "x") as marker:  # the first call notes when the limit began
            marker.write(str(time.time()))
    except FileExistsError:
        pass
    while not (began := open(first).read()):
        pass  # the first caller is writing it
    if time.time() < float(began) + float(os.environ["LIMIT_FOR"]):
        print("Error: 429 Too Many Requests")
        print("Retry-After: 2")
        sys.exit(1)
    time.sleep(0.5)
    print("TASK_COMPLETE: past the limit")
"""


def provider_fleet(tmp_path, fleets, limit_for: float) -> tuple[Fleet, list[int]]:
    first_call = tmp_path / "first-call"
    fleets.append(fleet := fleet_for(tmp_path, {"caller": {
        "command": command(tmp_path, "caller", PROVIDER),
        "env": f'{{ FIRST_CALL = "{first_call}", LIMIT_FOR = "{limit_for}" }}',
        "max_attempts": "1", "rate_limit_cooldown": '"1m"'}}))
    tasks = [fleet.add(f"call {i}", role="caller").id for i in range(8)]
    for task_id in tasks:
        fleet.wait_final(task_id, timeout=90)
    runs = sorted((run for task_id in tasks for run in fleet.store.runs_of_task(task_id)),
                  key=lambda run: run.claimed_at)
    return fleet, runs


def test_after_a_limit_one_probe_goes_first_and_the_rest_follow_its_success(tmp_path, fleets):
    fleet, runs = provider_fleet(tmp_path, fleets, limit_for=1.0)
    limited = [run for run in runs if run.outcome is Outcome.RATE_LIMITED]
    assert limited and all(run.claimed_at < runs[len(limited)].claimed_at for run in limited)
    # After the reset: a single probe, not a wave. Nothing else of the runtime was claimed
    # until the probe had got past the limit (here: its success).
    probe, *rest = runs[len(limited):]
    assert probe.outcome is Outcome.SUCCEEDED
    assert rest and all(run.claimed_at >= probe.ended_at for run in rest)
    assert all(run.outcome is Outcome.SUCCEEDED for run in rest)
    assert all(fleet.store.get_task(run.task_id).attempts == 0 for run in runs)
    assert fleet.store.all_cooldowns() == []  # the probe lifted it


def test_a_probe_that_meets_the_limit_again_doubles_the_cooldown(tmp_path, fleets):
    # Limited for 3.5 s: the first wave pauses the runtime for 2 s (Retry-After), the probe
    # at ~2 s meets the limit again and the pause doubles to 4 s; the next probe passes.
    _, runs = provider_fleet(tmp_path, fleets, limit_for=3.5)
    # The first wave: claimed before the first run ended (its limit paused the runtime).
    first_end = min(run.ended_at for run in runs)
    probes = [run for run in runs if run.claimed_at > first_end]
    first_probe, second_probe, *rest = probes
    assert first_probe.outcome is Outcome.RATE_LIMITED
    assert second_probe.outcome is Outcome.SUCCEEDED
    # One run at a time while probing; the second probe waited twice the first pause.
    assert second_probe.claimed_at >= first_probe.ended_at + 2 * 2
    assert rest and all(run.claimed_at >= second_probe.ended_at for run in rest)
    assert all(run.outcome is Outcome.SUCCEEDED for run in rest)
