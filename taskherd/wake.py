"""A nudge from any local process (the CLI, an agent) to the daemon: "look at the queue now".

A UNIX datagram socket in the data dir: sending is fire-and-forget and never blocks the sender,
and a daemon that is down simply misses a nudge it would not have needed. The daemon still
polls as a fallback, so a lost nudge costs at most one poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from pathlib import Path

SOCKET_NAME = "wake.sock"
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_NAME


def notify(data_dir: Path) -> bool:
    """Nudge the daemon; False if none is listening (which is fine)."""
    path = socket_path(data_dir)
    if len(str(path)) > MAX_SOCKET_PATH:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        try:
            sock.sendto(b"!", str(path))
        except OSError:
            return False
    return True


class WakeListener(asyncio.DatagramProtocol):
    def __init__(self, on_wake: Callable[[], None]):
        self.on_wake = on_wake

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.on_wake()


async def listen(data_dir: Path, on_wake: Callable[[], None]) -> asyncio.BaseTransport | None:
    path = socket_path(data_dir)
    if len(str(path)) > MAX_SOCKET_PATH:
        return None  # the fallback poll still finds new tasks
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    os.chmod(path, 0o600)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: WakeListener(on_wake), sock=sock)
    return transport
