"""The HTTP API and its event stream give every time as unix seconds (as they always did) with
ISO 8601 beside it, offset included, in the fleet's zone ([daemon] timezone)."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from zoneinfo import ZoneInfo

import httpx
import pytest

from taskherd.model import NewTask
from tests.api_server import CONFIG, served

ZONE = ZoneInfo("America/New_York")
MOMENT = 1_795_000_000.25  # 2026-11-18 11:06:40.25 UTC; New York is on EST then (-05:00)


@pytest.fixture
def api(tmp_path):
    with served(tmp_path, CONFIG.replace('timezone = "UTC"',
                                         'timezone = "America/New_York"')) as running:
        yield running


def same_moment(iso: str, epoch: float) -> bool:
    parsed = datetime.fromisoformat(iso)
    return parsed.timestamp() == epoch and parsed.utcoffset() == ZONE.utcoffset(parsed)


def test_rest_answers_times_as_epoch_with_iso_in_the_fleets_zone_beside(api):
    task = api.queue.store.enqueue(NewTask(role="coder", title="t"), MOMENT).task
    shown = api.client("read").get(f"/v1/tasks/{task.id}").json()["task"]
    assert shown["created_at"] == MOMENT  # the number keeps its meaning for clients
    assert shown["created_at_iso"] == "2026-11-18T06:06:40.250-05:00"
    assert same_moment(shown["run_after_iso"], shown["run_after"])
    assert shown["finished_at"] is None and "finished_at_iso" not in shown
    listed = api.client("read").get("/v1/tasks").json()["tasks"]
    assert listed[0]["created_at_iso"] == shown["created_at_iso"]


def test_an_event_gives_its_time_as_epoch_and_iso(api):
    seen: list[dict] = []
    hello, added = threading.Event(), threading.Event()

    def read() -> None:
        with httpx.stream("GET", api.url + "/v1/events", timeout=30,
                          headers={"Authorization": f"Bearer {api.tokens['read']}"}) as stream:
            kind = None
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind == "hello":
                    hello.set()
                elif line.startswith("data: ") and kind == "task_added":
                    seen.append(json.loads(line[6:]))
                    added.set()
                    return

    threading.Thread(target=read, daemon=True).start()
    assert hello.wait(10)
    api.queue.store.enqueue(NewTask(role="coder", title="t"), MOMENT)
    assert added.wait(10)
    [event] = seen
    assert event["at"] == MOMENT and event["at_iso"] == "2026-11-18T06:06:40.250-05:00"


def test_the_dashboard_shows_times_in_the_fleets_zone_named_and_how_long_ago(api):
    import time

    created = time.time() - 185
    task = api.queue.store.enqueue(NewTask(role="coder", title="t"), created).task
    client = api.client()
    client.post("/login", data={"token": api.tokens["operator"]})
    page = client.get(f"/tasks/{task.id}").text
    local = datetime.fromtimestamp(created, ZONE)
    stamp = local.strftime("%Y-%m-%d %H:%M:%S %Z")  # EST or EDT: the zone is named
    assert f'<time datetime="{local.isoformat(timespec="seconds")}">{stamp}</time>' in page
    assert f"{stamp}</time> <span class=\"ago\">(3 min ago)</span>" in page
