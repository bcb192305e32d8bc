"""Queue benchmark: taskherd's SQLite store beside its floor (bare sqlite3) and Huey's SqliteHuey.

    python bench/sqlite_queue.py    # both durabilities, default sizes (< 2 min on 2 cores)
    python bench/sqlite_queue.py --durability normal --rounds 20000

Every contender runs in this one process, one after another, each on its own fresh database
file in one temporary directory, with the same number of tasks. Measured, per durability:

- taskherd enqueue, single: `store.enqueue(NewTask)` once per task, a transaction each.
- taskherd enqueue, batched: `store.enqueue_many(batch)` in batches of --batch tasks.
- taskherd claim+complete: the daemon's steady state, a run's end and the node's next claim in
  one transaction: `store.finish_run_and_claim(run_id, RunResult(SUCCEEDED), RetryPolicy(),
  now, request)` until --rounds are done, the first claim (`store.claim`) alone; `request` is
  the daemon's own (`Dispatcher._request` makes it): within the role's limits, its inbox
  delivered, and the run's credential recorded with the claim.
- taskherd claim+complete, plain request (information): the same with a bare
  `ClaimRequest(node, now, lease)`: no limits, inbox nor credential.
- taskherd claim, complete in two transactions (information): `store.claim(request)` then
  `store.finish_run(...)`, each its own transaction, as the CLI, the API, a rescue and a
  dispatch pass's first claims make them (the daemon's request).
- bare sqlite3, same SQL (the floor): taskherd's own claim and completion statements (the named
  blocks of store/sql/sqlite/queries.sql that SQLRuns._finish and the claim run for a plain
  success, in their order) on taskherd's schema, run straight on a sqlite3
  connection with the same PRAGMAs, fused as the store fuses them: each run's end and the next
  claim one BEGIN IMMEDIATE … COMMIT, the claim in a savepoint. What the SQL costs with no store
  code around it; the store's ratio to it is its overhead.
- bare sqlite3, minimal table (information): one UPDATE per step on a four-column table with
  one index: what the cheapest possible queue costs, without runs, leases or history.
- bare sqlite3, minimal table with a run record (information): the same queue, and one row of
  a runs table (task, node, start, end, outcome; indexed by task, so a task's runs can be
  listed) added by the claim and ended by the completion, in the same two transactions: the
  cheapest queue that keeps a history of its runs; and (information) the same with each run's
  end and the next claim one transaction, as taskherd's daemon makes them, and that again with
  a lease on the task (its node and end, and an index of the leased tasks' ends): the cheapest
  SQL that keeps what target 1 asks of taskherd (runs and leases), beside which the bench prints
  what a cycle may spend on everything else at the target.
- Huey: `SqliteHuey` enqueue of --rounds no-op tasks, then an in-process consumer loop.
- WAL pages a cycle writes (a run's end and the next claim, one transaction, the daemon's
  request), on a store that never checkpoints, and (information) those pages by the table or
  index they belong to, the plain request's pages, and the pages of a claim and its completion
  in two transactions.

Targets (the lean hot path issue): claim+complete ≥ 1.0 × Huey's consumer in the same run at
`normal` durability and ≥ 0.8 × at `full`; the plain request's ≥ 0.5 × the floor (the same
SQL: the floor runs the plain claim's statements, not the limits' counts); at most 6 WAL pages
written per cycle; batched enqueue ≥ 50,000 tasks/s at `normal` durability. Exit
status 1 if one fails.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits
from taskherd.services.dispatcher import Dispatcher
from taskherd.store.sqlite import M, Q, SQLiteStore

CLAIM_RATIO_FLOOR = 0.5  # plain claim+complete ≥ 0.5 × bare sqlite3 (the same SQL)
CLAIM_RATIO_HUEY = {"normal": 1.0, "full": 0.8}  # claim+complete ≥ this × Huey's consumer
WAL_PAGES_MOST = 6.0  # pages a cycle writes: a run's end and the next claim, one transaction
BATCH_TARGET = 50_000.0  # tasks/s, batched enqueue at normal durability
LEASE = 60.0
SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}


@dataclass
class Rate:
    name: str
    count: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds else float("inf")


def timed(name: str, count: int, work: Callable[[], object]) -> Rate:
    # The collector is paused so a stray collection does not land in one contender's timing.
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        work()
        return Rate(name, count, time.perf_counter() - started)
    finally:
        gc.enable()


def new_tasks(count: int) -> list[NewTask]:
    return [NewTask(role="bench", title=f"task {i}") for i in range(count)]


def daemon_requests(store: SQLiteStore, folder: Path) -> Callable[[float], ClaimRequest]:
    """The claim request a daemon's node makes for role `bench` at `now`, by the dispatcher's
    own code (`Dispatcher._request`): the role's limits, the inbox's limit and a new
    credential's secret at each call, as each claim of the daemon gets its own."""
    config = parse_config({"daemon": {"node": "bench-node", "lease": f"{LEASE:g}s"},
                           "roles": {"bench": {"command": ["true"]}}}, base_dir=folder)
    dispatcher = Dispatcher(config, store, live=None, start=lambda *_: None)  # type: ignore[arg-type]
    roles, limits = (config.roles["bench"],), ClaimLimits.from_config(config)
    return lambda now: dispatcher._request(now, roles, (), limits)


