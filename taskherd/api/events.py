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
import functools
import json
import logging
from collections.abc import AsyncIterator
from datetime import tzinfo
from typing import TYPE_CHECKING, Any

from taskherd.api.app import ApiError
from taskherd.api.fanout import Changes, EventHub
from taskherd.model import Event
from taskherd.policy.timefmt import with_iso

if TYPE_CHECKING:
    from taskherd.api.app import Api

log = logging.getLogger("taskherd.api")

KEEPALIVE = 15.0  # a comment line this often keeps proxies from closing an idle stream
KEEPALIVE_LINE = b": keepalive\n\n"
LOG_POLL = 0.25  # a log file has no event of its own: it is looked at this often
LOG_CHUNK = 64 * 1024
LOG_BEHIND = 1 << 20  # further behind a log's end than this, its stream jumps to the end
BATCH = 100  # events a stream sends in one write at most
GATHER_MIN, GATHER_MAX = 0.1, 60.0  # seconds between two messages of a gathered stream


def sse(event: str, data: Any, event_id: int | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    lines += [f"data: {line}" for line in text.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


@functools.lru_cache(maxsize=256)
def encoded(event: Event, zone: tzinfo | None = None) -> bytes:
    """An event as its message, made once for every stream that sends it (twenty streams
    open: one JSON encoding, not twenty). `at` stays unix seconds; `at_iso` is beside it, in
    `zone` (the fleet's; taskherd.policy.timefmt)."""
    return sse(event.kind.value, with_iso(json.loads(event.to_json()), zone))


async def event_stream(hub: EventHub, zone: tzinfo | None = None) -> AsyncIterator[bytes]:
    """Every committed change as `event: <kind>` with the event's JSON, until the client
    goes away. The events waiting when the stream is next written go out in one write."""
    with hub.subscribe() as queue:
        yield b"retry: 1000\n\n"
        yield sse("hello", {"subscribers": hub.subscribers})
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), KEEPALIVE)
            except TimeoutError:
                yield KEEPALIVE_LINE
                continue
            messages = []
            while event is not None:
                messages.append(encoded(event, zone))
                if queue.empty() or len(messages) >= BATCH:
                    break
                event = queue.get_nowait()
            if messages:
                yield b"".join(messages)
            if event is None:
                return


async def gathered_stream(hub: EventHub, seconds: float) -> AsyncIterator[bytes]:
    """`event: changed` at most once every `seconds`, naming the kinds of the changes since
    the last one and the number of the last (`seq`, counted by this server): what a page
    that fetches its view again on any change needs. A busy fleet commits hundreds of
    changes a second: twenty dashboards on the full stream are that many messages written
    by the daemon's process twenty times over, and as many wake-ups of each browser."""
    with hub.gather() as changes:
        yield b"retry: 1000\n\n"
        yield sse("hello", {"subscribers": hub.subscribers, "gather": seconds})
        async for change in gathered(changes, seconds):
            yield KEEPALIVE_LINE if change is None else sse("changed", change)


async def gathered(changes: Changes, seconds: float) -> AsyncIterator[dict[str, Any] | None]:
    """What `changes` (from `EventHub.gather`) holds, taken together at most once every
    `seconds` (None: nothing changed for KEEPALIVE seconds, time for a keepalive). The
    first change after a quiet spell comes at once; later ones wait out the gap."""
    loop = asyncio.get_running_loop()
    told_at = -seconds
    while True:
        try:
            await asyncio.wait_for(changes.arrived.wait(), KEEPALIVE)
        except TimeoutError:
            yield None
            continue
        gap = told_at + seconds - loop.time()
        if gap > 0:
            await asyncio.sleep(gap)
        if changes.closed:
            return
        told_at = loop.time()
        yield changes.take()


def gather_seconds(text: str | None) -> float | None:
    """The `gather` parameter of /v1/events: None (every event), else 0.1 to 60 seconds."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not GATHER_MIN <= seconds <= GATHER_MAX:  # NaN and infinities fail this too
        raise ApiError(400, f"gather = {text!r}: expected seconds from {GATHER_MIN:g} to "
                            f"{GATHER_MAX:g}", "gather")
    return seconds


async def log_stream(api: Api, run_id: int, lines: int) -> AsyncIterator[bytes]:
    """The last `lines` lines of a run's log, then what is appended, as `event: log`
    messages, until the run has ended and everything it wrote was sent (`event: end`)."""
    from taskherd.host.logfile import LogCursor
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
        cursor = LogCursor.at(log_file, log_file.tell())
        checked = 0.0
        ended = run.ended_at is not None
        loop = asyncio.get_running_loop()
        while True:
            # Far behind a chatty agent, the page jumps to its latest output: a browser is sent
            # what a person can read, not every byte.
            chunk = await api.run(cursor.read, log_file, LOG_CHUNK, LOG_BEHIND)
            if chunk.skipped:
                decoder.reset()
                yield sse("log", {"text": f"\n[… {chunk.skipped} bytes not shown]\n"})
            if chunk.data:
                yield sse("log", {"text": decoder.decode(chunk.data)})
                continue
            if chunk.busy:  # its shim is cutting it: a few milliseconds
                await asyncio.sleep(LOG_POLL / 10)
            if chunk.busy or chunk.skipped:
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
