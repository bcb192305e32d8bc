"""Chains benchmark: what task chains cost, measured side by side in one run.

    python bench/chains.py [--events 300] [--rounds 5000] [--base main]

1. Parent settled → child claimable. A writer process settles parent tasks one at a time
   (paced), each of whose role has a default chain to `qa`, noting the wall time just before
   each `finish_run`; this process listens (`Store.listen()`, as the daemon's dispatcher does)
   and on each `task_added` for `qa` claims the child. Latency = claimed − settle call start,
   an upper bound including the settling transaction. Target: p99 ≤ 20 ms.
2. A fan-out of 1,000 children from one parent: the time of the one `finish_run` that settles
   the parent and creates them all in its transaction.
3. claim+complete throughput with no chains, this tree against the base commit (`--base`,
   default `main`, checked out into a temporary worktree), in alternating rounds in separate
   processes on fresh databases; and with a chain on every task (each completion creates a
   child) for information. Target: no-chain throughput ≥ 0.95 × the base's.

Exit status 1 if a target is missed.
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
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))

from taskherd.model import EventKind, NewTask, Outcome, RunResult
from taskherd.model.settings import FollowUp, RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.chains import Workflow
from taskherd.store import open_store

TARGET_P99 = 0.020
TARGET_RATIO = 0.95
LEASE = 60.0

SETTLER = """
import json, sys, time
from taskherd.policy.chains import FollowUp, RoleFlow, Workflow
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.policy.queue import RetryPolicy
from taskherd.store import open_store
from taskherd.policy.admission import ClaimRequest

database, count, gap, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
workflow = Workflow({"coder": RoleFlow(chain=(FollowUp("qa", "QA {parent_title}"),))})
started = {}
with open_store(database, durability="normal", workflow=workflow) as store:
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()  # the listener is listening
    for i in range(count):
        now = time.time()
        store.enqueue(NewTask(role="coder", title=f"parent {i}"), now)
        claim = store.claim(ClaimRequest("writer", now, 60.0, roles=["coder"]))
        store.mark_spawned(claim.run.id, now, 60.0, pid=1, pid_started_at=1.0, log_path=None)
        before = time.time()
        store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), before)
        started[claim.task.id] = before
        time.sleep(gap)
with open(out, "w") as f:
    json.dump(started, f)
"""

# claim+complete on a fresh database, run under the tree given by PYTHONPATH. It uses only
# what the base commit has too (no workflow), unless "chained" asks for a chain on each task.
THROUGHPUT = """
import gc, os, sys, time
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.policy.queue import RetryPolicy
from taskherd.store import open_store
try:
    from taskherd.policy.admission import ClaimRequest
    def claim(store, *args, **fields):
        return store.claim(ClaimRequest(*args, **fields))
except ImportError:  # a tree from before the claim request: the claim took its fields
    def claim(store, *args, **fields):
        return store.claim(*args, **fields)

database, rounds, chained = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "chained"
store = open_store(database, durability="normal")
if chained:
    from taskherd.policy.chains import FollowUp, RoleFlow, Workflow
    store.workflow = Workflow({"bench": RoleFlow(chain=(FollowUp("done", "after {parent_id}"),))})
store.enqueue_many([NewTask(role="bench", title=f"t{i}") for i in range(rounds)], 1.0)
policy, result = RetryPolicy(), RunResult(Outcome.SUCCEEDED)
gc.collect(); gc.disable()
started = time.perf_counter()
for _ in range(rounds):
    claimed = claim(store, "n1", 2.0, 60.0, roles=["bench"])
    store.finish_run(claimed.run.id, result, policy, 3.0)
