"""The shim fork server: one interpreter per daemon that forks every run's shim.

Every agent runs under `taskherd/host/shim.py` (why: see `taskherd.host.procs`). A shim
started as an interpreter of its own costs ~10 ms of start-up before the agent can start,
and ~3 MB of memory (Pss) for the run's whole life: 3 GB for a thousand agents. The fork server
(``shim.py --serve``) is started once; for each run it forks a shim that shares the
server's pages copy-on-write, and owns only those written after its fork (see
`shim.serve`). The server forks each run's shim before the run asks, so a run waits for no
fork: it takes the spare waiting for it, and the server forks the next while nobody waits.
Spares are sized by demand: one waits, as many as runs need are made, for the price of one
idle interpreter and one idle shim (with the starter of its agent).

What it guarantees:

- A forked shim is the shim a cold start gives: session and process-group leader, the
  log's header, the exit file, the kept-open input FIFO. It is the server's child, not the
  daemon's, so the daemon watches it as it watches a run adopted after a restart: by pidfd
  and start time, its status from the exit file.
- A run is started once. The spare reads the run from the server's input and answers
  with its pid itself, and starts its agent only once the server is known to have been
  alive after that answer: a server that dies first leaves a spare that exits without
  starting anything, and the run goes to a cold shim instead.
- The server belongs to the process that started it. A forked child of the owner sees no
  server, never sends it a run, and closes its copies of the server's pipes.
- The server dies with its owner: it exits at end of input, and the kernel closes its input
  when the owner ends, even by SIGKILL. The shims it forked are not touched; they run on.
- A spawn never waits for the server to start: with none up (not started yet, killed,
  stuck), `fork_shim` says so at once and the caller starts a cold shim, while a background
  thread of the owner starts a new server.

This module also says how every shim is started (`shim_command`), forked or cold, so that
the two cannot drift apart.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

SHIM_PATH = str(Path(__file__).with_name("shim.py"))
# -I: ignore PYTHON* env vars and user site (the agent's env must not change
# how the shim runs); -S: skip `site` (~10 ms of every cold spawn, and memory the
# server's shims would share for nothing). The shim is run by file path, not `-m`,
# so it needs no sys.path and never imports the package.
SHIM_PYTHON_FLAGS = ("-I", "-S")
# A server that has not answered in this long is stopped or wedged: it is replaced. Generous,
# because it answers in well under a millisecond even on a loaded machine.
REPLY_TIMEOUT = 10.0
RESTART_INTERVAL = 1.0  # after a server could not be started (out of pids or memory)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def shim_command(*shim_args: str) -> list[str]:
    """The command line that runs the shim with `shim_args`."""
    return [sys.executable, *SHIM_PYTHON_FLAGS, SHIM_PATH, *shim_args]


@dataclass(frozen=True)
class ForkedShim:
    """A shim the server forked for a run: what the caller records to watch it."""

    pid: int  # also its process group and session id
    started_at: float  # its create time as psutil gives it: the run's pid_started_at


class _ForkServer:
    """At most one ``shim.py --serve`` process, owned by the process that wanted it."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._changed = threading.Condition()  # one request in flight; a server came or went
        self._server: subprocess.Popen | None = None
        self._owner = 0  # the process that started `_server`; a forked child must not use it
        self._wanted = False
        self._starter_pid = 0  # the process whose starter thread runs; threads die at fork

    def want(self, wanted: bool) -> None:
        with self._changed:
            self._wanted = wanted
            server, self._server = (None, self._server) if not wanted else (self._server, None)
            if wanted:
                self._ensure_starter()
                self._changed.notify_all()
                return
        if server is not None:
            _stop(server)

    def fork_shim(self, run: dict) -> ForkedShim | None:
        """Have the server fork a shim for `run`; None when no server could (start cold)."""
        with self._changed:
            if not self._wanted:
                return None
            server = self._server
            if server is None or server.poll() is not None:
                self._server = None
                self._changed.notify_all()  # the starter thread brings up a new one
                return None
            try:
                # The shim's format (see shim.read_run): json there would cost every spawn.
                _write_all(_stdin(server).fileno(), marshal.dumps(run).hex().encode() + b"\n")
            except OSError:  # it died meanwhile: nothing was forked
                self._server = None
                self._changed.notify_all()
                _stop(server)
                return None
            reply = _read_reply(_stdout(server).fileno(), REPLY_TIMEOUT)
            if reply is None:
                # Stopped or dead before answering: once it is gone its shim, if it forked
                # one, never gets its go and starts nothing; an answer sent just before the
                # end still counts, since that shim got its go.
                self._server = None
                self._changed.notify_all()
                _stop(server)
                reply = _read_reply(_stdout(server).fileno(), 0)
            if reply is None:
                return None
        pid, start_ticks = reply
        return ForkedShim(pid, psutil.boot_time() + start_ticks / _CLOCK_TICKS)

    def pid(self) -> int | None:
        with self._changed:
            return self._server.pid if self._server is not None else None

    def wait_ready(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._server is not None, timeout)

    def forget_in_child(self) -> None:
        # A forked child holds copies of the server's pipes; closing them keeps "the owner
        # went away" (EOF) meaningful, and the server stays the parent's. The lock may have
        # been held by a parent's thread that does not exist here, so it is made anew.
        if self._server is not None:
            for pipe in (_stdin(self._server), _stdout(self._server)):
                with contextlib.suppress(OSError):
                    pipe.close()
        self._reset()

    def _ensure_starter(self) -> None:
        if self._starter_pid != os.getpid():
            self._starter_pid = os.getpid()
            threading.Thread(target=self._start_forever, name="taskherd-forkserver",
                             daemon=True).start()

    def _start_forever(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._wanted and self._server is None)
            server = _start_server()  # outside the lock: a spawn must not wait for this
            surplus = None
            with self._changed:
                if server is None:
                    # Out of processes or memory: spawns go cold meanwhile, and a prompt
                    # retry would only hammer a machine that is already short.
                    self._changed.wait(RESTART_INTERVAL)
                elif self._wanted and self._server is None:
                    self._server, self._owner = server, os.getpid()
                    self._changed.notify_all()
                else:
                    surplus = server  # no longer wanted while it was starting
            if surplus is not None:
                _stop(surplus)


