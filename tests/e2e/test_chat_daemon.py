"""The `chat` runtime end to end: the real daemon against a scripted OpenAI-compatible server."""

from __future__ import annotations

import time

import pytest

from taskherd.model import Outcome, TaskState
from tests.e2e.fake_openai import ApiError, RateLimited, StopMidStream, Text
from tests.fleet import Fleet

API_KEY = "sk-test-secret-123"


@pytest.fixture
def chat_fleet(tmp_path):
    fleets = []

    def make(api, *, max_attempts: int = 2, idle_timeout: str = "30s",
             max_concurrent: int = 3) -> Fleet:
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
            api_key_env = "GATEWAY_KEY"
            max_attempts = {max_attempts}
            backoff = "0.3s"
            idle_timeout = "{idle_timeout}"
        """)
        fleet.env["GATEWAY_KEY"] = API_KEY
        fleets.append(fleet)
        fleet.up()
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()


def test_a_streamed_reply_completes_the_task(chat_fleet, start_fake_openai):
    api = start_fake_openai([Text("Here is the summary.\nTASK_COMPLETE: summarised 3 threads",
                                  chunks=4)], api_key=API_KEY)
    fleet = chat_fleet(api)
    task = fleet.add("summarise", role="writer", prompt="Summarise the inbox")
    done = fleet.wait_final(task.id)
    assert done.state is TaskState.COMPLETED and done.summary == "summarised 3 threads"
    [run] = fleet.store.runs_of_task(task.id)
    assert (run.input_tokens, run.output_tokens) == (50, 10)
    [request] = api.completion_requests
    assert request.body["messages"] == [{"role": "user", "content": "Summarise the inbox"}]
    assert request.body["stream"] is True
    assert request.header("x-session-key") == f"taskherd:{task.id}:{run.id}" == run.session_id
    assert "Here is the summary." in open(run.log_path).read()
    assert API_KEY not in fleet.daemon_log.read_text()  # no secrets in logs


def test_sessions_are_unique_per_run(chat_fleet, start_fake_openai):
    api = start_fake_openai([], after_script=Text("TASK_COMPLETE: ok"), api_key=API_KEY)
    fleet = chat_fleet(api)
    tasks = [fleet.add(f"t{i}", role="writer", prompt="p") for i in range(3)]
    for task in tasks:
        fleet.wait_final(task.id)
    keys = {request.header("x-session-key") for request in api.completion_requests}
    assert len(keys) == 3


def test_http_429_cools_the_runtime_down_until_retry_after(chat_fleet, start_fake_openai):
    api = start_fake_openai([RateLimited(retry_after="120")],
                            after_script=Text("TASK_COMPLETE: later"), api_key=API_KEY)
    fleet = chat_fleet(api, max_concurrent=1)
    task = fleet.add("limited", role="writer", prompt="p")
    asked_at = time.time()
    cooldown = fleet.wait_until(lambda: fleet.store.active_cooldowns(time.time()),
                                what="a cooldown")[0]
    assert cooldown.runtime == "chat" and asked_at + 100 < cooldown.until < asked_at + 140
    run = fleet.wait_until(lambda: (r := fleet.store.runs_of_task(task.id)[0]).ended_at and r,
                           what="the run to end")
    assert run.outcome is Outcome.RATE_LIMITED
    assert fleet.store.get_task(task.id).attempts == 0
    fleet.cli("cooldown", "clear", "chat")
    assert fleet.wait_final(task.id).summary == "later"


def test_a_stream_that_stops_is_stalled(chat_fleet, start_fake_openai):
    api = start_fake_openai([StopMidStream(after_chunks=2)], api_key=API_KEY)
    fleet = chat_fleet(api, max_attempts=1, idle_timeout="2s")
    task = fleet.add("hangs", role="writer", prompt="p")
    fleet.wait_final(task.id)
    [run] = fleet.store.runs_of_task(task.id)
    assert run.outcome is Outcome.STALLED
    assert run.ended_at - run.spawned_at <= 2 + 2


def test_server_errors_strike_and_end_dead_with_the_error(chat_fleet, start_fake_openai):
    api = start_fake_openai([], after_script=ApiError(500, "upstream exploded"), api_key=API_KEY)
    fleet = chat_fleet(api)
    task = fleet.add("broken", role="writer", prompt="p")
    dead = fleet.wait_final(task.id)
    assert dead.state is TaskState.DEAD and dead.attempts == 2
    assert dead.last_error.startswith("HTTP 500") and "upstream exploded" in dead.last_error
    runs = fleet.store.runs_of_task(task.id)
    assert [r.outcome for r in runs] == [Outcome.FAILED, Outcome.FAILED]
