"""Events after commit: how a store tells listeners in other processes what just changed.

SQLite carries them across the processes of one host: every listener binds a UNIX datagram
socket in a private folder derived from the database path, and a writer sends each listener
a small JSON datagram once its transaction committed. Sending never blocks the writer and
nobody acknowledges: a listener that is gone (its socket file left behind by kill -9) refuses
the datagram and its socket file is removed; one too slow to read loses events, which is
fine because an event is a hint (the daemon still polls).

PostgreSQL carries them across nodes with NOTIFY (see `postgres.py`): the server delivers
a notification at commit and drops it with a rollback.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from taskherd.model import Event

if TYPE_CHECKING:
    import asyncio

MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS; keep a margin
SOCKET_SUFFIX = ".sock"
# A listener's name: pid and a random part, so two listeners of one process never collide.
_NAME_LENGTH = len("4194304-0123456789ab.sock")
RELIST_NS = 1_000_000_000
QUEUE_LIMIT = 10_000  # events a listener holds unread before it drops new ones
DATAGRAM_BYTES = 16_384  # events packed into one datagram, at most (an event is ~150 bytes)


def socket_dir(database: str | os.PathLike[str]) -> Path:
    """The folder of the listeners of a SQLite database: beside the file when its path is
    short enough for a socket address, else a short private folder named by its hash."""
    path = os.path.realpath(database)
    beside = Path(f"{path}.events")
    if len(str(beside)) + 1 + _NAME_LENGTH <= MAX_SOCKET_PATH:
        return beside
    # Imported here, for a long path only: every store opens this, and the two cost a
    # command's start more than the rest of this module.
    import hashlib
    import tempfile

    digest = hashlib.sha256(path.encode()).hexdigest()[:16]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "taskherd" if runtime else Path(
        tempfile.gettempdir()) / f"taskherd-{os.getuid()}"
    return base / digest


def _make_private(folder: Path) -> None:
    """Create `folder` for its owner only; in a shared place (/tmp) its parent too, refusing
    one another user made or a symlink planted in its place."""
    if not folder.name.endswith(".events"):  # the short fallback: .../taskherd[-UID]/HASH
        folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_private(folder.parent)
    folder.mkdir(mode=0o700, exist_ok=True)
    _check_private(folder)


def _check_private(folder: Path) -> None:
    info = os.lstat(folder)
    if os.path.islink(folder) or not os.path.isdir(folder) or info.st_uid != os.getuid():
        raise OSError(f"{folder} is not a folder of this user: no events are received there")
    if info.st_mode & 0o077:
        os.chmod(folder, 0o700)


_listings: dict[str, tuple[int, list[str]]] = {}


def _listeners(folder: str) -> list[str]:
    """The socket names in `folder`, listed again only when the folder changed: a stat costs a
    tenth of a listing, and every commit asks.

    A folder changed within the last second is listed anyway, since its mtime may be too
    coarse to show a listener that arrived just after the previous listing.
    """
    try:
        changed = os.stat(folder).st_mtime_ns
    except OSError:
        return []  # no folder: nobody has ever listened
    cached = _listings.get(folder)
    if cached is not None and cached[0] == changed and time.time_ns() - changed > RELIST_NS:
        return cached[1]
    try:
        names = [name for name in os.listdir(folder) if name.endswith(SOCKET_SUFFIX)]
    except OSError:
        return []
    _listings[folder] = (changed, names)
    return names


def publish(folder: str, events: Iterable[Event]) -> None:
    """Send `events` to every listener in `folder`; never blocks, never raises for a listener.
    The events are read only when someone listens: most commits have nobody to tell."""
    names = _listeners(folder)
    if not names:
        return
    datagrams = _packed(event.to_json().encode() for event in events)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for name in names:
            address = os.path.join(folder, name)
            for datagram in datagrams:
                try:
                    sock.sendto(datagram, address)
                except (ConnectionRefusedError, FileNotFoundError):
                    # Its listener died without removing its socket (kill -9).
                    with contextlib.suppress(OSError):
                        os.unlink(address)
                    break
                except OSError:
                    break  # its buffer is full (a slow reader): it loses these hints


def _packed(encoded: Iterable[bytes]) -> list[bytes]:
    """Events as datagrams, several to one as lines up to DATAGRAM_BYTES: a listener's socket
    queues only a few datagrams (net.unix.max_dgram_qlen, 10 by default) and refuses the rest,
    so a batch's events (the API's, told together) sent one a datagram were lost past ten."""
    datagrams: list[bytes] = []
    lines: list[bytes] = []
    size = 0
    for line in encoded:
        if lines and size + len(line) > DATAGRAM_BYTES:
            datagrams.append(b"\n".join(lines))
            lines, size = [], 0
        lines.append(line)
        size += len(line) + 1
    if lines:
        datagrams.append(b"\n".join(lines))
    return datagrams


def _drain(sock: socket.socket, listener: Listener) -> None:
    """Every datagram waiting on `sock` as events on the listener's queue, in one wake-up of
    the loop; an event of a kind its `wanted` refuses is counted in its `passed`, not decoded.

    asyncio's datagram transport reads one datagram a wake-up: a writer committing a burst
    (the API's store thread answers a dozen requests at once) woke the listening loop once
    per commit, and the loop's many wake-ups took the interpreter lock from the thread doing
    the work (POST /v1/tasks: ~40 % more CPU a request with the API's own listener open).
    asyncio is not imported here: publishing (every CLI write) needs only a socket.
    """
    queue, wanted = listener._queue, listener.wanted
    while True:
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return  # closed meanwhile: the listener is stopping
        for line in data.split(b"\n"):  # one event a line (JSON escapes its own newlines)
            if wanted is not None:
                kind = Event.kind_of(line)
                if kind is not None and not wanted(kind):
                    listener.passed += 1
                    continue
            try:
                event = Event.from_json(line)
            except (ValueError, KeyError, TypeError):
                import logging

                logging.getLogger(__name__).warning(
                    "ignored a malformed event datagram: %r", line[:200])
                continue
            if not queue.full():  # a listener too slow to read loses hints, as a full socket
                queue.put_nowait(event)


class Listener:
    """Events as an async iterator, opened as an async context manager (which closes it):

        async with store.listen() as events:
            async for event in events: ...

    `async for event in store.listen()` works too and opens it at the first step.
    """

    def __init__(self) -> None:
        import asyncio

        self._queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_LIMIT)
        self._open = False
        # The kinds its reader wants now (None: every kind). A listener that can read an
        # event's kind before decoding it (a socket's) passes over the rest, counting them:
        # an API adding tasks by the thousand read each of its own task_added back, ~15 µs
        # on its loop, for metrics that want runs' events alone. A hint, not a filter: a
        # PostgreSQL listener delivers every kind.
        self.wanted: Callable[[str], bool] | None = None
        self.passed = 0

    async def _start(self) -> None:
        raise NotImplementedError

    async def _stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        if not self._open:
            await self._start()
            self._open = True
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            await self._stop()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        if not self._open:
            await self.__aenter__()
        return await self._queue.get()


class SocketListener(Listener):
    """A listener of a SQLite database: a datagram socket of its own in the database's folder."""

    def __init__(self, folder: Path):
        super().__init__()
        self.folder = folder
        self.path = folder / f"{os.getpid()}-{os.urandom(6).hex()}{SOCKET_SUFFIX}"
        self._socket: socket.socket | None = None

    async def _start(self) -> None:
        _make_private(self.folder)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(str(self.path))
            os.chmod(self.path, 0o600)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        import asyncio

        asyncio.get_running_loop().add_reader(sock.fileno(), _drain, sock, self)
        self._socket = sock

    async def _stop(self) -> None:
        if self._socket is not None:
            import asyncio

            asyncio.get_running_loop().remove_reader(self._socket.fileno())
            self._socket.close()
            self._socket = None
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def listening(database: str | os.PathLike[str]) -> int:
    """How many listeners have a socket for this SQLite database (a daemon is one of them)."""
    try:
        return sum(1 for name in os.listdir(socket_dir(database)) if name.endswith(SOCKET_SUFFIX))
    except OSError:
        return 0
