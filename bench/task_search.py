"""Task search benchmark: the trigram index (migrations 0037, 0038) at a million tasks, SQLite.

    .venv/bin/python bench/task_search.py                    # 1,000,000 tasks, ~3 minutes
    .venv/bin/python bench/task_search.py --tasks 100000 --prompt-chars 100

1. A database of --tasks finished tasks as the release before left it (no index): titles of
   a few words and a number, prompts of about --prompt-chars characters of ordinary words.
   Then the migrations, timed, as a node starting on it runs them; the database's bytes
   before and after (pages in use, not the file's free pages) and the extra bytes a task.
2. Searches as the dashboard's list asks (50 rows, newest first, and the capped count), p50
   and p99 of --repeat each: a word no task holds, a word three tasks hold, a common word, a
   number, one character. Beside each, the same list read the way it was before the index
   (LIKE over every task, filtered_tasks with no trigram query): the floor, in this process.
   Then the same searches with --tail tasks added and not indexed yet (the index is kept in
   batches: a search reads those one by one; 20,000 is the most it reads before indexing).
3. `task add`'s store step (store.enqueue, a transaction each) with such a text, with the
   index's triggers and on a copy of the database without them: microseconds a task; and
   the indexer's pass over those tasks (store.index_task_text, chunks of 1,000).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

WORDS = ("deploy build test fix the gateway parser flaky module review retry cache index "
         "schema migrate update docs release branch merge config timeout worker queue node "
         "agent prompt token budget report metric alert error warning check lint format "
         "refactor rename remove add support handle case value field table column page "
         "list search filter sort order limit offset count total").split()
RARE = "kestrel"
UNDO_MIGRATION = """
DROP TRIGGER tasks_fts_insert; DROP TRIGGER tasks_fts_delete; DROP TRIGGER tasks_fts_update;
DROP TABLE tasks_fts; DROP TABLE tasks_fts_mark;
DELETE FROM schema_migrations WHERE name IN ('task_text_search', 'task_text_indexed_in_batches');
"""


def text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)


def build(path: Path, tasks: int, prompt_chars: int) -> None:
    """The tasks, written on the schema before the index (its migration undone first)."""
    from taskherd.store import open_store

    open_store(str(path)).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(UNDO_MIGRATION)
    db.execute("PRAGMA synchronous = OFF")
    rng = random.Random(7)
    now = time.time()
    insert = ("INSERT INTO tasks (role, title, prompt, state, run_after, created_at, updated_at,"
              " finished_at) VALUES (?, ?, ?, 'completed', ?, ?, ?, ?)")
    rare_at = {tasks // 3, tasks // 2, tasks - tasks // 5}
    for start in range(0, tasks, 50_000):
        rows = []
        for i in range(start, min(tasks, start + 50_000)):
            title = f"{text(rng, 24)} {i}" + (f" {RARE}" if i in rare_at else "")
            rows.append(("coder", title, text(rng, prompt_chars), now, now, now, now))
        db.execute("BEGIN")
        db.executemany(insert, rows)
        db.execute("COMMIT")
    db.execute("VACUUM")
    db.close()


def bytes_in_use(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        pages, free, size = (db.execute(f"PRAGMA {name}").fetchone()[0]
                             for name in ("page_count", "freelist_count", "page_size"))
        return (pages - free) * size
    finally:
        db.close()


def percentiles(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    pick = lambda f: ordered[min(len(ordered) - 1, int(f * len(ordered)))] * 1e3  # noqa: E731
    return f"p50 {pick(0.5):7.1f} ms  p99 {pick(0.99):7.1f} ms"


def searches(store, repeat: int, heading: str) -> bool:
    from taskherd.store.sql_task_lists import _filter_params
    from taskherd.store.task_lists import TaskFilter

    def indexed(text: str) -> None:
        store.filter_tasks(TaskFilter(text=text))
        store.count_filtered_tasks(TaskFilter(text=text), 1001)

    def scanned(text: str) -> None:  # the list before the index: LIKE over every task
        params = _filter_params(TaskFilter(text=text)) | {"trigrams": None, "short_scan": None}
        store._all("filter_tasks_newest", params | {"limit": 50, "offset": 0})
        store._all("count_filtered_tasks", params | {"cap": 1001})

    def timed(read, text: str) -> list[float]:
        read(text)  # warm
        times = []
        for _ in range(repeat):
            begin = time.perf_counter()
            read(text)
            times.append(time.perf_counter() - begin)
        return times

    print(f"== the list of 50 and its capped count, {repeat} times each, {heading}")
    ok = True
    for name, text in (("a word no task holds", "zebrafish"), ("a word 3 tasks hold", RARE),
                       ("a common word", "gateway"), ("a number", "123456"),
                       ("one character (bounded scan)", "q")):
        after, before = timed(indexed, text), timed(scanned, text)
        ratio = sorted(before)[len(before) // 2] / max(sorted(after)[len(after) // 2], 1e-9)
        print(f"{name + f' ({text!r})':<42} index: {percentiles(after)}   before: "
              f"{percentiles(before)}   {ratio:6.1f} × faster at p50")
        ok &= sorted(after)[int(0.99 * len(after))] <= 0.100
    return ok


def add_tail(store, count: int, prompt_chars: int) -> None:
    """Tasks added after the indexer's last pass: the search reads them one by one."""
    from taskherd.model import NewTask

    rng = random.Random(13)
    for start in range(0, count, 1000):
        store.enqueue_many([NewTask(role="coder", title=f"{text(rng, 24)} tail {n}",
                                    prompt=text(rng, prompt_chars))
                            for n in range(start, min(count, start + 1000))], time.time())