def plain_request(now: float) -> ClaimRequest:
    return ClaimRequest("bench-node", now, LEASE)


# -- taskherd -----------------------------------------------------------------------------------


def bench_taskherd(folder: Path, durability: str, rounds: int, singles: int,
                   batch: int) -> list[Rate]:
    rates = []
    now = time.time()

    store = SQLiteStore(folder / "taskherd-single.db", durability=durability)
    tasks = new_tasks(singles)

    def enqueue_single() -> None:
        for new in tasks:
            store.enqueue(new, now)

    rates.append(timed("taskherd enqueue (single)", singles, enqueue_single))
    store.close()

    # The claim round trips run on the database the batched enqueue filled, so the claims
    # walk a real backlog of `rounds` ready tasks, as the floor and Huey do.
    store = SQLiteStore(folder / "taskherd.db", durability=durability)
    tasks = new_tasks(rounds)

    def enqueue_batched() -> None:
        for start in range(0, rounds, batch):
            store.enqueue_many(tasks[start:start + batch], now)

    rates.append(timed(f"taskherd enqueue (batches of {batch})", rounds, enqueue_batched))

    policy, success = RetryPolicy(), RunResult(Outcome.SUCCEEDED)

    def fused(store: SQLiteStore, request: Callable[[float], ClaimRequest]) -> None:
        # The daemon's steady state: a run's end and the node's next claim in one
        # transaction; the first claim alone, as a node's first pass makes it.
        claim = store.claim(request(now))
        done = 0
        while claim is not None:
            _, attempt = store.finish_run_and_claim(claim.run.id, success, policy, now,
                                                    request(now))
            claim = attempt.claim
            done += 1
        assert done == rounds, (done, rounds)

    daemons = daemon_requests(store, folder)
    rates.append(timed("taskherd claim+complete", rounds, lambda: fused(store, daemons)))
    store.close()

    store = SQLiteStore(folder / "taskherd-plain.db", durability=durability)
    store.enqueue_many(tasks, now)
    rates.append(timed("taskherd claim+complete, plain request", rounds,
                       lambda: fused(store, plain_request)))
    store.close()

    store = SQLiteStore(folder / "taskherd-two.db", durability=durability)
    store.enqueue_many(tasks, now)
    daemons = daemon_requests(store, folder)

    def two_transactions() -> None:
        done = 0
        while True:
            claim = store.claim(daemons(now))
            if claim is None:
                break
            store.finish_run(claim.run.id, success, policy, now)
            done += 1
        assert done == rounds, (done, rounds)

    rates.append(timed("taskherd claim, complete (two transactions)", rounds, two_transactions))
    store.close()
    return rates


