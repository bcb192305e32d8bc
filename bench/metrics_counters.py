"""What /metrics' run counters cost now that they survive pruning, against floors run here.

    python bench/metrics_counters.py                 # 100,000 finished tasks, one run each
    python bench/metrics_counters.py --tasks 300000

On a SQLite store holding --tasks finished tasks (six roles, four outcomes, cost and tokens):

- a scrape's read (`run_totals`: the pruned totals plus a GROUP BY of the runs kept) against
  the floor of the statement it replaced, a GROUP BY of the runs alone;
- a retention prune of half the history (it adds the runs it deletes to pruned_run_totals
  first, in its transaction) against the floor of the DELETE alone, each on its own copy.

Prints each figure and its ratio to its floor (best of --repeat). The claim and the settle
are untouched by the change (no statement of theirs, no trigger), so they are not measured.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taskherd.store.sqlite import SQLiteStore

T0 = 1_800_000_000.0
ROLES = ("coder", "qa", "planner", "social", "writer", "ops")
OUTCOMES = ("succeeded", "failed", "timed_out", "crashed")
OLD_TOTALS = """
SELECT role, outcome, count(*) AS runs, coalesce(sum(cost_usd), 0) AS cost_usd,
       coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens
FROM runs GROUP BY role, outcome ORDER BY role, outcome
"""


def fill(path: Path, tasks: int) -> None:
    """`tasks` completed tasks, one ended run each, a second apart."""
    SQLiteStore(path, durability="normal").close()
    db = sqlite3.connect(path)
    with db:
        db.executemany(
            "INSERT INTO tasks (id, role, title, state, attempts, run_after, finished_at,"
            " created_at, updated_at) VALUES (?, ?, 't', 'completed', 1, ?, ?, ?, ?)",
            ((i, ROLES[i % len(ROLES)], T0 + i, T0 + i + 1, T0 + i, T0 + i + 1)
             for i in range(1, tasks + 1)))
        db.executemany(
            "INSERT INTO runs (id, task_id, attempt, node, role, claimed_at, spawned_at,"
            " ended_at, outcome, cost_usd, input_tokens, output_tokens)"
            " VALUES (?, ?, 1, 'n1', ?, ?, ?, ?, ?, 0.01, 1000, 100)",
            ((i, i, ROLES[i % len(ROLES)], T0 + i, T0 + i, T0 + i + 1,
              OUTCOMES[i % len(OUTCOMES)]) for i in range(1, tasks + 1)))
    db.close()


def best(repeat: int, measure) -> float:
    return min(measure() for _ in range(repeat))


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def scrape(path: Path, repeat: int) -> tuple[float, float]:
    store = SQLiteStore(path, durability="normal")
    db = sqlite3.connect(path)
    try:
        now = best(repeat, lambda: timed(store.run_totals))
        floor = best(repeat, lambda: timed(lambda: db.execute(OLD_TOTALS).fetchall()))
    finally:
        db.close()
        store.close()
    return now, floor


def prune(path: Path, workdir: Path, tasks: int, repeat: int) -> tuple[float, float]:
    before = T0 + tasks / 2

    def with_fold() -> float:
        copy = workdir / "fold.db"
        shutil.copyfile(path, copy)
        store = SQLiteStore(copy, durability="normal")
        try:
            return timed(lambda: store.prune(before=before))
        finally:
            store.close()

    def delete_alone() -> float:
        copy = workdir / "floor.db"
        shutil.copyfile(path, copy)
        store = SQLiteStore(copy, durability="normal")
        try:
            def delete() -> None:
                with store._write() as db:
                    db.execute(store.q["prune_finished_tasks"], {"before": before})
            return timed(delete)
        finally:
            store.close()

    return best(repeat, with_fold), best(repeat, delete_alone)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as folder:
        workdir = Path(folder)
        path = workdir / "history.db"
        fill(path, args.tasks)
        now, floor = scrape(path, args.repeat)
        print(f"scrape read, {args.tasks:,} runs kept: {now * 1e3:.1f} ms, floor (runs alone) "
              f"{floor * 1e3:.1f} ms, ratio {now / floor:.2f}")
        now, floor = prune(path, workdir, args.tasks, args.repeat)
        print(f"prune of {args.tasks // 2:,} tasks and runs: {now * 1e3:.0f} ms, floor (the "
              f"DELETE alone) {floor * 1e3:.0f} ms, ratio {now / floor:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
