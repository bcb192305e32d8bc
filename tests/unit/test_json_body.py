"""An API answer's body says the same whichever encoder wrote it: orjson (the `fast` extra)
or the standard library."""

from __future__ import annotations

import json

import pytest

from taskherd.api import app
from taskherd.model import NewTask, TaskState
from taskherd.policy.timefmt import zone_named
from taskherd.store import open_store

pytest.importorskip("orjson")


def answer(tmp_path) -> dict:
    with open_store(str(tmp_path / "q.db")) as store:
        task = store.enqueue(NewTask(role="coder", title="café ☕ naïve", meta={"to": ["ops"]},
                                     run_after=1_700_000_001.25), 1_700_000_000.5).task
    return {"task": task, "created": True, "counts": {3: "three"}, "cost": 0.1 + 0.2,
            "state": TaskState.READY}


def test_orjson_and_the_standard_library_write_the_same_answer(tmp_path, monkeypatch):
    zone, data = zone_named("Europe/Paris"), answer(tmp_path)
    fast = app.json_body(data, zone)
    monkeypatch.setattr(app, "_orjson", None)
    plain = app.json_body(data, zone)
    assert fast != plain  # (orjson writes UTF-8 where the standard library escapes)
    assert json.loads(fast) == json.loads(plain)
    assert json.loads(fast)["task"]["created_at_iso"] == "2023-11-14T23:13:20.500+01:00"


def test_a_text_orjson_refuses_is_written_by_the_standard_library():
    body = app.json_body({"summary": "half \ud800 a character"})
    assert json.loads(body) == {"summary": "half \ud800 a character"}
