"""An event's JSON (what a listener of another process decodes) is written by hand, the kind
first: the same text json.dumps writes, whatever its fields hold."""

from __future__ import annotations

import json

from taskherd.model import Event, EventKind, TaskState


def as_json_dumps_writes(event: Event) -> str:
    fields = {"kind": event.kind.value}
    fields |= {name: value for name, value in event.__dict__.items()
               if value is not None and name != "kind"}
    if event.state is not None:
        fields["state"] = event.state.value
    return json.dumps(fields, separators=(",", ":"))


def test_an_event_is_written_as_json_dumps_writes_it_and_read_back_whole():
    events = [
        Event(EventKind.TASK_ADDED, 1_795_000_000.123456, task_id=5, state=TaskState.READY,
              role='développeur "x" \\ \n\x01 \ud800'),
        Event(EventKind.RUN_ENDED, 1000, run_id=7, job="nightly", runtime="claude"),
        Event(EventKind.COOLDOWN_SET, 1e-7, runtime="x"),
        Event(EventKind.TASK_CHANGED, float("inf")),
    ]
    for event in events:
        line = event.to_json()
        assert line == as_json_dumps_writes(event)
        assert Event.kind_of(line.encode()) == event.kind.value
        if event.at != float("inf"):
            assert Event.from_json(line) == event