elapsed = time.perf_counter() - started
store.close()
print(rounds / elapsed)
"""


def child_latency(scratch: Path, count: int, gap: float) -> list[float]:
    database = str(scratch / "latency.db")
    out = scratch / "started.json"
    open_store(database, durability="normal").close()  # migrated before both sides open it
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writer = subprocess.Popen([sys.executable, "-c", SETTLER, database, str(count), str(gap),
                               str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=env, text=True)
    claimed: dict[int, float] = {}
    store = open_store(database, durability="normal")

    async def listen() -> None:
        async with store.listen() as events:
            writer.stdout.readline()
            writer.stdin.write("go\n")
            writer.stdin.flush()
            async for event in events:
                if event.kind is EventKind.TASK_ADDED and event.role == "qa":
                    # As the dispatcher: claim until nothing is left (a hint may cover more).
                    while (claim := store.claim(ClaimRequest("dispatcher", time.time(), LEASE,
                                                roles=["qa"]))) is not None:
                        claimed[claim.task.parent_id] = time.time()
                if len(claimed) == count:
                    return

    try:
        asyncio.run(asyncio.wait_for(listen(), timeout=count * (gap + 1) + 30))
    except TimeoutError:
        sys.exit(f"only {len(claimed)} of {count} children were claimed")
    finally:
        writer.wait(60)
        store.close()
    started = {int(key): value for key, value in json.loads(out.read_text()).items()}
    return [claimed[parent] - started[parent] for parent in started]


def fan_out(scratch: Path, children: int) -> float:
    chain = tuple(FollowUp("worker", f"part {i} of {{parent_title}}") for i in range(children))
    with open_store(str(scratch / "fanout.db"), durability="normal",
                    workflow=Workflow()) as store:
        store.enqueue(NewTask(role="split", title="big job", chain=chain), 1.0)
        claim = store.claim(ClaimRequest("n1", 1.0, LEASE))
        started = time.perf_counter()
        store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 2.0)
        elapsed = time.perf_counter() - started
        assert len(store.list_tasks(role="worker", limit=children + 1)) == children
    return elapsed


def base_tree(base: str, scratch: Path) -> Path:
    """A checkout of `base` to import taskherd from (a detached worktree)."""
    path = scratch / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                    str(path), base], check=True)
    return path


def throughput(tree: Path, scratch: Path, rounds: int, chained: bool, n: int) -> float:
    database = scratch / f"tp-{tree.name}-{chained}-{n}.db"
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, "-c", THROUGHPUT, str(database), str(rounds),
                           "chained" if chained else "plain"], env=env, check=True,
                          capture_output=True, text=True)
    return float(done.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.005)
    parser.add_argument("--rounds", type=int, default=5000)
    parser.add_argument("--pairs", type=int, default=3, help="alternating rounds per side")
    parser.add_argument("--base", default="main")
    args = parser.parse_args(argv)
    ok = True
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}")
    with tempfile.TemporaryDirectory(prefix="taskherd-bench-chains-") as folder:
        scratch = Path(folder)
        latencies = sorted(child_latency(scratch, args.events, args.gap))
        p50 = statistics.median(latencies)
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        verdict = "ok" if p99 <= TARGET_P99 else "MISSED"
        ok &= p99 <= TARGET_P99
        print(f"parent settled → child claimed ({len(latencies)} chains, SQLite): "
              f"p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, max {latencies[-1] * 1000:.2f}"
              f" ms (target p99 ≤ {TARGET_P99 * 1000:.0f} ms: {verdict})")
        seconds = fan_out(scratch, 1000)
        print(f"fan-out: one settle creating 1,000 children in its transaction: "
              f"{seconds * 1000:.1f} ms")
        base = base_tree(args.base, scratch)
        try:
            rates: dict[str, list[float]] = {"base": [], "plain": [], "chained": []}
            for n in range(args.pairs):  # alternating, so drift in load hits both sides
                rates["base"].append(throughput(base, scratch, args.rounds, False, n))
                rates["plain"].append(throughput(ROOT, scratch, args.rounds, False, n))
                rates["chained"].append(throughput(ROOT, scratch, args.rounds, True, n))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(base)], check=False)
        best = {name: max(values) for name, values in rates.items()}
        ratio = best["plain"] / best["base"]
        ok &= ratio >= TARGET_RATIO
        print(f"claim+complete, {args.rounds} tasks, best of {args.pairs} alternating runs:")
        print(f"  {args.base} (before chains): {best['base']:,.0f}/s")
        print(f"  this tree, no chains:      {best['plain']:,.0f}/s  ratio {ratio:.3f} "
              f"(target ≥ {TARGET_RATIO}: {'ok' if ratio >= TARGET_RATIO else 'MISSED'})")
        print(f"  this tree, a child each:   {best['chained']:,.0f}/s  ratio "
              f"{best['chained'] / best['base']:.3f} (information: each completion also "
              "creates a task)")
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