_server = _ForkServer()
os.register_at_fork(after_in_child=_server.forget_in_child)


def start() -> None:
    """Keep a fork server up for this process (started in the background; returns at once)."""
    _server.want(True)


def stop() -> None:
    """Stop this process's fork server; spawns start cold shims. Shims it forked run on."""
    _server.want(False)


def server_pid() -> int | None:
    """The pid of the fork server up now, or None."""
    return _server.pid()


def wait_until_up(timeout: float) -> bool:
    """Wait until the server `start` asked for is up; False after `timeout` s."""
    return _server.wait_ready(timeout)


def fork_shim(run: dict) -> ForkedShim | None:
    """A shim forked by the server and already given `run` (see `shim.take_run`).

    None when no server is up or it failed before answering: nothing was started, and the
    caller starts a cold shim.
    """
    return _server.fork_shim(run)


def _start_server() -> subprocess.Popen | None:
    try:
        return subprocess.Popen(
            shim_command("--serve"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env={}, cwd="/", start_new_session=True,
            close_fds=True, bufsize=0)
    except OSError:  # EAGAIN, ENOMEM, EMFILE
        return None


# The server's pipes: both made by _start_server, so never None.
def _stdin(server: subprocess.Popen) -> IO[bytes]:
    assert server.stdin is not None
    return server.stdin


def _stdout(server: subprocess.Popen) -> IO[bytes]:
    assert server.stdout is not None
    return server.stdout


def _stop(server: subprocess.Popen) -> None:
    """End the server and reap it; its shims (their own sessions) are not touched."""
    with contextlib.suppress(OSError):
        _stdin(server).close()  # EOF: an idle server exits by itself
    with contextlib.suppress(ProcessLookupError):
        server.kill()  # one stopped or wedged mid-request would not
    server.wait()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def wait_readable(fd: int, timeout: float) -> bool:
    """Whether `fd` becomes readable within `timeout` s. poll(), not select(): with a thousand
    agents watched by pidfd, descriptors pass select()'s limit of 1024."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(timeout, 0) * 1000))


def _read_reply(fd: int, timeout: float) -> tuple[int, int] | None:
    """``PID START_TICKS``, or None when nothing whole came within `timeout` s.

    Requests are one at a time, so an answer is never mixed with another's.
    """
    reply = b""
    while not reply.endswith(b"\n"):
        if not wait_readable(fd, timeout):
            return None
        chunk = os.read(fd, 64)
        if not chunk:
            return None
        reply += chunk
    pid, start_ticks = reply.split()
    return int(pid), int(start_ticks)
