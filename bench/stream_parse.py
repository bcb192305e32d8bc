"""How fast ClaudeStreamReader reads a Claude Code stream-json log.

Generates a 100,000-event stream shaped like a real run (mostly assistant and
user lines of realistic size, tool results of a few KB, retries, a result),
feeds it in 64 KiB chunks as a log tail would, and prints events/s and CPU
seconds per 10k events, beside a plain `json.loads` of every line for scale.
The target (issue: runtimes) is 10,000 events/s at little CPU.

    .venv/bin/python bench/stream_parse.py [--events N]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from taskherd.runtimes.claude_stream import ClaudeStreamReader

SESSION = "2b1c7f4e-3a1d-4a59-9a55-1f3e0c6d9b21"
CHUNK = 64 * 1024


def assistant_text(rng: random.Random) -> dict:
    words = " ".join(
        rng.choice(["the", "test", "passes", "now", "fix", "queue"])
        for _ in range(rng.randint(5, 120))
    )
    return {
        "type": "assistant",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-4-8",
            "content": [{"type": "text", "text": words}],
            "stop_reason": None,
            "usage": {"input_tokens": 4, "cache_read_input_tokens": 21000, "output_tokens": 1},
        },
        "parent_tool_use_id": None,
        "session_id": SESSION,
        "uuid": "u",
    }


def assistant_tool_use(rng: random.Random) -> dict:
    return {
        "type": "assistant",
        "message": {
            "id": "msg_02",
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-4-8",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "Bash",
                    "input": {"command": "pytest -q tests/unit", "description": "run tests"},
                }
            ],
            "usage": {"input_tokens": 4, "output_tokens": 60},
        },
        "parent_tool_use_id": None,
        "session_id": SESSION,
        "uuid": "u",
    }


def user_tool_result(rng: random.Random) -> dict:
    output = "\n".join(f"tests/unit/test_{i}.py ....... [{i}%]" for i in range(rng.randint(1, 80)))
    return {
        "type": "user",
        "message": {
            "role": "user",
            "content": [
                {
                    "tool_use_id": "toolu_01",
                    "type": "tool_result",
                    "content": output,
                    "is_error": False,
                }
            ],
        },
        "parent_tool_use_id": None,
        "session_id": SESSION,
        "uuid": "u",
        "tool_use_result": {"stdout": output, "stderr": "", "interrupted": False},
    }


def api_retry(rng: random.Random) -> dict:
    return {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "max_retries": 10,
        "retry_delay_ms": 5000,
        "error_status": 529,
        "error": "overloaded",
        "session_id": SESSION,
        "uuid": "u",
    }


def generate(events: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    makers = [assistant_text] * 4 + [assistant_tool_use] * 3 + [user_tool_result] * 3
    lines = [
        json.dumps(
            {
                "type": "system",
                "subtype": "init",
                "session_id": SESSION,
                "model": "claude-opus-4-8",
                "tools": ["Bash"],
            }
        )
    ]
    for index in range(events - 2):
        maker = api_retry if index % 1000 == 999 else rng.choice(makers)
        lines.append(json.dumps(maker(rng), separators=(",", ":")))
    lines.append(
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "result": "TASK_COMPLETE: done",
                "session_id": SESSION,
                "total_cost_usd": 1.25,
                "num_turns": 40,
                "usage": {"input_tokens": 10, "output_tokens": 20},
            },
            separators=(",", ":"),
        )
    )
    return ("\n".join(lines) + "\n").encode()


def measure(label: str, stream: bytes, events: int, read) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    seen = read(stream)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert seen == events, (label, seen, events)
    print(
        f"{label:<34} {events / wall:>12,.0f} events/s   "
        f"{cpu / events * 10_000:.4f} CPU s per 10k events"
    )


def with_reader(stream: bytes) -> int:
    reader = ClaudeStreamReader()
    for start in range(0, len(stream), CHUNK):
        reader.feed(stream[start : start + CHUNK])
    reader.finish()
    assert reader.result is not None and reader.result.summary == "done"
    return reader.events_seen


def with_json_loads(stream: bytes) -> int:
    return sum(1 for line in stream.splitlines() if json.loads(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    events = parser.parse_args().events
    stream = generate(events)
    print(
        f"stream: {events:,} events, {len(stream) / 1e6:.1f} MB, fed in {CHUNK // 1024} KiB chunks"
    )
    measure("ClaudeStreamReader.feed", stream, events, with_reader)
    measure("json.loads per line (reference)", stream, events, with_json_loads)


if __name__ == "__main__":
    main()
