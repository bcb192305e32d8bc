"""Server-sent events: the store's event channel fanned out to every open stream, and a
run's log followed as it grows.

One listener per API process (`Store.listen`), however many dashboards are open: each
stream gets a bounded queue of its own, and one too slow to read loses events rather than
holding up the others (an event is a hint; a page that missed one reloads its data at the
next).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from taskherd.model import Event

if TYPE_CHECKING:
    from taskherd.api.app import Api
    from taskherd.store import Store

log = logging.getLogger("taskherd.api")

KEEPALIVE = 15.0  # a comment line this often keeps proxies from closing an idle stream
SUBSCRIBER_QUEUE = 1000
LOG_POLL = 0.25  # a log file has no event of its own: it is looked at this often
LOG_CHUNK = 64 * 1024


class EventHub:
    def __init__(self, store: Store):
        self.store = store
        self._subscribers: set[asyncio.Queue[Event | None]] = set()
        self._task: asyncio.Task | None = None
        self._ready: asyncio.Event | None = None

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

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

    async def _pump(self) -> None:
        async with self.store.listen() as events:
            assert self._ready is not None
            self._ready.set()
            async for event in events:
                for queue in list(self._subscribers):
                    with contextlib.suppress(asyncio.QueueFull):
                        queue.put_nowait(event)

    @contextlib.contextmanager
    def subscribe(self) -> Any:
        queue: asyncio.Queue[Event | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)


def sse(event: str, data: Any, event_id: int | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    lines += [f"data: {line}" for line in text.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


async def event_stream(hub: EventHub) -> AsyncIterator[bytes]:
    """Every committed change as `event: <kind>` with the event's JSON, until the client
    goes away."""
    with hub.subscribe() as queue:
        yield b"retry: 1000\n\n"
        yield sse("hello", {"subscribers": hub.subscribers})
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), KEEPALIVE)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            if event is None:
                return
            yield sse(event.kind.value, event.to_json())


async def log_stream(api: Api, run_id: int, lines: int) -> AsyncIterator[bytes]:
    """The last `lines` lines of a run's log, then what is appended, as `event: log`
    messages, until the run has ended and everything it wrote was sent (`event: end`)."""
    from taskherd.ops import logs as log_ops
    from taskherd.ops import runs as run_ops

    run = await api.run(run_ops.get_run, api.queue, run_id)
    while run.log_path is None and run.ended_at is None:
        await asyncio.sleep(LOG_POLL)
        run = await api.run(run_ops.get_run, api.queue, run_id)
    log_file = await api.run(log_ops.open_log, api.queue, run)
    # A character split between two reads is decoded whole, once its last byte is read.
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    with log_file:
        text = await api.run(log_ops.tail, log_file, lines)
        if text:
            yield sse("log", {"text": decoder.decode(text)})
        checked = 0.0
        ended = run.ended_at is not None
        loop = asyncio.get_running_loop()
        while True:
            chunk = await api.run(log_file.read, LOG_CHUNK)
            if chunk:
                yield sse("log", {"text": decoder.decode(chunk)})
                continue
            if ended:
                yield sse("end", {"run_id": run_id})
                return
            if loop.time() - checked >= 1.0:
                checked = loop.time()
                # Read again after learning it ended: what it wrote before is still sent.
                ended = (await api.run(run_ops.get_run, api.queue, run_id)).ended_at is not None
                continue
            await asyncio.sleep(LOG_POLL)
