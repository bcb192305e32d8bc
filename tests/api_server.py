"""A real API server for tests: uvicorn on a free loopback port over a real store, with a
token of every scope."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from taskherd.api.server import ApiServer
from taskherd.config import load_config
from taskherd.ops import Queue, open_queue
from taskherd.ops import tokens as token_ops

CONFIG = """\
[daemon]
database = "taskherd.db"
timezone = "UTC"

[roles.coder]
command = ["true"]

[roles.qa]
command = ["true"]

[[jobs]]
name = "nightly"
cron = "0 3 * * *"
role = "coder"
title = "nightly"

[api]
listen = "127.0.0.1:0"
max_body_bytes = 65536
"""
SCOPES = ("admin", "operator", "read", "intake")


@dataclass
class Served:
    server: ApiServer
    queue: Queue
    tokens: dict[str, str]
    folder: Path

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, scope: str | None = None, **headers: str) -> httpx.Client:
        if scope is not None:
            headers["Authorization"] = f"Bearer {self.tokens[scope]}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)


@contextlib.contextmanager
def served(folder: Path, config: str = CONFIG, now: float | None = None,
           clock: Callable[[], float] | None = None) -> Iterator[Served]:
    """`clock`: the server's (time.time unless given), for a test that moves time itself."""
    import time

    (folder / "taskherd.toml").write_text(config)
    loaded = load_config(folder / "taskherd.toml")
    queue = open_queue(loaded)
    moment = now if now is not None else time.time()
    tokens = {scope: token_ops.create_token(queue, scope, scope, moment).token
              for scope in SCOPES}
    tokens["intake-qa"] = token_ops.create_token(queue, "intake-qa", "intake", moment,
                                                 roles=["qa"], rate_per_minute=5).token
    server = ApiServer(loaded, port=0, **({"clock": clock} if clock else {}))
    server.start()
    try:
        yield Served(server, queue, tokens, folder)
    finally:
        server.stop()
        queue.close()
