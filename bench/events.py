"""Events benchmark: how long a commit in one process takes to reach a listener in another.

A writer process enqueues tasks one at a time through the store (paced, so this measures the
latency of one event and not a queue's throughput), noting the wall time just before each
`enqueue` call; this process listens (`Store.listen()`) and notes when each task's
`task_added` arrives. The latency of an event is arrival − call start: an upper bound that
includes the writing transaction itself. Same host, same clock.

Run on SQLite (datagram sockets beside the database) and on PostgreSQL (LISTEN/NOTIFY, a
throwaway server from tests/pg.py). Target: p99 ≤ 50 ms on both.

    python bench/events.py [--events 500] [--gap 0.005] [--no-postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from taskherd.model import EventKind
from taskherd.store import open_store

TARGET_P99 = 0.050
WRITER = """
import json, sys, time
from taskherd.model import NewTask
from taskherd.store import open_store

database, count, gap, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
started = {}
with open_store(database, durability="normal") as store:
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()  # the listener is listening
    for i in range(count):
        before = time.time()
        task = store.enqueue(NewTask(role="bench", title=f"event {i}"), before).task
        started[task.id] = before
        time.sleep(gap)
with open(out, "w") as f:
    json.dump(started, f)
"""


def measure(database: str, count: int, gap: float, scratch: Path) -> list[float]:
    out = scratch / "started.json"
    env = dict(os.environ, PYTHONPATH=str(BENCH_DIR.parent))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, database, str(count), str(gap),
                               str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env)
    assert writer.stdout.readline().strip() == "ready"  # the database exists and is migrated
    arrived = asyncio.run(listen(database, count, writer))
    if writer.wait(60) != 0:
        raise RuntimeError("the writer process failed")
    started = {int(k): v for k, v in json.loads(out.read_text()).items()}
    return [arrived[task_id] - started[task_id] for task_id in started]


async def listen(database: str, count: int, writer: subprocess.Popen) -> dict[int, float]:
    arrived: dict[int, float] = {}
    with open_store(database, durability="normal") as store:
        async with store.listen() as events:
            writer.stdin.write("go\n")
            writer.stdin.flush()
            while len(arrived) < count:
                event = await asyncio.wait_for(anext(events), 30)
                if event.kind is EventKind.TASK_ADDED and event.task_id is not None:
                    arrived[event.task_id] = time.time()
    return arrived


def report(name: str, latencies: list[float]) -> bool:
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1e3

    p99 = pct(0.99)
    ok = p99 <= TARGET_P99 * 1e3
    print(f"{name:<11} {len(ordered):>5} events  median {statistics.median(ordered) * 1e3:6.2f} ms"
          f"  p90 {pct(0.90):6.2f} ms  p99 {p99:6.2f} ms  max {ordered[-1] * 1e3:6.2f} ms"
          f"  {'ok' if ok else 'OVER'} (target p99 ≤ {TARGET_P99 * 1e3:.0f} ms)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--gap", type=float, default=0.005, help="seconds between two commits")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="taskherd-events-") as tmp:
        scratch = Path(tmp)
        latencies = measure(str(scratch / "q.db"), args.events, args.gap, scratch)
        ok &= report("SQLite", latencies)
        if not args.no_postgres:
            from tests.pg import start_server, stop_server

            server = start_server(durable=True)
            try:
                url = server.url(server.create_database())
                latencies = measure(url, args.events, args.gap, scratch)
                ok &= report("PostgreSQL", latencies)
            finally:
                stop_server(server)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
