"""PostgreSQL queue benchmark: taskherd's PostgreSQL store beside its SQLite store and
procrastinate.

    python bench/postgres.py              # default sizes (2-4 min on 2 shared cores)
    python bench/postgres.py --tasks 5000
    python bench/postgres.py --prompt-chars 200   # tasks with text, as agents' tasks have

Information, except two targets (exit status 1 if either is missed): claim+complete with
--workers processes on PostgreSQL with cluster-wide limits costs at most 15 % of the figure
without them, and runs at least 1.5 times procrastinate's worker with as many processes.

It starts one throwaway PostgreSQL server (tests/pg.py's `start_server(durable=True)`): fsync,
synchronous_commit and full_page_writes stay on, as on a production server, because what a
durable queue pays is a WAL flush per commit, and a bench without it would measure a queue
nobody should run. Every contender runs in this one run, one after another, with the same
number (--tasks) of no-op tasks, and each figure on its own fresh database (a new PostgreSQL
database, or a new SQLite file in a temporary directory, where the fsync is on the same disk).
A task's text is a title of a few characters, and with --prompt-chars a prompt of that many
characters of words (procrastinate's jobs carry the same text as an argument): what a task's
search index costs an enqueue shows with it.

- taskherd on PostgreSQL, `PostgresStore(url, durability="full")` (synchronous_commit on):
  - enqueue, single: `store.enqueue(NewTask)` once per task, a transaction each.
  - enqueue, batched: `store.enqueue_many(batch)` in batches of --batch.
  - claim+complete, 1 process: `store.claim(ClaimRequest(node, now, lease, roles=[role],
    limits=ClaimLimits()))` for the first task, then `store.finish_run_and_claim(run_id,
    RunResult(SUCCEEDED), RetryPolicy(), now, request)` for each run's end and the next claim,
    as the daemon claims when a run's end frees a slot (one call, one round trip on
    PostgreSQL), in this process, until the queue (filled by the batched enqueue) is empty. A
    claim names its roles and the limits of the fleet, none here, as a daemon's always does (a
    daemon without limits configured claims so).
  - claim+complete, 1 process, two calls (information): the same with `store.claim` and
    `store.finish_run` called one after the other, each its own transaction, on a queue of
    its own: what the one call saves.
  - claim+complete, --workers processes: the same loop in that many real processes (spawned,
    as tests/integration/test_concurrent_claims.py does) sharing one queue; each opens its
    store first, then all start together, timed until the last one has found the queue empty.
    Each process claims as above, as a daemon does, so that the figure with cluster limits
    differs from this one by the limits alone.
    Every task must be claimed exactly once (asserted): on PostgreSQL the claim skips rows
    another process is claiming (FOR UPDATE SKIP LOCKED).
  - claim+complete, --workers processes, cluster limits: the same, each claim within limits
    counted across every process (node) in the claim's transaction, as a daemon claims: the
    role has max_concurrent and is in a pool, both larger than --workers so they never refuse
    and the figure is what the counting and the advisory lock that orders the claims cost.
    On PostgreSQL this figure and the one without limits are taken --rounds times each,
    alternating on fresh databases with procrastinate's, and the best of each is kept (the
    machine is shared); the two take turns to go first in a round, and each round's own
    ratios are printed beside the best's.
  - claim+complete, --workers processes, cluster limits, two calls (information, PostgreSQL):
    the same with claim and finish_run one after the other, taken in the same rounds.
- taskherd on SQLite, durability full: the same four figures, as the reference: the same store
  code with no server and no network round trip, where writers queue for one lock.
- procrastinate, the established PostgreSQL task queue for Python, on its own schema
  (`app.schema_manager.apply_schema()`) and its default `PsycopgConnector` pool:
  - enqueue, single: `task.defer()` once per task; batched: `task.batch_defer(...)`.
  - worker, 1 process: `app.run_worker_async(wait=False, concurrency=1)` in this process (the
    app opened beforehand), which fetches and finishes jobs until it finds none.
  These three are the peers of taskherd's enqueues and one-process claim+complete on
  PostgreSQL, so each round takes taskherd's one-process figures, then these (--rounds
  times, on fresh databases), and the best of each is kept, for the reason below.
  - worker, --workers processes: that worker in that many processes, started as above. It is
    the peer of the target, so it is taken in the same rounds as taskherd's two figures with
    --workers processes (plain, with limits, procrastinate; --rounds times, each on a fresh
    database), and the best of each kept: on a shared machine the load moves by the minute,
    and a figure taken minutes after its peer compared the two loads, not the two queues.
  The task is an `async def` no-op that records its job id (to assert each job ran exactly
  once): procrastinate's cheapest path, since a sync task would run in a thread.

What differs, so the ratios are read right: taskherd's claim+complete is the store's two
transitions (a claim, which also records a run and a lease, then the run's end and the task's
settlement), with no dispatch around them, because a taskherd task is an agent process whose
spawn costs far more than either; procrastinate's figure is its whole worker loop (fetch,
run the coroutine, finish), which is what a procrastinate user gets. Both pay one commit per
step, so on a durable server both are bound mostly by the WAL flush.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import logging
import multiprocessing
import os
import signal
import sqlite3
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from queue import Empty  # the standard library's, now that bench/ is off the path

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits, PoolLimit, RoleLimit
from taskherd.store import Store, open_store
from tests.pg import PgServer, start_server, stop_server

LEASE = 600.0
DURABILITY = "full"
ROLE = "bench"
READY_TIMEOUT = 60.0  # seconds for a worker process to start and open its database
RUN_TIMEOUT = 600.0  # seconds for the worker processes to empty the queue
# Limits counted at every claim but never reached by the bench's few processes: what they
# cost, not what they hold back. Cluster scope, so the claims are ordered across processes.
LIMITS = ClaimLimits({ROLE: RoleLimit(max_concurrent=64, pool="bench-pool")},
                     {"bench-pool": PoolLimit(64)})
NO_LIMITS = ClaimLimits()  # what a daemon claims with when none are configured
LIMITS_TARGET = 0.85  # cluster limits may cost at most 15 % of claim+complete
PEER_TARGET = 1.5  # claim+complete with cluster limits against procrastinate's worker
# Each task's text with --prompt-chars (taskherd's prompt, procrastinate's job argument): the
# words of a task search index, which an enqueue writes (none by default, as the figures before).
WORDS = ("deploy build test fix gateway parser flaky module review retry cache index schema "
         "migrate docs release branch merge config timeout worker queue node agent").split()
PROMPT_CHARS = 0  # set by main from --prompt-chars


@dataclass
class Rate:
    contender: str
    figure: str
    count: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds else float("inf")


def timed(contender: str, figure: str, count: int, work: Callable[[], object]) -> Rate:
    # The collector is paused so a stray collection does not land in one contender's timing.
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        work()
        return Rate(contender, figure, count, time.perf_counter() - started)
    finally:
        gc.enable()


def new_tasks(count: int) -> list[NewTask]:
    return [NewTask(role=ROLE, title=f"task {i}", prompt=prompt(i)) for i in range(count)]


def prompt(number: int) -> str:
    """About PROMPT_CHARS characters of words, in an order of the task's own."""
    words: list[str] = []
    while PROMPT_CHARS and sum(len(word) + 1 for word in words) < PROMPT_CHARS:
        words.append(WORDS[(number * 7 + len(words) * 3) % len(WORDS)] + str(len(words)))
    return " ".join(words)


