"""Delivery benchmark: webhook events to a loopback receiver that fails and restarts.

    python bench/delivery.py               # --events 500

--events tasks, each naming alias @ops (a webhook on 127.0.0.1), are completed in a SQLite
store: each settle writes its outbox row. The receiver fails its first two answers (HTTP
500, 503), then is stopped and started again on the same port; the deliverer
(`services/delivery.py`, time passed in) keeps passing until nothing is due. Checked:
every event acknowledged exactly once (by delivery id and by task), none failed.

Beside it in the same run, the floor: the same number of bare POSTs (one reused `httpx.Client`) to
the same receiver, no store. The ratio is what the durable outbox (take, send, mark) costs.
The SIGKILL-between-commit-and-send case is a test: tests/acceptance/test_delivery_sigkill.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

import httpx

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.services.delivery import Deliverer, DeliverySettings
from taskherd.store.sqlite import SQLiteStore
from tests.e2e.fake_webhook import FakeWebhook


def settle_all(store: SQLiteStore, events: int, now: float) -> None:
    meta = {"deliver_to": ["ops"], "deliver_on": ["completed"]}
    store.enqueue_many([NewTask(role="coder", title=f"event {n}", meta=meta)
                        for n in range(events)], now)
    for _ in range(events):
        claim = store.claim(ClaimRequest("bench", now, 60.0))
        store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, 0), RetryPolicy(), now)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=500)
    args = parser.parse_args()
    now = time.time()
    hook = FakeWebhook([500, 503]).start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            store = SQLiteStore(Path(folder) / "q.db", durability="full")
            store.add_alias("ops", "webhook", hook.url, now)
            settle_all(store, args.events, now)
            clock = [now]
            deliverer = Deliverer(store, lambda: clock[0],
                                  DeliverySettings(backoff=1.0, batch=args.events))
            began = time.perf_counter()
            passes = [deliverer.run_once(clock[0])]
            hook.restart()
            while store.due_deliveries(clock[0] + 3600):
                clock[0] += 2.0
                passes.append(deliverer.run_once(clock[0]))
            took = time.perf_counter() - began
            counts = store.delivery_counts()["ops"]
            store.close()
        by_delivery = Counter(body["delivery_id"] for body in hook.acknowledged)
        by_task = Counter(body["task"]["id"] for body in hook.acknowledged)
        began = time.perf_counter()
        with httpx.Client(timeout=10) as client:
            for n in range(args.events):
                client.post(hook.url, json={"n": n})
        floor = time.perf_counter() - began
    finally:
        hook.stop()
    exactly_once = (len(by_delivery) == len(by_task) == args.events
                    and set(by_delivery.values()) == {1} and set(by_task.values()) == {1})
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(f"{args.events} events, receiver failing 2 answers then restarted: "
          f"{len(passes)} passes, first {passes[0]}")
    print(f"  acknowledged: {len(by_delivery)} deliveries, each once: {exactly_once}; "
          f"store says {counts}")
    print(f"  taskherd outbox: {args.events / took:.0f} deliveries/s; bare POST floor: "
          f"{args.events / floor:.0f}/s; ratio {floor / took:.2f}")
    return 0 if exactly_once and counts.get("failed", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
