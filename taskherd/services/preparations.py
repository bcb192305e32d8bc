"""Claimed runs whose agent waits for something slow to be made first, off the daemon's loop:
today a task's git worktree (`git worktree add` runs the repository's post-checkout hook,
which may take minutes, or hang until its time limit).

Each preparation runs in a thread of its own (not the loop's shared executor: a few hooks
that hang must not starve the other services' threads); the loop awaits it and goes on
dispatching and watching meanwhile. A run being prepared is claimed and unspawned: it counts
in the live runs' view (node slots, its role's max_concurrent, its pools), and being in that
view keeps the monitor's never-spawned rescue off it. Should the daemon die meanwhile, the
run is in nobody's view any more and is rescued as any never-spawned run is (no strike).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from taskherd.model import Claim
from taskherd.model.settings import RoleConfig
from taskherd.services.live_runs import LiveRuns

log = logging.getLogger("taskherd.supervisor")
T = TypeVar("T")


@dataclass(eq=False)
class Preparation:
    """A claimed run whose worktree is being made."""

    claim: Claim
    role: RoleConfig
    pools: frozenset[str]
    probe: bool
    record: Path  # where its git is named while it runs (worktrees.running_record)
    waiter: asyncio.Task | None = field(default=None, repr=False)


# What to do when the preparation ends: (the preparation, what it made, or what it raised).
Then = Callable[[Preparation, object, BaseException | None], None]


class Preparations:
    def __init__(self, view: LiveRuns):
        self.view = view
        self._under_way: dict[int, Preparation] = {}  # run id → its preparation

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._under_way

    def __len__(self) -> int:
        return len(self._under_way)

    def run_of_task(self, task_id: int) -> int | None:
        for run_id, preparation in self._under_way.items():
            if preparation.claim.task.id == task_id:
                return run_id
        return None

    def begin(self, preparation: Preparation, work: Callable[[], object], then: Then) -> None:
        """Run `work` in a thread; `then` is called on the loop with what it made or raised
        (not if the daemon stops first: see `stop_all`)."""
        run = preparation.claim.run
        self._under_way[run.id] = preparation
        self.view.preparing(run, preparation.role.name, preparation.pools)
        preparation.waiter = asyncio.get_running_loop().create_task(
            self._prepare(preparation, work, then), name=f"prepare-run-{run.id}")

    async def _prepare(self, preparation: Preparation, work: Callable[[], object],
                       then: Then) -> None:
        made: object = None
        error: BaseException | None = None
        try:  # (cancelled when the daemon stops: stop_all settles the run)
            made = await in_own_thread(work, f"worktree-task-{preparation.claim.task.id}")
        except Exception as raised:  # noqa: BLE001 - handed to `then`, which says it
            error = raised
        self._forget(preparation)
        try:
            then(preparation, made, error)
        except Exception:
            # Said now (a task's error is only printed when collected); the run stays claimed
            # and unwatched, and the never-spawned rescue releases it, no strike.
            log.exception("run %s: starting it after its preparation failed",
                          preparation.claim.run.id)

    def _forget(self, preparation: Preparation) -> None:
        run_id = preparation.claim.run.id
        if self._under_way.pop(run_id, None) is not None:
            self.view.prepared(run_id)

    def stop(self, run_id: int) -> None:
        """Stop the git of a preparation (its task was cancelled): its thread ends with a
        GitError, and `then` finds the task cancelled. Stopping waits up to the stop's grace,
        so it is done in a thread too."""
        from taskherd.host import worktrees

        preparation = self._under_way.get(run_id)
        if preparation is not None:
            threading.Thread(target=worktrees.stop_left_running, args=(preparation.record,),
                             daemon=True, name=f"stop-prepare-run-{run_id}").start()

    async def stop_all(self) -> list[Preparation]:
        """On daemon stop: the preparations are given up and their git stopped (a hook
        left hanging would outlive the daemon); returned for their runs to be settled."""
        from taskherd.host import worktrees

        stopped = list(self._under_way.values())
        for preparation in stopped:
            if preparation.waiter is not None:
                preparation.waiter.cancel()
            self._forget(preparation)
        await asyncio.gather(*(asyncio.to_thread(worktrees.stop_left_running, p.record)
                               for p in stopped))
        return stopped


async def in_own_thread(work: Callable[[], T], name: str) -> T:
    """`work()` in a daemon thread of its own, awaited: a stopping daemon does not wait for
    a hook that hangs, and the result of a thread whose waiter is gone is dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        made: T | None = None
        error: BaseException | None = None
        try:
            made = work()
        except BaseException as raised:  # noqa: BLE001 - handed to the waiter as it is
            error = raised

        def settle() -> None:
            if future.done():  # cancelled: the daemon stops
                return
            if error is None:
                # made is work()'s result, never the None it starts as: no error, so it returned
                future.set_result(made)  # type: ignore[arg-type]
            else:
                future.set_exception(error)

        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:
            pass  # the loop closed: the daemon stopped

    threading.Thread(target=run, daemon=True, name=name).start()
    return await future