def job_args(count: int) -> Iterator[dict[str, str]]:
    """procrastinate's jobs' arguments: none, or the text a taskherd task would carry."""
    return ({"prompt": prompt(i)} if PROMPT_CHARS else {} for i in range(count))


# -- worker processes -----------------------------------------------------------------------
# Each worker process gets (database, node, start, out): it opens its database, puts
# ("ready", node, None, None) on `out`, waits for `start`, works until the queue is empty,
# then puts ("done", node, ids it handled, traceback or None).


def taskherd_limited_worker(database: str, node: str, start: Any, out: Any) -> None:
    taskherd_worker(database, node, start, out, LIMITS)


def taskherd_limited_two_calls_worker(database: str, node: str, start: Any, out: Any) -> None:
    taskherd_worker(database, node, start, out, LIMITS, loop=claim_then_finish)


def taskherd_worker(database: str, node: str, start: Any, out: Any,
                    limits: ClaimLimits = NO_LIMITS, loop: Loop | None = None) -> None:
    claimed: list[int] = []
    try:
        store = open_store(database, durability=DURABILITY)
        out.put(("ready", node, None, None))
        start.wait(READY_TIMEOUT)
        (loop or finish_and_claim)(store, node, limits, claimed, time.time)
        out.put(("done", node, claimed, None))
        store.close()
    except BaseException:  # noqa: BLE001 - every failure goes back to the parent, named
        out.put(("done", node, claimed, traceback.format_exc()))


