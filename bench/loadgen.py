"""A load generator cheap enough to measure a server on the same two cores: raw keep-alive
HTTP/1.1 over asyncio streams, every request's bytes built before the clock starts, the
answer read by its Content-Length and nothing else parsed.

An HTTP library spends more CPU per request than the server under test (httpx on this
machine drove a bare uvicorn app at about 300 requests a second): with it the figure is the
client's. With this one, and the load split over a few processes, the floor (a bare app
answering a constant) goes to thousands a second, and what is left is the server's.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from dataclasses import dataclass


def request_bytes(host: str, path: str, body: dict | None, headers: dict[str, str]) -> bytes:
    data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(data)}",
             "Content-Type: application/json", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


class Connection:
    """One keep-alive connection: send prebuilt bytes, read one answer, its status."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def call(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
                break
        else:
            raise RuntimeError(f"an answer without Content-Length: {head[:200]!r}")
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


@dataclass
class Load:
    """What one client process sends: to `port`, prebuilt requests round-robin over its
    connections; closed loop (`rate` None: each connection sends as soon as it is answered)
    or open loop (`rate` requests a second, latency counted from when each was due)."""

    port: int
    requests: list[bytes]
    connections: int
    rate: float | None = None


async def _closed(load: Load) -> tuple[float, list[float]]:
    connections = [await Connection.open(load.port) for _ in range(load.connections)]
    latencies: list[float] = []
    next_index = 0

    async def worker(connection: Connection) -> None:
        nonlocal next_index
        while next_index < len(load.requests):
            request = load.requests[next_index]
            next_index += 1
            started = time.perf_counter()
            status, body = await connection.call(request)
            latencies.append(time.perf_counter() - started)
            if status >= 300:
                raise SystemExit(f"answered {status}: {body[:300]!r}")

    begin = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in connections))
    seconds = time.perf_counter() - begin
    for connection in connections:
        connection.close()
    return seconds, latencies


async def _open(load: Load) -> tuple[float, list[float]]:
    assert load.rate
    idle: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(load.connections):
        idle.put_nowait(await Connection.open(load.port))
    latencies: list[float] = []

    async def one(request: bytes, due: float) -> None:
        connection = await idle.get()  # none free: the wait counts, as a user's would
        status, body = await connection.call(request)
        latencies.append(time.perf_counter() - due)
        idle.put_nowait(connection)
        if status >= 300:
            raise SystemExit(f"answered {status}: {body[:300]!r}")

    tasks, begin = [], time.perf_counter()
    for index, request in enumerate(load.requests):
        due = begin + index / load.rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(request, due)))
    await asyncio.gather(*tasks)
    seconds = time.perf_counter() - begin
    while not idle.empty():
        idle.get_nowait().close()
    return seconds, latencies


def _run(load: Load) -> tuple[float, list[float]]:
    return asyncio.run(_open(load) if load.rate else _closed(load))


def drive(port: int, requests: list[bytes], connections: int, processes: int = 1,
          rate: float | None = None) -> tuple[float, list[float]]:
    """The requests over `connections` connections split among `processes` client processes
    (each gets every processes-th request and its share of the rate): (seconds the slowest
    took, every latency)."""
    loads = [Load(port, requests[n::processes], max(connections // processes, 1),
                  rate / processes if rate else None) for n in range(processes)]
    if processes == 1:
        return _run(loads[0])
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        results = pool.map(_run, loads)
    return max(seconds for seconds, _ in results), [x for _, lat in results for x in lat]
