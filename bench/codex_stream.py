"""The daemon reading a Codex run that writes 10,000 `codex exec --json` events a second.

    .venv/bin/python bench/codex_stream.py             # 10 s at 10,000 events/s
    .venv/bin/python bench/codex_stream.py --rate 20000 --seconds 5

A real `taskherd up` runs one task of a `codex` role whose binary is a stand-in that writes
Codex's JSON Lines (the event kinds and sizes of a real run: command executions started and
completed with their output, reasoning, agent messages, then the final message and the turn's
usage) at --rate events per second. The daemon's own CPU time (user+system, not its
children's) over the run is the figure, also per event; the target is under 20 % of one core,
as for Claude Code. Beside it, the same bytes parsed by a bare `json.loads` loop in this
process (what a naive reader would spend).
"""

from __future__ import annotations

import sys

import stream_reading

STAND_IN = r'''
import json, sys, time
rate, seconds = int(sys.argv[-3]), float(sys.argv[-2])  # after codex's own flags, before '-'
out = sys.stdout
def emit(event):
    out.write(json.dumps(event, separators=(",", ":")) + "\n")
emit({"type": "thread.started", "thread_id": "01a207fd-014c-7fc1-8878-0f5f983161a5"})
emit({"type": "turn.started"})
command = "/bin/bash -c 'pytest -q tests/unit'"
started = {"type": "item.started", "item": {"id": "item_1", "type": "command_execution",
           "command": command, "aggregated_output": "", "exit_code": None,
           "status": "in_progress"}}
done = {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
        "command": command, "aggregated_output": "." * 600 + "\n", "exit_code": 0,
        "status": "completed"}}
reasoning = {"type": "item.completed", "item": {"id": "item_2", "type": "reasoning",
             "text": "**Planning the next step** I will run the tests, then fix what fails."}}
message = {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message",
           "text": "Ran the tests; two fail, fixing the first now."}}
lines = [json.dumps(e, separators=(",", ":")) + "\n"
         for e in (started, done) * 4 + (reasoning, message)]
start = time.monotonic(); sent = 0; total = int(rate * seconds)
while sent < total:
    batch = min(rate // 100, total - sent)
    out.write("".join(lines[(sent + i) % len(lines)] for i in range(batch)))
    out.flush()
    sent += batch
    ahead = sent / rate - (time.monotonic() - start)
    if ahead > 0:
        time.sleep(ahead)
emit({"type": "item.completed", "item": {"id": "item_9", "type": "agent_message",
      "text": "All green.\nTASK_COMPLETE: streamed"}})
emit({"type": "turn.completed", "usage": {"input_tokens": 1000, "cached_input_tokens": 0,
      "output_tokens": 500, "reasoning_output_tokens": 100}})
'''


if __name__ == "__main__":
    sys.exit(stream_reading.main(__doc__.split("\n")[0], "codex", STAND_IN))
