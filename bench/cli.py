"""CLI benchmark: cold start beside a bare click program, and `status` at a million tasks.

    python bench/cli.py                   # defaults: 1,000,000 finished + 1,000 ready tasks
    python bench/cli.py --finished 200000 --repeat 5

Measured:
- cold start: `taskherd --version` and an agent command (`taskherd done --help`, which loads
  that command's module) against a bare click program's `--version`, each the median of
  --repeat fresh processes. Target: ≤ 1.5 × the bare program.
- status at scale: a SQLite database built through the store's own schema (open_store runs
  the migrations), filled with executemany (finished tasks spread over 30 days, each with its
  run and cost), then `taskherd status` (a process) and the board
  query (`store.counts()` in process). Target: status ≤ the CLI's own start + 50 ms (that
  start measured as `status` on an empty queue: the same imports and database open), and the
  board query ≤ 50 ms.
Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE_CLICK = """
import click
@click.group()
@click.version_option("1")
def cli(): pass
cli()
"""


def median_seconds(argv: list[str], repeat: int, env: dict[str, str] | None = None) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def build_database(path: Path, finished: int, ready: int) -> None:
    from taskherd.store import open_store

    open_store(str(path)).close()  # the schema and its migrations, as the daemon makes them
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    now = time.time()
    insert = ("INSERT INTO tasks (role, title, state, run_after, created_at, updated_at, "
              "finished_at) VALUES (?, ?, ?, ?, ?, ?, ?)")
    roles = ("coder", "qa", "writer")
    chunk = 100_000
    # History as a fleet keeps it: finished over the last 30 days (the default retention),
    # each task with its run and that run's cost, so the board's week of spend is real work.
    span = 30 * 86400

    def finished_at(i: int) -> float:
        return now - span + span * i / max(finished, 1)

    for start in range(0, finished, chunk):
        rows = [(roles[i % 3], f"done {i}", "completed" if i % 10 else "dead", finished_at(i),
                 finished_at(i), finished_at(i), finished_at(i))
                for i in range(start, min(finished, start + chunk))]
        db.executemany(insert, rows)
        db.commit()
    # Each run is claimed, then ended, as the store does it: the end is what the schema's
    # triggers count (the board's hourly spend).
    db.execute("INSERT INTO runs (task_id, attempt, node, role, claimed_at, spawned_at) "
               "SELECT id, 1, 'n1', role, finished_at - 60, finished_at - 59 "
               "FROM tasks WHERE finished_at IS NOT NULL")
    db.execute("UPDATE runs SET ended_at = claimed_at + 60, outcome = 'succeeded', "
               "cost_usd = 0.01, input_tokens = 1000, output_tokens = 100")
    db.commit()
    db.executemany(insert, [(roles[i % 3], f"todo {i}", "ready", now, now, now, None)
                            for i in range(ready)])
    db.commit()
    db.execute("ANALYZE")
    db.close()
    # A running daemon's monitor folds finished tasks and ended runs into the board's
    # counters every 10 s; a history written behind its back is folded in once here.
    store = open_store(str(path))
    try:
        started = time.perf_counter()
        store.roll_up(time.time())
        print(f"rolled the history up into the board's counters in "
              f"{time.perf_counter() - started:.2f} s (once; a daemon does it as it goes)")
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--ready", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    python = sys.executable
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        bare = Path(folder) / "bare.py"
        bare.write_text(BARE_CLICK)
        bare_s = median_seconds([python, str(bare), "--version"], args.repeat)
        version_s = median_seconds([python, "-m", "taskherd", "--version"], args.repeat)
        agent_s = median_seconds([python, "-m", "taskherd", "done", "--help"], args.repeat)
        print(f"bare click --version        {bare_s * 1000:7.1f} ms")
        for name, seconds in (("taskherd --version", version_s),
                              ("taskherd done --help", agent_s)):
            ratio = seconds / bare_s
            ok &= ratio <= 1.5
            print(f"{name:<27} {seconds * 1000:7.1f} ms  {ratio:4.2f} × bare "
                  f"(target ≤ 1.50: {'ok' if ratio <= 1.5 else 'MISSED'})")

        from taskherd.store import open_store

        database = Path(folder) / "q.db"
        started = time.perf_counter()
        build_database(database, args.finished, args.ready)
        print(f"built {args.finished:,} finished + {args.ready:,} ready tasks in "
              f"{time.perf_counter() - started:.1f} s")
        env = os.environ | {"TASKHERD_CONFIG": ""}

        def status_of(db: Path) -> float:
            config = db.with_suffix(".toml")
            config.write_text(f'[daemon]\ndatabase = "{db}"\ndata_dir = "{folder}/data"\n')
            argv = [python, "-m", "taskherd", "--config", str(config), "status"]
            return median_seconds(argv, args.repeat, env)

        # The CLI's own start for `status` is that command on an empty queue: the same
        # interpreter, imports and database open; what is left is what history costs.
        empty = Path(folder) / "empty.db"
        open_store(str(empty)).close()
        empty_s = status_of(empty)
        status_s = status_of(database)
        beyond = status_s - empty_s
        ok &= beyond <= 0.050
        print(f"taskherd status, empty     {empty_s * 1000:7.1f} ms  "
              f"({(empty_s - version_s) * 1000:+.1f} ms over --version: imports and the open)")
        print(f"taskherd status             {status_s * 1000:7.1f} ms  "
              f"{beyond * 1000:+.1f} ms beyond the same command on an empty queue "
              f"(target ≤ 50: {'ok' if beyond <= 0.050 else 'MISSED'})")

        store = open_store(str(database))
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            store.counts()
            times.append(time.perf_counter() - started)
        store.close()
        board = statistics.median(times)
        ok &= board <= 0.050
        print(f"board query (store.counts)  {board * 1000:7.1f} ms  "
              f"(target ≤ 50: {'ok' if board <= 0.050 else 'MISSED'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