# A claim+complete loop: (store, node, limits, ids claimed, clock) until the queue is empty.
Loop = Callable[[Store, str, ClaimLimits, list[int], Callable[[], float]], None]


def finish_and_claim(store: Store, node: str, limits: ClaimLimits, claimed: list[int],
                     clock: Callable[[], float]) -> None:
    """The daemon's way: the first claim alone, then each run's end and the next claim in one
    call (finish_run_and_claim)."""
    policy, success = RetryPolicy(), RunResult(Outcome.SUCCEEDED)
    claim = store.claim(ClaimRequest(node, clock(), LEASE, roles=[ROLE], limits=limits))
    while claim is not None:
        claimed.append(claim.task.id)
        now = clock()
        claim = store.finish_run_and_claim(
            claim.run.id, success, policy, now,
            ClaimRequest(node, now, LEASE, roles=[ROLE], limits=limits))[1].claim


def claim_then_finish(store: Store, node: str, limits: ClaimLimits, claimed: list[int],
                      clock: Callable[[], float]) -> None:
    """The two calls one after the other (information: what the one call saves)."""
    policy, success = RetryPolicy(), RunResult(Outcome.SUCCEEDED)
    while (claim := store.claim(ClaimRequest(node, clock(), LEASE, roles=[ROLE],
                                             limits=limits))) is not None:
        claimed.append(claim.task.id)
        store.finish_run(claim.run.id, success, policy, clock())


def procrastinate_worker(url: str, node: str, start: Any, out: Any) -> None:
    reported = False
    try:
        app = procrastinate_app(url)

        async def work() -> None:
            nonlocal reported
            async with app.open_async():  # the pool's connections open before the start
                out.put(("ready", node, None, None))
                await asyncio.to_thread(start.wait, READY_TIMEOUT)
                await app.run_worker_async(name=node, wait=False, concurrency=1,
                                           install_signal_handlers=False)
                out.put(("done", node, list(PROCRASTINATE_DONE), None))
                reported = True

        asyncio.run(work())
    except BaseException:  # noqa: BLE001
        if not reported:
            out.put(("done", node, list(PROCRASTINATE_DONE), traceback.format_exc()))


class Workers:
    """`count` spawned processes running `target`; started and ready on entry, all ended on exit."""

    def __init__(self, target: Callable[..., None], database: str, count: int):
        self.context = multiprocessing.get_context("spawn")
        self.start, self.out = self.context.Event(), self.context.Queue()
        self.processes = [
            self.context.Process(target=target, args=(database, f"node-{i}", self.start, self.out),
                                 name=f"bench-worker-{i}", daemon=True)
            for i in range(count)
        ]

    def __enter__(self) -> Self:
        try:
            for process in self.processes:
                process.start()
            self._collect("ready", READY_TIMEOUT)
        except BaseException:
            self._end(failed=True)
            raise
        return self

    def __exit__(self, error_type: type[BaseException] | None, *_: object) -> None:
        self._end(failed=error_type is not None)

    def run(self) -> list[list[int]]:
        """Start them all at once; the ids each one handled, once all have finished."""
        self.start.set()
        return self._collect("done", RUN_TIMEOUT)

    def _collect(self, phase: str, timeout: float) -> list[list[int]]:
        # Polled, so a process that dies without a word fails the bench instead of hanging it.
        deadline, results = time.monotonic() + timeout, []
        while len(results) < len(self.processes):
            try:
                kind, node, ids, error = self.out.get(timeout=0.5)
            except Empty:
                dead = [p.name for p in self.processes if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"workers {dead or 'timed out'} before {phase}") from None
                continue
            if error:
                raise RuntimeError(f"{node} failed:\n{error}")
            if kind != phase:
                raise RuntimeError(f"{node} said {kind!r}, expected {phase!r}")
            results.append(ids)
        return results

    def _end(self, failed: bool) -> None:
        # After a failure the others may still wait for the start or work: end them now.
        for process in self.processes:
            if process.pid is None:
                continue
            if failed:
                process.terminate()
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=10)