def wal_pages_per_cycle(folder: Path, durability: str, rounds: int = 2000
                        ) -> tuple[float, float, float, dict[str, float]]:
    """Pages a cycle writes to the WAL: a run's end and the next claim, one transaction (the
    daemon's steady state, its request); and, for information, the same with the plain
    request, and a claim and its completion each a transaction of its own. The
    load-independent half of claim+complete's cost (every page is copied, checksummed,
    written and later checkpointed), counted on stores that never checkpoint, so the WAL only
    grows. Also the pages a fused cycle wrote on average by the table or index they belong
    to: where the figure comes from (empty when this SQLite lacks the dbstat table)."""
    daemon, by_btree = fused_pages(folder, "taskherd-wal.db", durability, rounds, True)
    plain, _ = fused_pages(folder, "taskherd-wal-plain.db", durability, rounds, False)

    now = time.time()
    policy, success = RetryPolicy(), RunResult(Outcome.SUCCEEDED)
    path = folder / "taskherd-wal-two.db"
    store = SQLiteStore(path, durability=durability, autocheckpoint=False)
    request = daemon_requests(store, folder)
    store.enqueue_many(new_tasks(rounds), now)
    wal = Path(f"{path}-wal")
    frame = 24 + sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    before = wal.stat().st_size
    for _ in range(rounds):
        claim = store.claim(request(now))
        assert claim is not None
        store.finish_run(claim.run.id, success, policy, now)
    two = (wal.stat().st_size - before) / frame / rounds
    store.close()
    return daemon, plain, two, by_btree


def fused_pages(folder: Path, name: str, durability: str, rounds: int, daemons: bool
                ) -> tuple[float, dict[str, float]]:
    """The WAL pages a run's end and the next claim write, in one transaction, with the
    daemon's request (`daemons`) or the plain one; and by b-tree, with the daemon's."""
    now = time.time()
    policy, success = RetryPolicy(), RunResult(Outcome.SUCCEEDED)
    path = folder / name
    store = SQLiteStore(path, durability=durability, autocheckpoint=False)
    request = daemon_requests(store, folder) if daemons else plain_request
    store.enqueue_many(new_tasks(rounds + 1), now)  # each cycle measured claims a task
    wal = Path(f"{path}-wal")
    frame = 24 + sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    claim = store.claim(request(now))
    before = wal.stat().st_size
    by_btree: Counter[str] = Counter()
    cycles: list[tuple[int, int]] = []  # WAL offsets before and after each cycle
    for done in range(1, rounds + 1):
        start = wal.stat().st_size
        assert claim is not None
        claim = store.finish_run_and_claim(claim.run.id, success, policy, now,
                                           request(now))[1].claim
        cycles.append((start, wal.stat().st_size))
        if daemons and (done % 100 == 0 or done == rounds):
            # Read often: a page freed by one b-tree (the ready index shrinks as the backlog
            # drains) is soon reused by another, and counts as the one it belonged to then.
            by_btree += pages_by_btree(path, wal, frame, cycles)
            cycles.clear()
    pages = (wal.stat().st_size - before) / frame / rounds
    store.close()
    return pages, {name: n / rounds for name, n in by_btree.most_common()}


def pages_by_btree(path: Path, wal: Path, frame: int,
                   cycles: list[tuple[int, int]]) -> Counter[str]:
    """The pages the `cycles` wrote by the b-tree (table or index) each belongs to, read from
    the WAL's frame headers (a frame starts with its page number) and SQLite's dbstat table;
    nothing when this SQLite lacks dbstat."""
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            owner = dict(db.execute("SELECT pageno, name FROM dbstat"))
    except sqlite3.OperationalError:
        return Counter()
    with wal.open("rb") as log:
        log.seek(cycles[0][0])
        data, base = log.read(cycles[-1][1] - cycles[0][0]), cycles[0][0]
    return Counter(owner.get(int.from_bytes(data[at - base:at - base + 4], "big"), "(free)")
                   for start, end in cycles for at in range(start, end, frame))


# -- bare sqlite3: the floor --------------------------------------------------------------------

