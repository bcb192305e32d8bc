"""The API in a process of its own, which the daemon starts, watches and stops.

The daemon binds [api] listen itself (a port taken stops `taskherd up` before anything runs,
and the port stays the daemon's while the server process is started again) and hands the
socket to a child process, `python -m taskherd.api.process`, along with one end of a socket
pair: the link. Over the link the child gets the daemon's config (pickled: the settings the
daemon runs with, not the file as it may have been edited since), says when it serves, and
asks for what only the daemon knows, the counts of its services for /metrics. The child has
its own store connection and its own interpreter: twenty dashboards rendering pages never
hold the lock the daemon's loop needs to spawn agents.

A child that dies is started again (after 1 s, doubling to 30 s while it keeps dying); a
daemon that dies closes the link, and its child stops at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import json
import logging
import os
import pickle
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from taskherd.model.settings import Config

log = logging.getLogger("taskherd.api")

READY_TIMEOUT = 60.0  # importing the app and opening the store, on a loaded machine
ASK_TIMEOUT = 2.0
RESTART_FIRST, RESTART_MAX = 1.0, 30.0
STEADY = 60.0  # a child that served this long is healthy again: the next restart is quick
STOP_GRACE = 10.0


class ApiProcess:
    """The daemon's side: the listening socket, the child, its link, its restarts."""

    def __init__(self, config: Config, services: Callable[[], dict[str, Any]],
                 port: int | None = None):
        self.config, self.services = config, services
        self.port = port if port is not None else config.api.port
        self.restarts = 0
        self._sock: socket.socket | None = None
        self._child: asyncio.subprocess.Process | None = None
        self._link: asyncio.StreamWriter | None = None
        self._answering: asyncio.Task | None = None
        self._watching: asyncio.Task | None = None
        self._stopping = False

    @property
    def url(self) -> str:
        from taskherd.api.server import url_of

        return url_of(self.config.api, self.port)

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    async def start(self) -> None:
        """Bind, start the child and return once it serves; OSError says why it cannot."""
        from taskherd.api.server import announce, bind

        self._sock = bind(self.config.api, self.port)
        self.port = self._sock.getsockname()[1]
        try:
            await self._spawn()
        except BaseException:
            self._sock.close()
            raise
        announce(self.config.api, self.url)
        self._watching = asyncio.create_task(self._watch(), name="api-process")

    async def _spawn(self) -> None:
        assert self._sock is not None
        if self._link is not None:  # the link of a child that died
            self._link.close()
        ours, theirs = socket.socketpair()
        level = str(logging.getLogger().getEffectiveLevel())
        try:
            # A session of its own: a Ctrl-C at the terminal stops the daemon, which stops
            # the child in its turn, rather than both at once and the daemon restarting it.
            self._child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "taskherd.api.process", str(theirs.fileno()),
                str(self._sock.fileno()), level, pass_fds=(theirs.fileno(), self._sock.fileno()),
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
        finally:
            theirs.close()
        reader, self._link = await asyncio.open_unix_connection(sock=ours)
        config = base64.b64encode(pickle.dumps(self.config)).decode()
        self._link.write(json.dumps({"config": config}).encode() + b"\n")
        try:
            line = await asyncio.wait_for(reader.readline(), READY_TIMEOUT)
        except TimeoutError:
            line = b""
        if json.loads(line or b"{}").get("serving") is not True:
            await self._end_child()
            raise OSError(f"the API process did not start serving on {self.url} (status "
                          f"{self._child.returncode}; its reason is in the log above)")
        self._answering = asyncio.create_task(self._answer(reader, self._link))

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The child's questions: only the services' counts, for a scrape of /metrics."""
        while line := await reader.readline():
            if json.loads(line).get("ask") == "services":
                try:
                    services = self.services()
                except Exception:  # a scrape without them, not a stop of the link
                    log.exception("the services' counts for /metrics")
                    services = {}
                writer.write(json.dumps({"services": services}).encode() + b"\n")

    async def _watch(self) -> None:
        """Start the child again whenever it ends, unless the daemon is stopping."""
        wait = RESTART_FIRST
        while True:
            assert self._child is not None
            started = time.monotonic()
            status = await self._child.wait()
            if self._stopping:
                return
            if time.monotonic() - started >= STEADY:
                wait = RESTART_FIRST
            log.warning("the API process (pid %s) ended with status %s: starting it again in "
                        "%g s", self._child.pid, status, wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, RESTART_MAX)
            try:
                await self._spawn()
            except OSError as error:
                log.error("%s", error)
                continue
            self.restarts += 1
            log.info("the API process serves again (pid %s)", self._child.pid)

    async def stop(self) -> None:
        self._stopping = True
        if self._watching is not None:
            self._watching.cancel()
            with contextlib.suppress(BaseException):
                await self._watching
        await self._end_child()
        if self._sock is not None:
            self._sock.close()

    async def _end_child(self) -> None:
        if self._answering is not None:
            self._answering.cancel()
        if self._link is not None:
            self._link.close()
        child = self._child
        if child is None or child.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
        try:
            await asyncio.wait_for(child.wait(), STOP_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()


# -- the child ---------------------------------------------------------------------------------


class DaemonLink:
    """The child's side of the link: asks the daemon for its services' counts (from any
    thread), and stops the server when the daemon is gone."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()

    async def ask(self) -> dict[str, Any]:
        async with self._lock:
            self.writer.write(b'{"ask":"services"}\n')
            line = await self.reader.readline()
        return json.loads(line or b"{}").get("services", {})

    def services(self) -> dict[str, Any]:
        """For /metrics, from the thread the scrape runs in: {} if the daemon is slow."""
        try:
            return asyncio.run_coroutine_threadsafe(self.ask(), self.loop).result(ASK_TIMEOUT)
        except Exception as error:  # noqa: BLE001 - a scrape without them, not a failure
            log.warning("the daemon did not give its services' counts: %s", error)
            return {}


async def serve_child(link_fd: int, listen_fd: int) -> None:
    from taskherd.api.server import build_server

    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=link_fd))
    config: Config = pickle.loads(base64.b64decode(json.loads(await reader.readline())["config"]))
    link = DaemonLink(reader, writer)
    server, api = build_server(config, time.time, link.services, autocheckpoint=False)
    listening = socket.socket(fileno=listen_fd)
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        while not server.started:
            if serving.done():
                await serving  # its error, in the log the daemon shares
                return
            await asyncio.sleep(0.01)
        # What start-up made (the app, its modules) lives as long as the process: frozen out
        # of the collector's reach, a full collection no longer walks it in a request's time.
        gc.freeze()
        writer.write(b'{"serving":true}\n')
        # The link stays quiet but for the answers `ask` reads: the daemon gone closes it.
        # (Reading here would race `ask`; watching the parent is enough.)
        parent = os.getppid()
        while not serving.done():
            if os.getppid() != parent or writer.is_closing():
                log.warning("the daemon is gone: the API process stops")
                server.should_exit = True
                break
            await asyncio.sleep(0.5)
        await serving
    finally:
        api.store.close()


def main(argv: list[str]) -> int:
    link_fd, listen_fd, level = int(argv[0]), int(argv[1]), int(argv[2])
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve_child(link_fd, listen_fd))
    except SystemExit as stopped:  # uvicorn's way of saying it could not start
        return int(stopped.code or 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