def check_once(contender: str, per_worker: list[list[int]], expected: set[int] | int) -> None:
    """Every task handled exactly once, by one worker or another."""
    every = [task_id for ids in per_worker for task_id in ids]
    twice = [task_id for task_id, seen in Counter(every).items() if seen > 1]
    assert not twice, f"{contender}: {len(twice)} tasks handled twice, e.g. {twice[:5]}"
    if isinstance(expected, set):
        assert set(every) == expected, f"{contender}: handled {len(every)} of {len(expected)}"
    else:
        assert len(every) == expected, f"{contender}: handled {len(every)} of {expected}"


# -- taskherd ---------------------------------------------------------------------------------


def bench_taskherd(contender: str, databases: Iterator[str], tasks: int, batch: int,
                   workers: int, limited_rounds: int = 0,
                   peer: Callable[[], Rate] | None = None,
                   rounds_taken: list[list[Rate]] | None = None,
                   single_peer: Callable[[int], list[Rate]] | None = None) -> list[Rate]:
    """The figures on the fresh databases `databases` yields, in order; with
    `limited_rounds`, the one-process figures that many times, each round also taking the
    `single_peer`'s (given the round's number), then the processes' figures (processes_rounds,
    each round's into `rounds_taken`); the best of each kept."""
    taken = []
    for number in range(limited_rounds or 1):
        taken.append(single_figures(contender, databases, tasks, batch)
                     + (single_peer(number) if single_peer is not None else []))
    rates = [max(column, key=lambda rate: rate.per_second) for column in zip(*taken, strict=True)]
    if not limited_rounds:
        rates.append(processes_figure(contender, f"claim+complete, {workers} processes",
                                      next(databases), tasks, workers, taskherd_worker))
        return rates
    taken = processes_rounds(contender, databases, tasks, workers, limited_rounds, peer)
    if rounds_taken is not None:
        rounds_taken.extend(taken)
    for column in zip(*taken, strict=True):
        rates.append(max(column, key=lambda rate: rate.per_second))
    return rates


def single_figures(contender: str, databases: Iterator[str], tasks: int,
                   batch: int) -> list[Rate]:
    """The enqueues' and one process's claim+complete figures, each on a fresh database."""
    now = time.time()
    rates = []

    store = open_store(next(databases), durability=DURABILITY)
    singles = new_tasks(tasks)

    def enqueue_single() -> None:
        for new in singles:
            store.enqueue(new, now)

    rates.append(timed(contender, "enqueue (single)", tasks, enqueue_single))
    store.close()

    # The single-process claims walk the backlog the batched enqueue made, as in
    # bench/sqlite_queue.py.
    store = open_store(next(databases), durability=DURABILITY)
    batched = new_tasks(tasks)

    def enqueue_batched() -> None:
        for start in range(0, tasks, batch):
            store.enqueue_many(batched[start:start + batch], now)

    rates.append(timed(contender, f"enqueue (batches of {batch})", tasks, enqueue_batched))
    rates.append(one_process_figure(contender, "claim+complete, 1 process", store, tasks,
                                    finish_and_claim, now))
    store = open_store(next(databases), durability=DURABILITY)
    store.enqueue_many(new_tasks(tasks), now)
    rates.append(one_process_figure(contender, "claim+complete, 1 process, two calls", store,
                                    tasks, claim_then_finish, now))
    return rates


def processes_rounds(contender: str, databases: Iterator[str], tasks: int, workers: int,
                     rounds: int, peer: Callable[[], Rate] | None) -> list[list[Rate]]:
    """`rounds` rounds, each of the processes' figures without cluster limits, with them,
    with them in two calls and the `peer`'s, each on a fresh database, so that all meet the
    same load; a round's figures in this order (as listed), but the first two take turns to
    go first: a figure taken right after another meets what that one left behind (its
    database's autovacuum, its WAL to checkpoint)."""
    figure = f"claim+complete, {workers} processes"
    kinds: list[tuple[str, Callable[..., None]]] = [
        (figure, taskherd_worker), (f"{figure}, cluster limits", taskherd_limited_worker),
        (f"{figure}, cluster limits, two calls", taskherd_limited_two_calls_worker)]
    taken = []
    for number in range(rounds):
        order = [1, 0, 2] if number % 2 else [0, 1, 2]
        measured: dict[int, Rate] = {}
        for kind in order:
            name, target = kinds[kind]
            measured[kind] = processes_figure(contender, name, next(databases), tasks,
                                              workers, target)
        taken.append([measured[kind] for kind in range(len(kinds))]
                     + ([peer()] if peer is not None else []))
    return taken


