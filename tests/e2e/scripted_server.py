"""What the fake API servers share: a thread-hosted HTTP server on 127.0.0.1
that records every request and lets a test wait for them without sleeping.

A fake subclasses `ScriptedServer` and implements `respond(request, reply)`;
`Reply` hides the HTTP details (JSON bodies, SSE streams, hanging, cutting
the connection) so a fake only says what to answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass
class RecordedRequest:
    """One request as the fake saw it; headers are keyed in lower case."""

    method: str
    path: str  # without the query string
    query: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw bytes when the body is not JSON
    # Set by the fake: which scripted step answered it (None: not scripted).
    step: int | None = None
    notes: list[str] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class ClientWentAway(Exception):
    """The client closed the connection while we were still writing."""


class Reply:
    """The writing side of one exchange, handed to `ScriptedServer.respond`."""

    def __init__(self, handler: BaseHTTPRequestHandler, release: threading.Event):
        self._handler = handler
        self._release = release

    def json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self._start(status, "application/json", headers, content_length=len(body))
        if self._handler.command != "HEAD":  # Claude Code sends `HEAD /` at start-up
            self._write(body)

    def start_sse(self, headers: dict[str, str] | None = None) -> None:
        # No content-length and `Connection: close`: the end of the stream is
        # the end of the connection, which is the simplest framing every
        # client understands (and lets a test cut the stream at any byte).
        self._start(200, "text/event-stream", {"cache-control": "no-cache", **(headers or {})})

    def sse(self, data: Any, event: str | None = None) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        frame = (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
        self._write(frame.encode())

    def hang(self) -> None:
        """Send nothing more but keep the connection open until the server
        stops: what a stalled upstream looks like to the client."""
        self._release.wait()

    def cut(self) -> None:
        """Drop the connection now, mid-response."""
        self._handler.close_connection = True
        try:
            self._handler.connection.shutdown(2)
        except OSError:
            pass

    def _start(
        self,
        status: int,
        content_type: str,
        headers: dict[str, str] | None,
        content_length: int | None = None,
    ) -> None:
        handler = self._handler
        handler.send_response(status)
        handler.send_header("content-type", content_type)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        if content_length is None:
            handler.send_header("connection", "close")
            handler.close_connection = True
        else:
            handler.send_header("content-length", str(content_length))
        handler.end_headers()

    def _write(self, data: bytes) -> None:
        try:
            self._handler.wfile.write(data)
            self._handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError) as error:
            raise ClientWentAway() from error


class ScriptedServer:
    """Base of the fakes: start/stop, request log, waiting on conditions."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._changed = threading.Condition()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- to implement -----------------------------------------------------
    def respond(self, request: RecordedRequest, reply: Reply) -> None:
        raise NotImplementedError

    # -- lifecycle --------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() the server first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self, port: int = 0) -> ScriptedServer:
        """Listen on `port` (0: any free one); a stopped fake started again on its old port
        is a gateway back from a restart."""
        self._release.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        # A short poll interval: stop() waits up to one interval, per test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=type(self).__name__, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()  # lets hanging streams end
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- observing --------------------------------------------------------
    def wait_for(self, condition: Callable[[], Any], timeout: float) -> Any:
        """Wait until `condition()` is truthy (re-checked on every request);
        returns its value, or raises TimeoutError with the request log."""
        with self._changed:
            result = self._changed.wait_for(condition, timeout=timeout)
        if not result:
            seen = [f"{r.method} {r.path} step={r.step}" for r in self.requests]
            raise TimeoutError(
                f"{type(self).__name__}: condition not met in {timeout}s; requests so far: {seen}"
            )
        return result

    def _record(self, request: RecordedRequest) -> None:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()

    def notify_changed(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def handle(self) -> None:
                # A client that drops a kept-alive connection is normal here
                # (the CLI does it when killed); not a traceback in the test log.
                try:
                    super().handle()
                except (ConnectionResetError, BrokenPipeError):
                    pass

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                url = urlsplit(self.path)
                request = RecordedRequest(
                    method=self.command,
                    path=url.path,
                    query=url.query,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                fake._record(request)
                try:
                    fake.respond(request, Reply(self, fake._release))
                except ClientWentAway:
                    self.close_connection = True
                finally:
                    fake.notify_changed()

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _handle

        return Handler
