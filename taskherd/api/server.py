"""Serving the app with uvicorn over its own store connection.

`taskherd up` serves it from a process of its own (`process.ApiProcess`): nothing the API
does (a page of a million tasks, twenty dashboards on the event stream, a burst of
heartbeats) holds the daemon's interpreter lock or runs on the loop that claims and spawns.
`ApiServer` serves it from a thread of the current process instead: what the tests use, and
what a daemon started without a config file falls back to.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from taskherd.config.tables import is_loopback
from taskherd.model.settings import ApiConfig, Config

log = logging.getLogger("taskherd.api")


def url_of(api: ApiConfig, port: int) -> str:
    scheme = "https" if api.tls_cert else "http"
    shown = f"[{api.host}]" if ":" in api.host else api.host
    return f"{scheme}://{shown}:{port}"


def bind(api: ApiConfig, port: int | None = None) -> socket.socket:
    """The listening socket of [api] listen (`port` instead of its port, if given): opened
    by whoever starts the server, so a port taken is known at once and stays ours while the
    server process is started again."""
    host = api.host
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, api.port if port is None else port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        shown = url_of(api, api.port if port is None else port)
        raise OSError(f"the API could not listen on {shown}: {error.strerror or error}") from None
    return sock


def http_protocol() -> str:
    """httptools (the `fast` extra) parses HTTP in C; h11, pure Python, otherwise."""
    import importlib.util

    return "httptools" if importlib.util.find_spec("httptools") else "h11"


def build_server(config: Config, clock: Callable[[], float],
                 services: Callable[[], dict[str, Any]] | None,
                 autocheckpoint: bool = True) -> tuple[Any, Any]:
    """(the uvicorn server of the app, the app's shared state), over a new store connection.
    `autocheckpoint` False when the daemon checkpoints the WAL (its own thread, every few
    seconds): a commit of the API then never pays for copying the log into the database."""
    import uvicorn

    from taskherd.api.app import Api
    from taskherd.api.asgi import build_app
    from taskherd.store import open_store

    settings = config.api
    store = open_store(config.daemon.database, durability=config.daemon.durability,
                       autocheckpoint=autocheckpoint)
    api = Api(config, store, clock, services=services)
    uvicorn_config = uvicorn.Config(
        build_app(api), log_level="warning",
        access_log=False,  # a URL may carry a cursor; a header a token: no access log
        ssl_certfile=settings.tls_cert, ssl_keyfile=settings.tls_key, lifespan="on",
        timeout_graceful_shutdown=2, server_header=False, loop="asyncio",
        # uvicorn would believe X-Forwarded-For from any local process: a client's address
        # is read by `Api.client_address`, from [api] trusted_proxies only.
        proxy_headers=False,
        http=http_protocol())
    return uvicorn.Server(uvicorn_config), api


class ApiServer:
    """The app served from a thread of this process (tests; a daemon with no config file)."""

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
        return url_of(self.config.api, self.port)

    def start(self, timeout: float = 30.0) -> None:
        """Serve from a new thread; returns once it listens (or raises why it cannot)."""
        sock = bind(self.config.api, self.port)
        self.port = sock.getsockname()[1]  # the one the system chose for port 0 (tests)
        self._server, self.api = build_server(self.config, self.clock, self.services)
        self._thread = threading.Thread(target=self._serve, args=(sock,), name="taskherd-api",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if self._failed is not None or not self._thread.is_alive():
                raise OSError(f"the API could not serve on {self.url}: "
                              f"{self._failed or 'see the log above'}")
            if time.monotonic() > deadline:
                raise OSError(f"the API did not start serving on {self.url} in {timeout:g}s")
            time.sleep(0.01)
        announce(self.config.api, self.url)

    def _serve(self, sock: socket.socket) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[sock]))
        except BaseException as error:  # noqa: BLE001 - reported by start() or stop()
            self._failed = error
        finally:
            sock.close()
            self.api.store.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)


def announce(api: ApiConfig, url: str) -> None:
    if not is_loopback(api.host):
        log.warning("the API listens on %s, reachable from other machines", url)
    log.info("API and dashboard at %s", url)