def one_process_figure(contender: str, figure: str, store: Store, tasks: int, loop: Loop,
                       now: float) -> Rate:
    """`loop` in this process over the `tasks` in `store`'s queue (its clock stopped at
    `now`); `store` is closed after."""
    claimed: list[int] = []
    rate = timed(contender, figure, tasks,
                 lambda: loop(store, "bench-node", NO_LIMITS, claimed, lambda: now))
    check_once(contender, [claimed], tasks)
    check_settled(contender, store, tasks)
    store.close()
    return rate


def processes_figure(contender: str, figure: str, database: str, tasks: int, workers: int,
                     target: Callable[..., None]) -> Rate:
    store = open_store(database, durability=DURABILITY)
    store.enqueue_many(new_tasks(tasks), time.time())
    with Workers(target, database, workers) as pool:
        per_worker: list[list[int]] = []
        rate = timed(contender, figure, tasks, lambda: per_worker.extend(pool.run()))
    check_once(contender, per_worker, tasks)
    check_settled(contender, store, tasks)
    store.close()
    print(f"  {contender} ({figure}): {rate.per_second:,.0f}/s, tasks per process "
          f"{sorted(len(ids) for ids in per_worker)}", flush=True)
    return rate


def check_settled(contender: str, store: Store, tasks: int) -> None:
    counts = {(count.state, count.role): count.count for count in store.counts()}
    assert counts == {(TaskState.COMPLETED, ROLE): tasks}, f"{contender}: {counts}"


# -- procrastinate ----------------------------------------------------------------------------

PROCRASTINATE_TASK = "bench_noop"
# The ids of the jobs this process ran, to check that each job ran exactly once.
PROCRASTINATE_DONE: list[int] = []


async def procrastinate_noop(context: Any, **_text: str) -> None:
    PROCRASTINATE_DONE.append(context.job.id)


def procrastinate_app(url: str) -> Any:
    import procrastinate

    # It warns when an App is made in the __main__ module, where its CLI worker could not
    # import it; this bench registers the task by name in each process and needs no import.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    app.task(name=PROCRASTINATE_TASK, pass_context=True)(procrastinate_noop)
    return app


def procrastinate_single(server: PgServer, tasks: int, batch: int, number: int) -> list[Rate]:
    """procrastinate's enqueues and its worker in this process, on fresh databases (their
    names ending in `number`): taken in the rounds beside taskherd's one-process figures."""
    contender = "procrastinate"
    rates = []

    def fresh_app(name: str) -> Any:
        server.admin(f'CREATE DATABASE "{name}"')
        app = procrastinate_app(server.url(name))
        with app.open():
            app.schema_manager.apply_schema()
        return app

    app = fresh_app(f"procrastinate_single_{number}")
    with app.open():
        noop = app.tasks[PROCRASTINATE_TASK]

        def defer_single() -> None:
            for arguments in job_args(tasks):
                noop.defer(**arguments)

        rates.append(timed(contender, "enqueue (single)", tasks, defer_single))

    batched = f"procrastinate_batched_{number}"
    app = fresh_app(batched)
    deferred: list[int] = []
    with app.open():
        noop = app.tasks[PROCRASTINATE_TASK]

        def defer_batched() -> None:
            for start in range(0, tasks, batch):
                deferred.extend(noop.batch_defer(*job_args(min(batch, tasks - start))))

        rates.append(timed(contender, f"enqueue (batches of {batch})", tasks, defer_batched))

    # A fresh app object for the worker: an async pool, opened before the clock starts.
    app = procrastinate_app(server.url(batched))
    PROCRASTINATE_DONE.clear()
    with asyncio.Runner() as runner:
        runner.run(app.open_async().__aenter__())
        try:
            rates.append(timed(
                contender, "worker, 1 process", tasks,
                # Its own signal handlers would turn a TERM into a graceful worker stop, and
                # the bench would go on: this bench's handler ends the whole run instead.
                lambda: runner.run(app.run_worker_async(name="worker-0", wait=False,
                                                        concurrency=1,
                                                        install_signal_handlers=False)),
            ))
        finally:
            runner.run(app.close_async())
    check_once(contender, [list(PROCRASTINATE_DONE)], set(deferred))
    check_jobs(contender, server.url(batched), tasks)

    return rates