BARE_SCHEMA = """
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 2,
    state TEXT NOT NULL DEFAULT 'ready'
);
CREATE INDEX tasks_ready ON tasks (priority, id) WHERE state = 'ready';
"""
BARE_CLAIM = (
    "UPDATE tasks SET state = 'claimed' WHERE id = ("
    " SELECT id FROM tasks WHERE state = 'ready' ORDER BY priority, id LIMIT 1"
    ") RETURNING id"
)
BARE_COMPLETE = "UPDATE tasks SET state = 'completed' WHERE id = ? AND state = 'claimed'"
HISTORY_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    task_id INTEGER NOT NULL,
    node TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    outcome TEXT
);
CREATE INDEX runs_task ON runs (task_id);
"""
# The minimal queue with a lease too, as target 1 asks of taskherd (runs and leases kept): the
# claim sets the lease's node and end, an index finds the leases that expired, the completion
# clears it.
LEASE_SCHEMA = """
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 2,
    state TEXT NOT NULL DEFAULT 'ready',
    lease_node TEXT,
    lease_expires_at REAL
);
CREATE INDEX tasks_ready ON tasks (priority, id) WHERE state = 'ready';
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE state = 'claimed';
"""
LEASE_CLAIM = (
    "UPDATE tasks SET state = 'claimed', lease_node = 'bench', lease_expires_at = 62.0 WHERE id = ("
    " SELECT id FROM tasks WHERE state = 'ready' ORDER BY priority, id LIMIT 1"
    ") RETURNING id"
)
LEASE_COMPLETE = ("UPDATE tasks SET state = 'completed', lease_node = NULL, lease_expires_at = NULL"
                  " WHERE id = ? AND state = 'claimed'")
HISTORY_START = "INSERT INTO runs (task_id, node, started_at) VALUES (?, 'bench', 1.0) RETURNING id"
HISTORY_END = "UPDATE runs SET ended_at = 2.0, outcome = 'succeeded' WHERE id = ?"


def bare_database(path: Path, durability: str, schema: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=60)
    db.execute("PRAGMA busy_timeout = 60000")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {SYNCHRONOUS[durability]}")
    db.executescript(schema)
    return db


def bare_cycles(db: sqlite3.Connection, rounds: int, record_runs: bool) -> Callable[[], None]:
    """The bare queue's claim+complete loop over `rounds` ready tasks, each step its own
    transaction; with `record_runs`, the claim adds the run's row and the completion ends it."""

    def claim_complete() -> None:
        done = 0
        while True:
            db.execute("BEGIN IMMEDIATE")
            task = db.execute(BARE_CLAIM).fetchone()
            run = db.execute(HISTORY_START, task).fetchone() if record_runs and task else None
            db.execute("COMMIT")
            if task is None:
                break
            db.execute("BEGIN IMMEDIATE")
            if run is not None:
                db.execute(HISTORY_END, run)
            db.execute(BARE_COMPLETE, task)
            db.execute("COMMIT")
            done += 1
        assert done == rounds, (done, rounds)

    return claim_complete


def bare_fused_cycles(db: sqlite3.Connection, rounds: int, claim_sql: str = BARE_CLAIM,
                      complete_sql: str = BARE_COMPLETE) -> Callable[[], None]:
    """The bare queue with a run record, each run's end and the next claim in one
    transaction (the first claim alone): what taskherd's daemon does, at its cheapest."""

    def claim_complete() -> None:
        db.execute("BEGIN IMMEDIATE")
        task = db.execute(claim_sql).fetchone()
        run = db.execute(HISTORY_START, task).fetchone()
        db.execute("COMMIT")
        done = 0
        while task is not None:
            db.execute("BEGIN IMMEDIATE")
            db.execute(HISTORY_END, run)
            db.execute(complete_sql, task)
            task = db.execute(claim_sql).fetchone()
            run = db.execute(HISTORY_START, task).fetchone() if task else None
            db.execute("COMMIT")
            done += 1
        assert done == rounds, (done, rounds)

    return claim_complete


def bench_bare(folder: Path, durability: str, rounds: int, batch: int) -> list[Rate]:
    db = bare_database(folder / "bare.db", durability, BARE_SCHEMA)
    rows = [(f"task {i}",) for i in range(rounds)]

    def enqueue_batched() -> None:
        for start in range(0, rounds, batch):
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO tasks (title) VALUES (?)", rows[start:start + batch])
            db.execute("COMMIT")

    rates = [
        timed(f"bare sqlite3 enqueue (batches of {batch})", rounds, enqueue_batched),
        timed("bare sqlite3 minimal claim+complete", rounds,
              bare_cycles(db, rounds, record_runs=False)),
    ]
    db.close()
    return rates


