"""What the many open pages and streams of one API process share: the store's event channel,
listened to once and fanned out to every stream, and the board's fragment, rendered once for
the dashboards that ask for it on the same change."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from taskherd.model import Event, EventKind
from taskherd.ops import metrics as metric_ops

if TYPE_CHECKING:
    from taskherd.ops import Queue
    from taskherd.store.events import Listener

log = logging.getLogger("taskherd.api")

SUBSCRIBER_QUEUE = 1000


class Changes:
    """What a gathered stream has not yet told its client: the kinds of the changes since its
    last message and how many. The hub adds to it in O(1) per event, however fast they come:
    no queue grows while the stream waits out its gap."""

    def __init__(self) -> None:
        self.kinds: set[str] = set()
        self.count = 0
        self.sequence = 0  # the hub's count of events when the last one was added
        self.closed = False
        self.arrived = asyncio.Event()

    def add(self, event: Event, sequence: int) -> None:
        self.kinds.add(event.kind.value)
        self.count += 1
        self.sequence = sequence
        self.arrived.set()

    def close(self) -> None:
        self.closed = True
        self.arrived.set()

    def take(self) -> dict[str, Any]:
        taken = {"kinds": sorted(self.kinds), "events": self.count, "seq": self.sequence}
        self.kinds, self.count = set(), 0
        self.arrived.clear()
        return taken


class EventHub:
    def __init__(self, queue: Queue):
        self.queue = queue
        # Each subscriber's queue and the kinds it takes (None: every kind).
        self._subscribers: dict[asyncio.Queue[Event | None], frozenset[EventKind] | None] = {}
        self._gathered: set[Changes] = set()
        self._received = 0
        self._listener: Listener | None = None
        self._wanted: set[str] | None = set()  # the kinds anyone takes now; None: every kind
        self._task: asyncio.Task | None = None
        self._ready: asyncio.Event | None = None

    @property
    def subscribers(self) -> int:
        return len(self._subscribers) + len(self._gathered)

    @property
    def sequence(self) -> int:
        """Events received so far, those nobody took among them: a view rendered after
        reading it shows every change told with a number up to it (the dashboard's shared
        board fragment relies on it)."""
        return self._received + (self._listener.passed if self._listener is not None else 0)

    def _wants(self, kind: str) -> bool:
        return self._wanted is None or kind in self._wanted

    def _taken_changed(self) -> None:
        if self._gathered or None in self._subscribers.values():
            self._wanted = None
            return
        self._wanted = {kind.value for kinds in self._subscribers.values()
                        for kind in kinds or ()}

    async def start(self) -> None:
        """Listen from now on (in the API's loop); returns once the listener is open."""
        self._ready = asyncio.Event()
        self._task = asyncio.create_task(self._pump(), name="api-events")
        await asyncio.wait([self._task, asyncio.create_task(self._ready.wait())],
                           return_when=asyncio.FIRST_COMPLETED)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        for queue in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)  # ends the stream
        for changes in list(self._gathered):
            changes.close()

    async def _pump(self) -> None:
        async with metric_ops.listen(self.queue) as events:
            assert self._ready is not None
            events.wanted = self._wants
            self._listener = events
            self._ready.set()
            async for event in events:
                self._received += 1
                for queue, kinds in list(self._subscribers.items()):
                    if kinds is None or event.kind in kinds:
                        with contextlib.suppress(asyncio.QueueFull):
                            queue.put_nowait(event)
                sequence = self.sequence
                for changes in list(self._gathered):
                    changes.add(event, sequence)

    @contextlib.contextmanager
    def subscribe(self, kinds: frozenset[EventKind] | None = None) -> Any:
        """A queue of the events from now on, of `kinds` only when given."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._subscribers[queue] = kinds
        self._taken_changed()
        try:
            yield queue
        finally:
            self._subscribers.pop(queue, None)
            self._taken_changed()


    @contextlib.contextmanager
    def gather(self) -> Any:
        changes = Changes()
        self._gathered.add(changes)
        self._taken_changed()
        try:
            yield changes
        finally:
            self._gathered.discard(changes)
            self._taken_changed()


class SharedBoard:
    """The board's fragment, the same for every viewer (it shows no action and no secret),
    rendered once for the many dashboards that fetch it on the same change. A page asks with
    the number of the last change it was told (`seen`); the fragment serves it if rendered
    after that change reached this server, and is at most MAX_AGE old (its elapsed times)."""

    MAX_AGE = 1.0

    def __init__(self) -> None:
        self.sequence, self.html, self.rendered_at = -1, "", float("-inf")

    def serves(self, seen: int, now: float) -> bool:
        return self.sequence >= seen and now - self.rendered_at < self.MAX_AGE

    def keep(self, sequence: int, html: str, now: float) -> None:
        if sequence >= self.sequence:
            self.sequence, self.html, self.rendered_at = sequence, html, now
