"""Serving the app: uvicorn on a thread of its own, with its own event loop and its own
store connection, so nothing the API does (a page of a million tasks, twenty dashboards on
the event stream) runs on the daemon's loop that claims and spawns.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from taskherd.config import Config, is_loopback

log = logging.getLogger("taskherd.api")


class ApiServer:
    def __init__(self, config: Config, *, clock: Callable[[], float] = time.time,
                 services: Callable[[], dict[str, Any]] | None = None,
                 port: int | None = None):
        self.config = config
        self.clock = clock
        self.services = services
        self.port = port if port is not None else config.api.port
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.config.api.tls_cert else "http"
        host = self.config.api.host
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Serve from a new thread; returns once it listens (or raises why it cannot)."""
        import uvicorn

        from taskherd.api.app import Api
        from taskherd.api.asgi import build_app
        from taskherd.store import open_store

        api = self.config.api
        store = open_store(self.config.daemon.database, durability=self.config.daemon.durability)
        self.api = Api(self.config, store, self.clock, services=self.services)
        settings = uvicorn.Config(
            build_app(self.api), host=api.host, port=self.port, log_level="warning",
            access_log=False,  # a URL may carry a cursor; a header a token: no access log
            ssl_certfile=api.tls_cert, ssl_keyfile=api.tls_key, lifespan="on",
            timeout_graceful_shutdown=2, server_header=False, loop="asyncio", http="h11")
        self._server = uvicorn.Server(settings)
        self._thread = threading.Thread(target=self._serve, name="taskherd-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if self._failed is not None or not self._thread.is_alive():
                store.close()
                raise OSError(f"the API could not listen on {self.url}: "
                              f"{self._failed or 'see the log above'}")
            if time.monotonic() > deadline:
                raise OSError(f"the API did not start listening on {self.url} in {timeout:g}s")
            time.sleep(0.01)
        if self.port == 0:  # a free port the system chose (tests)
            self.port = self._server.servers[0].sockets[0].getsockname()[1]
        if not is_loopback(api.host):
            log.warning("the API listens on %s, reachable from other machines", self.url)
        log.info("API and dashboard at %s", self.url)

    def _serve(self) -> None:
        try:
            asyncio.run(self._server.serve())
        except BaseException as error:  # noqa: BLE001 - reported by start() or stop()
            self._failed = error
        finally:
            if getattr(self, "api", None) is not None:
                self.api.store.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