def bench_history_floor(folder: Path, durability: str, rounds: int) -> list[Rate]:
    """The minimal queue that also records each run: the claim adds the run's row, the
    completion ends it, each step still one transaction. Huey keeps no such record."""
    db = bare_database(folder / "history.db", durability, BARE_SCHEMA + HISTORY_SCHEMA)
    db.execute("BEGIN IMMEDIATE")
    db.executemany("INSERT INTO tasks (title) VALUES (?)", [(f"task {i}",) for i in range(rounds)])
    db.execute("COMMIT")

    rates = [timed("bare sqlite3 minimal + run record claim+complete", rounds,
                   bare_cycles(db, rounds, record_runs=True))]
    db.execute("BEGIN IMMEDIATE")
    db.executemany("INSERT INTO tasks (title) VALUES (?)", [(f"task {i}",) for i in range(rounds)])
    db.execute("COMMIT")
    rates.append(timed("bare sqlite3 minimal + run record, fused", rounds,
                       bare_fused_cycles(db, rounds)))
    db.close()
    db = bare_database(folder / "lease.db", durability, LEASE_SCHEMA + HISTORY_SCHEMA)
    db.execute("BEGIN IMMEDIATE")
    db.executemany("INSERT INTO tasks (title) VALUES (?)", [(f"task {i}",) for i in range(rounds)])
    db.execute("COMMIT")
    rates.append(timed("bare sqlite3 minimal + run record + lease, fused", rounds,
                       bare_fused_cycles(db, rounds, LEASE_CLAIM, LEASE_COMPLETE)))
    db.close()
    return rates


def bench_same_sql(folder: Path, durability: str, rounds: int, batch: int) -> list[Rate]:
    """taskherd's SQL with nothing around it, fused as the store fuses it: a run's end and
    the next claim in one transaction, the claim in a savepoint (the first claim alone). The
    floor of this store's design."""
    path = folder / "same-sql.db"
    store = SQLiteStore(path, durability=durability)
    store.enqueue_many(new_tasks(rounds), 1.0)
    store.close()
    db = sqlite3.connect(path, isolation_level=None, timeout=60)
    db.execute(f"PRAGMA synchronous = {SYNCHRONOUS[durability]}")
    claim = {"node": "bench", "now": 2.0, "lease_until": 62.0, "roles": None, "full_pools": None}
    run_params = {"node": "bench", "role": "bench", "runtime": None, "pool": None, "now": 2.0,
                  "credential_sha256": None}
    end = dict.fromkeys(["exit_code", "summary", "error", "cost_usd", "input_tokens",
                         "output_tokens", "turns", "session_id"]) | {"now": 3.0,
                                                                     "outcome": "succeeded"}
    settle = dict.fromkeys(["summary", "last_error", "error_tail", "reason"]) | {
        "now": 3.0, "state": "completed", "run_after": 3.0, "strike": 0, "rescue": 0,
        "rate_limit": 0}

    def claimed() -> tuple[int, int] | None:
        task = db.execute(Q["claim_next"], claim).fetchall()
        if not task:
            return None
        run = db.execute(Q["insert_run"], run_params | {"task_id": task[0][0]}).fetchall()
        return task[0][0], run[0][0]

    def claim_complete() -> None:
        db.execute("BEGIN IMMEDIATE")
        held = claimed()
        db.execute("COMMIT")
        for _ in range(rounds):
            assert held is not None
            task_id, run_id = held
            db.execute("BEGIN IMMEDIATE")
            db.execute(Q["end_run"], end | {"run_id": run_id}).fetchall()
            db.execute(Q["task_of_run"], {"run_id": run_id}).fetchall()
            db.execute(Q["settle_task"], settle | {"task_id": task_id, "run_id": run_id}
                       ).fetchall()
            db.execute(Q["worktree_of"], {"task_id": task_id}).fetchall()
            db.execute(M["inner_savepoint"])
            held = claimed()
            db.execute(M["release_inner"])
            db.execute("COMMIT")
        assert held is None

    rates = [timed("bare sqlite3 same-SQL claim+complete", rounds, claim_complete)]
    db.close()
    return rates


# -- Huey -------------------------------------------------------------------------------------


