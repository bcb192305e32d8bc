"""A real S3-compatible server for tests: moto's standalone server (from PyPI) on 127.0.0.1 and
a free port, as a subprocess; and a TCP relay in front of it that a test can take away and
bring back, as a network outage would (the server keeps what it stored meanwhile).

tests/conftest.py loads it as a plugin, so any test may ask for `s3`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "taskherd-test", "AWS_SECRET_ACCESS_KEY": "taskherd-secret",
               "AWS_DEFAULT_REGION": "us-east-1"}
START_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class S3Server:
    """moto's server as its own process; `kill()` and `start()` again on the same port."""

    def __init__(self, log: Path, port: int | None = None):
        self.port = port or free_port()
        self.log = log
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=log, env={**os.environ, **CREDENTIALS})
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()[-2000:]
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(self.url, timeout=1)
                return
            time.sleep(0.05)
        raise AssertionError(f"moto server did not answer in {START_TIMEOUT_S}s")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])

    def bucket(self, name: str) -> str:
        with contextlib.suppress(Exception):
            self.client().create_bucket(Bucket=name)
        return name


class Relay:
    """127.0.0.1:port → the server. `go_away()` resets every connection and stops listening
    (clients get connection refused); `come_back()` listens again on the same port.
    `freeze()` makes it a server that hangs: connections are still accepted, and nothing
    passes either way until `thaw()`."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thawed = threading.Event()
        self._thawed.set()
        self.come_back()

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def come_back(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def go_away(self) -> None:
        with self._lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    # SO_LINGER 0: a reset, as a vanished server's host would send.
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00"
                                    b"\x00\x00\x00\x00")
                    conn.close()
            self._connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._connections += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        with selectors.DefaultSelector() as selector:
            try:
                selector.register(a, selectors.EVENT_READ, b)
                selector.register(b, selectors.EVENT_READ, a)
                while True:
                    self._thawed.wait()  # frozen: neither side's bytes are read nor passed on
                    for key, _ in selector.select(30):
                        self._thawed.wait()
                        data = key.fileobj.recv(65536)
                        if not data:
                            return
                        key.data.sendall(data)
            except (OSError, ValueError):
                return
            finally:
                for end in (a, b):
                    with contextlib.suppress(OSError):
                        end.close()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("moto") / "moto.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
       ) -> S3Server:
    """The session's server, credentials in this process's environment (as the AWS chain
    reads them), and a fresh bucket named after the test."""
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:50]
    s3_server.bucket(name.strip("-"))
    s3_server.test_bucket = name.strip("-")  # type: ignore[attr-defined]
    return s3_server