def enqueue_cost(path: Path, count: int, prompt_chars: int) -> None:
    from taskherd.model import NewTask
    from taskherd.store import open_store

    bare = path.with_name("without-index.db")
    shutil.copy(path, bare)
    db = sqlite3.connect(bare, isolation_level=None)
    db.executescript("DROP TRIGGER tasks_fts_insert; DROP TRIGGER tasks_fts_delete;"
                     " DROP TRIGGER tasks_fts_update;")
    db.close()
    rng = random.Random(11)
    new = [NewTask(role="coder", title=f"{text(rng, 24)} {n}", prompt=text(rng, prompt_chars))
           for n in range(count)]
    print(f"== store.enqueue (task add's step), {count} tasks of ~{prompt_chars} characters, "
          f"a transaction each, durability normal")
    per_task = {}
    for name, database in (("without the index's triggers", bare), ("with them", path)):
        store = open_store(str(database), durability="normal")
        try:
            begin = time.perf_counter()
            for task in new:
                store.enqueue(task, time.time())
            per_task[name] = (time.perf_counter() - begin) / count
        finally:
            store.close()
        print(f"{name:<30} {per_task[name] * 1e6:7.0f} µs a task")
        if database == path:
            store = open_store(str(database), durability="normal")
            try:
                begin = time.perf_counter()
                while store.index_task_text(1000):
                    pass
                print(f"{'then the indexer, 1,000 a pass':<30} "
                      f"{(time.perf_counter() - begin) / count * 1e6:7.0f} µs a task")
            finally:
                store.close()
    extra = per_task["with them"] - per_task["without the index's triggers"]
    print(f"the index costs {extra * 1e6:+.0f} µs a task "
          f"({per_task['with them'] / per_task['without the index' + chr(39) + 's triggers']:.2f}"
          f" × without)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--prompt-chars", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--adds", type=int, default=2000)
    parser.add_argument("--tail", type=int, default=20_000,
                        help="tasks added after the indexer's last pass (at most LONG_TAIL)")
    args = parser.parse_args()
    from taskherd.store import open_store

    print(f"load average: {open('/proc/loadavg').read().strip()}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "q.db"
        started = time.perf_counter()
        build(path, args.tasks, args.prompt_chars)
        before = bytes_in_use(path)
        print(f"built {args.tasks:,} tasks (titles ~30, prompts ~{args.prompt_chars} characters)"
              f" without the index in {time.perf_counter() - started:.0f} s: "
              f"{before / 2**20:.0f} MiB")
        started = time.perf_counter()
        store = open_store(str(path))  # the migration, as a node starting on it runs it
        migrated = time.perf_counter() - started
        after = bytes_in_use(path)
        print(f"migrations 0037-0038 (the index, filled): {migrated:.1f} s; "
              f"{after / 2**20:.0f} MiB, "
              f"+{(after - before) / args.tasks:.0f} bytes a task "
              f"(+{100 * (after - before) / before:.0f} %)")
        try:
            ok = searches(store, args.repeat, "every task indexed")
            add_tail(store, args.tail, args.prompt_chars)
            ok &= searches(store, args.repeat, f"{args.tail:,} newest tasks not indexed yet")
            while store.index_task_text(1000):
                pass
        finally:
            store.close()
        enqueue_cost(path, args.adds, args.prompt_chars)
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