def bench_huey(folder: Path, durability: str, rounds: int) -> list[Rate]:
    from huey import SqliteHuey

    # Huey's only knob is `fsync`: True sets synchronous=FULL (matches taskherd's `full`);
    # False sets synchronous=OFF. There is no NORMAL, so at `normal` Huey gets OFF, which does
    # less work than taskherd's NORMAL: the comparison leans in Huey's favour, never against it.
    # Results are off: a no-op returns None, which Huey would not store anyway.
    huey = SqliteHuey(
        name="bench", filename=str(folder / "huey.db"), fsync=(durability == "full"),
        results=False,
    )

    @huey.task()
    def noop() -> None:
        return None

    def enqueue() -> None:
        for _ in range(rounds):
            noop()

    # The consumer is Huey's own per-task path, with none of its consumer process's overhead:
    # `dequeue()` (a quick emptiness check, then BEGIN EXCLUSIVE, SELECT and DELETE of the
    # head task) and `execute()` (unpickled task: revocation check, run, signals). Huey's real
    # consumer adds worker threads and a polling delay on top, so this loop is its best case.
    def consume() -> None:
        done = 0
        while (task := huey.dequeue()) is not None:
            huey.execute(task)
            done += 1
        assert done == rounds, (done, rounds)

    rates = [
        timed("huey enqueue (single)", rounds, enqueue),
        timed("huey dequeue+execute", rounds, consume),
    ]
    huey.storage.close()
    return rates


# -- report -----------------------------------------------------------------------------------


@dataclass
class Check:
    name: str
    value: float
    target: float
    unit: str
    at_most: bool = False  # the value must stay at or under the target, not reach it

    @property
    def ok(self) -> bool:
        return self.value <= self.target if self.at_most else self.value >= self.target


