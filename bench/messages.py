"""Inbox benchmark: what 10,000 waiting messages add to a run's start.

    python bench/messages.py              # --backlog 10000 --samples 300

Two SQLite databases in one temporary directory, side by side in this one process, sampled
alternately so machine load falls on both alike:

- quiet: no messages. A sample is what the dispatcher and supervisor do between ready and
  exec for the prompt: `store.claim(ClaimRequest(...))` of a ready task, then `build_prompt(task)`.
- busy: --backlog messages wait for the role. The same steps, with the claim delivering the
  run's inbox in its transaction (`inbox=InboxLimit()`: 20 messages, 16 kB) and the prompt
  built with them (`build_prompt(task, PromptContext(inbox))`). Each claim consumes 20, so
  the backlog is --backlog + 20 × --samples and never runs below --backlog.

Target (the messages issue): the busy p99 exceeds the quiet p99 by at most 5 ms.
Exit status 1 if it does not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from taskherd.model import InboxLimit, NewTask
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.prompt import PromptContext, build_prompt
from taskherd.store.messages import NewMessage
from taskherd.store.sqlite import SQLiteStore

TARGET_MS = 5.0
LEASE = 60.0


def prepared(path: Path, samples: int, messages: int) -> SQLiteStore:
    store = SQLiteStore(path, durability="full")
    now = time.time()
    store.enqueue_many([NewTask(role="coder", title=f"task {n}", prompt="Fix the flaky test.")
                        for n in range(samples)], now)
    priorities = (0, 0, 0, 1, 2)
    for start in range(0, messages, 1000):
        store.send_messages([NewMessage("@person", "coder", f"message {n}: " + "details " * 20,
                                        priority=priorities[n % 5])
                             for n in range(start, min(start + 1000, messages))], now)
    return store


def start_run(store: SQLiteStore, inbox: InboxLimit | None) -> tuple[float, int]:
    began = time.perf_counter()
    claim = store.claim(ClaimRequest("bench", time.time(), LEASE, inbox=inbox))
    assert claim is not None
    prompt = build_prompt(claim.task, PromptContext(claim.inbox))
    return (time.perf_counter() - began) * 1000, len(prompt)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        quiet = prepared(Path(folder) / "quiet.db", args.samples, 0)
        busy = prepared(Path(folder) / "busy.db", args.samples,
                        args.backlog + 20 * args.samples)
        quiet_ms, busy_ms, sizes = [], [], []
        for _ in range(args.samples):
            quiet_ms.append(start_run(quiet, None)[0])
            took, size = start_run(busy, InboxLimit())
            busy_ms.append(took)
            sizes.append(size)
        waiting = busy.count_unread_messages("coder", time.time())
        quiet.close()
        busy.close()
    added = p99(busy_ms) - p99(quiet_ms)
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(f"backlog at the end: {waiting} undelivered-or-unread messages; prompt "
          f"{statistics.median(sizes):.0f} chars with 20 messages")
    print(f"claim+prompt, no messages:       p50 {statistics.median(quiet_ms):.3f} ms  "
          f"p99 {p99(quiet_ms):.3f} ms")
    print(f"claim+inbox+prompt, {args.backlog} waiting: p50 {statistics.median(busy_ms):.3f} ms  "
          f"p99 {p99(busy_ms):.3f} ms")
    print(f"added to ready→exec p99: {added:.3f} ms (target ≤ {TARGET_MS} ms); "
          f"ratio busy/quiet p99 {p99(busy_ms) / p99(quiet_ms):.2f}")
    return 0 if added <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