def procrastinate_processes(server: PgServer, tasks: int, batch: int, workers: int,
                            databases: Iterator[int]) -> Rate:
    """procrastinate's worker in `workers` processes on a fresh database: taken in the
    rounds beside taskherd's figure with as many processes, since it is the target's peer."""
    contender, name = "procrastinate", f"procrastinate_processes_{next(databases)}"
    server.admin(f'CREATE DATABASE "{name}"')
    app = procrastinate_app(server.url(name))
    with app.open():
        app.schema_manager.apply_schema()
        deferred = []
        noop = app.tasks[PROCRASTINATE_TASK]
        for start in range(0, tasks, batch):
            deferred.extend(noop.batch_defer(*job_args(min(batch, tasks - start))))
    url = server.url(name)
    with Workers(procrastinate_worker, url, workers) as pool:
        per_worker: list[list[int]] = []
        rate = timed(contender, f"worker, {workers} processes", tasks,
                     lambda: per_worker.extend(pool.run()))
    check_once(contender, per_worker, set(deferred))
    check_jobs(contender, url, tasks)
    print(f"  {contender}: jobs per process {sorted(len(ids) for ids in per_worker)}")
    return rate


def check_jobs(contender: str, url: str, tasks: int) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        statuses = dict(conn.execute(
            "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status").fetchall())
    assert statuses == {"succeeded": tasks}, f"{contender}: {statuses}"


# -- report -----------------------------------------------------------------------------------


def versions(server: PgServer) -> str:
    import procrastinate
    import psycopg

    with psycopg.connect(server.url()) as conn:
        pg_version = conn.execute("SHOW server_version").fetchone()[0]
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]
                    for name in ("fsync", "synchronous_commit", "full_page_writes")}
    shown = ", ".join(f"{name}={value}" for name, value in settings.items())
    return (f"PostgreSQL {pg_version} ({shown}), psycopg {psycopg.__version__}, "
            f"procrastinate {procrastinate.__version__}, SQLite {sqlite3.sqlite_version} "
            f"(synchronous=FULL), python {sys.version.split()[0]}, {os.cpu_count()} cpus")


def report(rates: list[Rate], workers: int, batch: int) -> None:
    width = max(len(rate.contender) for rate in rates)
    figure_width = max(len(rate.figure) for rate in rates)
    print(f"\n{'contender':<{width}}  {'figure':<{figure_width}}  {'tasks':>6}  "
          f"{'seconds':>8}  {'tasks/s':>9}")
    print(f"{'-' * width}  {'-' * figure_width}  {'-' * 6}  {'-' * 8}  {'-' * 9}")
    for rate in rates:
        print(f"{rate.contender:<{width}}  {rate.figure:<{figure_width}}  {rate.count:>6}  "
              f"{rate.seconds:>8.3f}  {rate.per_second:>9,.0f}")

    by = {(rate.contender, rate.figure): rate.per_second for rate in rates}
    pairs = [
        ("enqueue (single)", "enqueue (single)"),
        (f"enqueue (batches of {batch})", f"enqueue (batches of {batch})"),
        ("claim+complete, 1 process", "worker, 1 process"),
        (f"claim+complete, {workers} processes", f"worker, {workers} processes"),
    ]
    print("\nratios (information):")
    for ours, theirs in pairs:
        pg, sqlite = by[("taskherd postgres", ours)], by[("taskherd sqlite", ours)]
        peer = by[("procrastinate", theirs)]
        print(f"  {ours:<{figure_width}}  taskherd pg / procrastinate {pg / peer:6.2f}x   "
              f"taskherd pg / taskherd sqlite {pg / sqlite:6.2f}x")
    print("\none call (finish_run_and_claim) / two calls (claim, then finish_run), PostgreSQL:")
    for one in ("claim+complete, 1 process",
                f"claim+complete, {workers} processes, cluster limits"):
        ratio = by[("taskherd postgres", one)] / by[("taskherd postgres", f"{one}, two calls")]
        print(f"  {one:<{figure_width}}  {ratio:6.2f}x")


