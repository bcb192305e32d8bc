"""What the supervisor keeps of each agent it watches (`LiveRun`), the read-only view other
services get of them (`LiveRuns`), and when each is looked at next (`LookSchedule`).

The schedule is a heap, so a round costs what is due, not what runs: a thousand quiet agents
far from any threshold cost nothing this second.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from taskherd.model import Liveness, Outcome, Run, Task
from taskherd.model.settings import RoleConfig
from taskherd.runtimes.base import Execution, OutputReader, Runtime
from taskherd.runtimes.ratelimit import RateLimitSignal
from taskherd.services.output_feed import OutputFeed


@dataclass(eq=False)  # identity: comparing every field of a thousand runs costs a round
class LiveRun:
    """An agent this daemon is watching."""

    run: Run
    task: Task
    role: RoleConfig
    runtime: Runtime
    handle: Execution
    reader: OutputReader
    spawned_at: float
    pools: frozenset[str]
    last_activity: float
    log_offset: int = 0  # bytes of output read (or passed over: see output_feed.py)
    output: OutputFeed | None = field(default=None, repr=False)  # how its log is read
    output_skipped: bool = False  # some of its output was passed over (said once)
    cpu_seconds: float = 0.0
    cpu_sampled_at: float = 0.0
    heartbeat_at: float | None = None
    kill_reason: tuple[Outcome, str] | None = None  # why the supervisor is ending it
    watcher: asyncio.Task | None = field(default=None, repr=False)
    next_look: float = math.inf  # when it is looked at again (its entry in the schedule)
    looked_at: float = 0.0  # when its log was last looked at: later output was written since
    output_at: float = -math.inf  # the look that last found new output
    cpu_busy: bool = False  # its last CPU sample showed work: keep sampling it
    sample_from: float = math.inf  # from when its CPU time is worth a sample (its verdict's)
    recent: bytes = b""  # the end of its output, where a question would be
    question: str | None = None  # the question its output ends with, if any
    question_read_at: int = -1  # the log offset `question` was read at
    waiting: str | None = None  # the question it waits at (on_input = wait), until it moves
    verdict: tuple[Liveness, float, str | None] | None = None  # as last written to the store
    probe: bool = False  # the one run of its runtime let through after a rate limit
    paused_for: RateLimitSignal | None = None  # the limit it paused its runtime for, mid-run
    gate: GateLimits | None = None  # the quality gate it runs now, watched in its stead
    # Found ended when this daemon started: whatever ended it happened while none watched.
    ended_unwatched: bool = False


@dataclass(frozen=True)
class GateLimits:
    """What ends a running gate besides its exit: silence past its idle window."""

    name: str
    idle_timeout: float


class LiveRuns(Mapping[int, Run]):
    """What other services may know of the runs this node watches, read-only: the run of
    each watched id, running counts per role, pools in use and the last spawn per role.
    The counts are kept as runs come and go (the supervisor tells, `watched`/`unwatched`):
    the dispatcher reads them for every claim, and counting a thousand runs each time was
    most of its pass.

    A run being prepared (its worktree made off the loop, services/preparations.py) is in
    the view too, counted as running: it holds its slot, and the monitor leaves it alone."""

    def __init__(self, live: dict[int, LiveRun], last_spawns: dict[str, float]):
        self._live = live
        self._last_spawns = last_spawns
        self._per_role: Counter[str] = Counter()
        self._per_pool: Counter[str] = Counter()
        self._preparing: dict[int, tuple[Run, str, frozenset[str]]] = {}

    def watched(self, live: LiveRun) -> None:
        self._per_role[live.role.name] += 1
        self._per_pool.update(live.pools)

    def unwatched(self, live: LiveRun) -> None:
        self._per_role[live.role.name] -= 1
        self._per_pool.subtract(live.pools)

    def preparing(self, run: Run, role: str, pools: frozenset[str]) -> None:
        self._preparing[run.id] = (run, role, pools)
        self._per_role[role] += 1
        self._per_pool.update(pools)

    def prepared(self, run_id: int) -> None:
        """No longer prepared: spawned (then `watched`), settled, or given up."""
        _, role, pools = self._preparing.pop(run_id)
        self._per_role[role] -= 1
        self._per_pool.subtract(pools)

    def __getitem__(self, run_id: int) -> Run:
        live = self._live.get(run_id)
        return live.run if live is not None else self._preparing[run_id][0]

    def __iter__(self) -> Iterator[int]:
        return iter([*self._live, *self._preparing])

    def __len__(self) -> int:
        return len(self._live) + len(self._preparing)

    def running_per_role(self) -> Counter[str]:
        return +self._per_role  # a copy, without the roles that have none

    def pools_in_use(self) -> Counter[str]:
        return +self._per_pool

    def last_spawn(self, role: str) -> float | None:
        return self._last_spawns.get(role)


class LookSchedule:
    """When each watched run is looked at next: (time, order, run id) in a heap, the earliest
    first. A run's `next_look` is the time of its one live entry; an entry whose time is no
    longer its run's `next_look` was superseded and is skipped when it comes up."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int]] = []
        self._order = itertools.count()

    def schedule(self, live: LiveRun, when: float, force: bool = False) -> None:
        """Look at `live` at `when`, or sooner if it is already due sooner (unless `force`)."""
        if when == live.next_look or (not force and live.next_look <= when):
            return
        live.next_look = when
        heapq.heappush(self._heap, (when, next(self._order), live.run.id))

    def due(self, now: float, live: Mapping[int, LiveRun], most: int) -> list[LiveRun]:
        """The runs whose look has come, earliest first, up to `most`; each taken run's
        next_look is cleared (inf) until it is scheduled again. Ended runs are dropped."""
        taken: list[LiveRun] = []
        while self._heap and self._heap[0][0] <= now and len(taken) < most:
            when, _, run_id = heapq.heappop(self._heap)
            run = live.get(run_id)
            if run is not None and run.next_look == when and run.kill_reason is None:
                run.next_look = math.inf
                taken.append(run)
        return taken

    def earliest(self) -> float | None:
        """The time of the first entry (perhaps superseded: then a round finds nothing)."""
        return self._heap[0][0] if self._heap else None
