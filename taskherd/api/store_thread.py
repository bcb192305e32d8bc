"""The API's calls to the store (and to run logs), off the event loop, in one thread that takes
every call waiting at once.

Handing each call to a worker thread and its answer back costs two thread wake-ups and the
interpreter lock handed over twice: measured, more CPU than a heartbeat's own SQL. A thread
that drains what has queued up meanwhile pays that once for a burst: under fifty clients a
batch holds many calls. One thread is enough, since the store serialises its calls behind
one lock anyway; the answers of a batch go back to the loop together, every BATCH calls at
the most, so the first caller of a long batch does not wait for its last.

A call made by `run_grouped` (a task added, a heartbeat: one short write each) is committed
with the grouped calls next to it in the batch, in one transaction of the store's
(`Store.writes_grouped`), each its own savepoint: a commit a group, not a call. Each is
answered only after that commit; if it fails, every call of the group that had succeeded
gets its error instead, since none of their writes was kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any

# Calls answered together at the most. 64: fifty clients' calls are one or two batches, a
# commit and a wake-up of the loop each (at 16, three or four: 12 % more of the server's CPU
# a task added, bench/api.py a); a batch of 64 short writes is still a few milliseconds.
BATCH = 64

Call = tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any], bool]  # bool: grouped
Around = Callable[[], contextlib.AbstractContextManager[Any]]
Answer = tuple[asyncio.Future[Any], bool, Any]  # (its future, succeeded, result or error)


class StoreThread:
    def __init__(self, name: str = "taskherd-api-store",
                 hold: Around = contextlib.nullcontext,
                 group: Around = contextlib.nullcontext) -> None:
        self._name = name
        self._hold = hold  # around each batch: the store's events told once, at its end
        self._group = group  # around each run of grouped calls: their writes committed once
        # A C queue: a call put while the thread waits wakes it in one step. The Python
        # deque, lock and Event it replaced cost the loop a Condition's lock and notify per
        # wake-up, and the thread a waiter's lock made for each wait (under fifty clients
        # the thread, faster than the loop, waits between most calls).
        self._waiting: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self._lock = threading.Lock()  # the thread's start
        self._thread: threading.Thread | None = None

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in the thread; its result, or its exception raised here."""
        return await self._queued(function, args, False)

    async def run_grouped(self, function: Callable[..., Any], *args: Any) -> Any:
        """As `run`, its writes committed with the grouped calls beside it in a batch: for a
        call of a few short writes, no slow read, no I/O (the group holds the store)."""
        return await self._queued(function, args, True)

    async def _queued(self, function: Callable[..., Any], args: tuple[Any, ...],
                      grouped: bool) -> Any:
        future = asyncio.get_running_loop().create_future()
        if self._thread is None:
            self._start()
        self._waiting.put((function, args, future, grouped))
        return await future

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name,
                                                daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        try:
            while True:
                self._serve_batch()
        finally:  # the thread ends (it should not): the next call starts another
            with self._lock:
                self._thread = None

    def _serve_batch(self) -> None:
        waiting = self._waiting
        calls = [waiting.get()]  # asleep until a call comes
        # This thread alone takes calls: the ones counted are there to take.
        calls += [waiting.get_nowait() for _ in range(min(BATCH - 1, waiting.qsize()))]
        answers: list[Answer] = []
        with self._hold():
            for grouped, run in itertools.groupby(calls, key=lambda call: call[3]):
                together = list(run)
                answers += self._grouped(together) if grouped else map(_answer, together)
        for loop, batch in _by_loop(answers).items():
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
                loop.call_soon_threadsafe(_settle, batch)

    def _grouped(self, calls: list[Call]) -> list[Answer]:
        answers: list[Answer] = []
        try:
            with self._group():
                answers = [_answer(call) for call in calls]
        except BaseException as error:  # noqa: BLE001 - its commit failed: nothing was kept
            return [(future, False, error if succeeded else value)
                    for future, succeeded, value in answers]
        return answers


def _answer(call: Call) -> Answer:
    function, args, future, _ = call
    try:
        return future, True, function(*args)
    except BaseException as error:  # noqa: BLE001 - raised again in the caller
        return future, False, error


def _by_loop(answers: list[Answer]) -> dict[asyncio.AbstractEventLoop, list[Answer]]:
    """Answers grouped by the loop awaiting them (tests run apps on loops of their own)."""
    grouped: dict[asyncio.AbstractEventLoop, list[Answer]] = {}
    for answer in answers:
        grouped.setdefault(answer[0].get_loop(), []).append(answer)
    return grouped


def _settle(answers: list[Answer]) -> None:
    for future, succeeded, value in answers:
        if future.done():
            continue  # its caller was cancelled (a client that went away)
        if succeeded:
            future.set_result(value)
        else:
            future.set_exception(value)