def report_limits(rates: list[Rate], workers: int, rounds: list[list[Rate]]) -> bool:
    by = {(rate.contender, rate.figure): rate.per_second for rate in rates}
    figure = f"claim+complete, {workers} processes"
    plain = by[("taskherd postgres", figure)]
    limited = by[("taskherd postgres", f"{figure}, cluster limits")]
    peer = by[("procrastinate", f"worker, {workers} processes")]
    cost_ok, peer_ok = limited / plain >= LIMITS_TARGET, limited / peer >= PEER_TARGET
    print(f"\ncluster limits, {figure} on PostgreSQL (the best of each):")
    print(f"  with / without limits  {limited / plain:6.2f}x  (they cost "
          f"{1 - limited / plain:.0%}; target ≤ 15 %: {'PASS' if cost_ok else 'FAIL'})")
    print(f"  with limits / procrastinate  {limited / peer:6.2f}x  (target ≥ {PEER_TARGET:g}x: "
          f"{'PASS' if peer_ok else 'FAIL'})")
    # Each round's own ratios (information): its figures met about the same load.
    print("  by round, with / without limits: "
          + ", ".join(f"{r[1].per_second / r[0].per_second:.2f}x" for r in rounds)
          + "; with limits / procrastinate: "
          + ", ".join(f"{r[1].per_second / r[3].per_second:.2f}x" for r in rounds))
    return cost_ok and peer_ok


def fresh_databases(server: PgServer) -> Iterator[str]:
    for number in itertools.count():
        name = f"taskherd_{number}"
        server.admin(f'CREATE DATABASE "{name}"')
        yield server.url(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # At 2,000 the whole run takes about a minute on 2 cores: every commit waits for an fsync.
    parser.add_argument("--tasks", type=int, default=2000,
                        help="no-op tasks per figure and contender (default: 2000)")
    parser.add_argument("--batch", type=int, default=1000, help="batched enqueue size")
    parser.add_argument("--workers", type=int, default=4, help="processes sharing one queue")
    parser.add_argument("--prompt-chars", type=int, default=0,
                        help="characters of text in each task (default: none)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the processes' figure with and without cluster limits, "
                             "and of procrastinate's beside them")
    args = parser.parse_args(argv)
    global PROMPT_CHARS
    PROMPT_CHARS = args.prompt_chars

    # A TERM (a timeout, a CI cancel) unwinds like an exception, so the `finally` clauses
    # below stop the server and the worker processes instead of leaving them running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    started = time.perf_counter()
    try:
        server = start_server(durable=True)
    except BaseException as error:
        # tests/pg.py skips (a pytest outcome) when PostgreSQL's server binaries are missing.
        if type(error).__name__ != "Skipped":
            raise
        print(f"taskherd postgres bench: skipped: {error}")
        return 0
    try:
        print(f"taskherd postgres bench: {versions(server)}; tmp {tempfile.gettempdir()}; "
              f"text a task {PROMPT_CHARS} characters")
        peer_databases = itertools.count()
        rounds: list[list[Rate]] = []
        rates = bench_taskherd(
            "taskherd postgres", fresh_databases(server), args.tasks, args.batch, args.workers,
            limited_rounds=args.rounds,
            peer=lambda: procrastinate_processes(server, args.tasks, args.batch, args.workers,
                                                 peer_databases),
            rounds_taken=rounds,
            single_peer=lambda number: procrastinate_single(server, args.tasks, args.batch,
                                                            number))
        with tempfile.TemporaryDirectory(prefix="taskherd-bench-pg-") as tmp:
            sqlite_files = (str(Path(tmp) / f"{name}.db")
                            for name in ("single", "batched", "two-calls", "processes"))
            rates += bench_taskherd("taskherd sqlite", sqlite_files, args.tasks, args.batch,
                                    args.workers)
    finally:
        stop_server(server)
    report(rates, args.workers, args.batch)
    passed = report_limits(rates, args.workers, rounds)
    print(f"\ndone in {time.perf_counter() - started:.1f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