def run_durability(durability: str, rounds: int, singles: int, batch: int) -> list[Check]:
    with tempfile.TemporaryDirectory(prefix=f"taskherd-bench-{durability}-") as tmp:
        folder = Path(tmp)
        rates = (
            bench_taskherd(folder, durability, rounds, singles, batch)
            + bench_same_sql(folder, durability, rounds, batch)
            + bench_bare(folder, durability, rounds, batch)
            + bench_history_floor(folder, durability, rounds)
            + bench_huey(folder, durability, rounds)
        )
        pages, plain_pages, two_pages, by_btree = wal_pages_per_cycle(folder, durability)
    by_name = {rate.name: rate for rate in rates}
    ours = by_name["taskherd claim+complete"].per_second
    plain = by_name["taskherd claim+complete, plain request"].per_second
    two = by_name["taskherd claim, complete (two transactions)"].per_second
    floor = by_name["bare sqlite3 same-SQL claim+complete"].per_second
    minimal = by_name["bare sqlite3 minimal claim+complete"].per_second
    history = by_name["bare sqlite3 minimal + run record claim+complete"].per_second
    history_fused = by_name["bare sqlite3 minimal + run record, fused"].per_second
    leased = by_name["bare sqlite3 minimal + run record + lease, fused"].per_second
    huey = by_name["huey dequeue+execute"].per_second
    batched = by_name[f"taskherd enqueue (batches of {batch})"].per_second
    single = by_name["taskherd enqueue (single)"].per_second
    huey_enqueue = by_name["huey enqueue (single)"].per_second

    print(f"\n== durability {durability} (synchronous={SYNCHRONOUS[durability]}; "
          f"huey fsync={durability == 'full'}) ==")
    width = max(len(rate.name) for rate in rates)
    print(f"{'contender':<{width}}  {'tasks':>7}  {'seconds':>8}  {'tasks/s':>10}")
    print(f"{'-' * width}  {'-' * 7}  {'-' * 8}  {'-' * 10}")
    for rate in rates:
        print(f"{rate.name:<{width}}  {rate.count:>7}  {rate.seconds:>8.3f}  "
              f"{rate.per_second:>10,.0f}")

    checks = [
        # The floor runs the plain request's statements (no limits, inbox nor credential):
        # the store's overhead over its SQL is the plain request's rate against it.
        Check("plain claim+complete / same-SQL floor", plain / floor, CLAIM_RATIO_FLOOR, "x"),
        Check("claim+complete / huey dequeue+execute", ours / huey, CLAIM_RATIO_HUEY[durability],
              "x"),
        Check("WAL pages per claim+complete cycle", pages, WAL_PAGES_MOST, "pages",
              at_most=True),
    ]
    if durability == "normal":
        checks.append(Check("batched enqueue", batched, BATCH_TARGET, "tasks/s"))
    print()
    if by_btree:
        shares = ", ".join(f"{name} {n:.2f}" for name, n in by_btree.items())
        print(f"WAL pages of a cycle (a run's end and the next claim) by b-tree: {shares}  "
              "(information)")
    print(f"WAL pages per cycle, plain request (no limits, inbox nor credential)  "
          f"{plain_pages:6.2f}  (information)")
    print(f"WAL pages per claim, complete in two transactions  {two_pages:6.2f}  (information)")
    print(f"ratio plain request / huey consumer     {plain / huey:6.2f}x  (information: "
          "claim+complete with no limits, inbox nor credential)")
    print(f"ratio daemon's request / plain request  {ours / plain:6.2f}x  (information: what "
          "the limits' counts, the inbox and the credential cost a cycle)")
    print(f"ratio two transactions / huey consumer  {two / huey:6.2f}x  (information: a claim "
          "and its completion each a transaction, as the CLI, the API and a pass's first "
          "claims make them)")
    print(f"ratio enqueue single / huey enqueue     {single / huey_enqueue:6.2f}x  (information)")
    # The floor's own ratio to Huey bounds what any store on SQLite can reach against Huey.
    print(f"ratio same-SQL floor / huey consumer    {floor / huey:6.2f}x  (information)")
    print(f"ratio minimal floor / huey consumer     {minimal / huey:6.2f}x  (information)")
    # The two claim targets hold together only if the floor itself is ≥ (Huey's) / 0.5 × Huey.
    needed = CLAIM_RATIO_HUEY[durability] / CLAIM_RATIO_FLOOR
    print(f"both claim targets need a floor ≥ {needed:g}x Huey; the cheapest two-step queue on "
          f"SQLite (minimal floor) is {minimal / huey:.2f}x")
    print(f"ratio claim+complete / minimal floor    {ours / minimal:6.2f}x  (information)")
    # What the Huey target asks of any store that keeps a record of each run.
    target = CLAIM_RATIO_HUEY[durability]
    print(f"ratio minimal + run record / huey       {history / huey:6.2f}x  (information: the "
          f"cheapest two-step queue that records its runs, beside the {target:g}x target)")
    print(f"ratio minimal + run record fused / huey {history_fused / huey:6.2f}x  (information: "
          "the same, each run's end and the next claim one transaction)")
    # What is left of a cycle at the target, over the cheapest SQL that keeps a run and a
    # lease: all a store may spend beside that SQL (its Python, events, history, checks).
    budget = 1e6 / (target * huey) - 1e6 / leased
    print(f"ratio minimal + run + lease fused / huey {leased / huey:5.2f}x  (information: "
          f"with a lease too; at the {target:g}x target a cycle may spend {budget:.0f} µs beside "
          f"that SQL; taskherd spends {1e6 / ours - 1e6 / leased:.0f} µs)")
    for check in checks:
        # Pages are the same on any machine under any load; the rates are ratios in this run.
        value = (f"{check.value:6.2f}x" if check.unit == "x"
                 else f"{check.value:6.2f} {check.unit}" if check.unit == "pages"
                 else f"{check.value:,.0f} {check.unit}")
        target = (f"{check.target:g}x" if check.unit == "x"
                  else f"{check.target:,.0f} {check.unit}")
        bound = "≤" if check.at_most else "≥"
        print(f"{check.name + ' ':.<39}{value}  target {bound} {target}  "
              f"{'PASS' if check.ok else 'FAIL'}")
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--durability", choices=["full", "normal", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=None,
                        help="tasks per contender (default: 3000 at full, 20000 at normal)")
    parser.add_argument("--singles", type=int, default=None,
                        help="tasks for the single enqueue (default: as --rounds)")
    parser.add_argument("--batch", type=int, default=1000, help="batched enqueue size")
    args = parser.parse_args(argv)

    durabilities = ["full", "normal"] if args.durability == "both" else [args.durability]
    print(f"taskherd queue bench: python {sys.version.split()[0]}, "
          f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} cpus, tmp {tempfile.gettempdir()}")
    checks = []
    started = time.perf_counter()
    for durability in durabilities:
        # At `full` every commit waits for an fsync, so fewer rounds give stable figures.
        rounds = args.rounds or (3000 if durability == "full" else 20000)
        checks += run_durability(durability, rounds, args.singles or rounds, args.batch)
    failed = [check for check in checks if not check.ok]
    print(f"\n{len(checks) - len(failed)}/{len(checks)} targets met "
          f"in {time.perf_counter() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
