"""Spare shims: started before a run needs them, so a spawn does not wait for Python.

Every agent runs under `taskherd/shim.py` (why: see `taskherd.procs`). Python's start-up is
~10 ms even with -I -S, most of a spawn's latency. A spare is a shim started ahead of need
(``shim.py --warm``) that pays the start-up while nothing waits, then blocks on a pipe until
`hand_over` sends it a run; `taskherd.procs.spawn` tries a spare first and starts a cold shim
only when none takes the run.

What the pool guarantees:

- A spare belongs to the process that started it. A forked child sees no spares, never hands
  one a run, and closes its copies of their pipes, so it cannot keep them alive either.
- A dead spare (killed, out of memory) is skipped: the next live one takes the run, or, with
  none left, the caller starts a cold shim. Either way the spawn succeeds.
- Spares die with their owner. A spare exits when its pipe closes, and the kernel closes it
  when the owner ends, even by SIGKILL, so an unused spare outlives nobody.
- A spawn never waits for a refill. Taking a spare only pops from a list under a lock;
  starting its replacement (fork, exec, the interpreter's start-up) is done by a background
  thread of the owner, so a burst of as many spawns as there are spares finds one for each.

This module also says how every shim is started (`shim_command`), spare or cold, so that the
two cannot drift apart.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil

SHIM_PATH = str(Path(__file__).with_name("shim.py"))
# -I: ignore PYTHON* env vars and user site (the agent's env must not change
# how the shim runs); -S: skip `site` (~10 ms of every spawn). The shim is run
# by file path, not `-m`, so it needs no sys.path and never imports the package.
SHIM_PYTHON_FLAGS = ("-I", "-S")
# Enough for a burst of spawns, few because each spare is an idle interpreter
# (~4 MB of its own memory) for as long as the daemon runs.
MAX_SPARES = 4
SPARE_RETRY_INTERVAL = 1.0  # after a spare could not be started (out of pids or memory)


def shim_command(*shim_args: str) -> list[str]:
    """The command line that runs the shim with `shim_args`."""
    return [sys.executable, *SHIM_PYTHON_FLAGS, SHIM_PATH, *shim_args]


@dataclass(frozen=True)
class Spare:
    """A shim started ahead of need (`shim.py --warm`), waiting on a pipe for its run."""

    popen: subprocess.Popen
    started_at: float  # its create time: the run's pid_started_at once it takes one
    owner: int  # the process that started it; a forked child must not hand it runs


class _SparePool:
    """Up to `size` spare shims, refilled by one background thread of the owning process."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._changed = threading.Condition()  # notified on a take, a new spare, a resize
        self._idle: list[Spare] = []  # oldest first: the oldest is the likeliest warm
        self._size = 1  # one spare until the daemon says how large its bursts can be
        self._refiller_pid = 0  # the process whose refill thread runs; threads die at fork

    def resize(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"spare shim count must be >= 0, got {size!r}")
        with self._changed:
            self._size = min(size, MAX_SPARES)
            surplus, self._idle = self._idle[self._size:], self._idle[:self._size]
            self._ensure_refiller()
            self._changed.notify_all()
        for spare in surplus:  # EOF on its pipe: it exits without starting anything
            _retire(spare)

    def take(self) -> Spare | None:
        """The oldest live spare, or None (then the caller starts a shim the slow way)."""
        spare = None
        with self._changed:
            while spare is None and self._idle:
                candidate = self._idle.pop(0)
                if candidate.owner == os.getpid() and candidate.popen.poll() is None:
                    spare = candidate
                else:  # dead (killed, OOM): discarded, already reaped by poll()
                    candidate.popen.stdin.close()
            self._ensure_refiller()
            self._changed.notify_all()  # the refill thread replaces what was taken or dropped
        return spare

    def pids(self) -> list[int]:
        with self._changed:
            return [spare.popen.pid for spare in self._idle]

    def wait_full(self, timeout: float) -> bool:
        """True once `size` spares are started (not necessarily done starting up)."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._idle) >= self._size, timeout)

    def forget_in_child(self) -> None:
        # A forked child holds copies of the spares' pipes; closing them keeps "the daemon
        # went away" (EOF) meaningful, and the spares stay the parent's. The lock may have
        # been held by a parent's thread that does not exist here, so it is made anew. (A
        # spare mid-start in the parent's refill thread is missed: its pipe is close-on-exec
        # and lives at most as long as this child.)
        for spare in self._idle:
            with contextlib.suppress(OSError):
                spare.popen.stdin.close()  # idle spares' pipes are never mid-write
        self._reset()

    def _ensure_refiller(self) -> None:
        if self._refiller_pid != os.getpid():
            self._refiller_pid = os.getpid()
            threading.Thread(target=self._refill_forever, name="taskherd-spares",
                             daemon=True).start()

    def _refill_forever(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: len(self._idle) < self._size)
            spare = _start_spare()  # outside the lock: a take must not wait for this
            surplus = None
            with self._changed:
                if spare is None:
                    # Out of processes or memory: spawns go the slow way meanwhile, and a
                    # prompt retry would only hammer a machine that is already short.
                    self._changed.wait(SPARE_RETRY_INTERVAL)
                elif len(self._idle) < self._size:
                    self._idle.append(spare)
                    self._changed.notify_all()
                else:
                    surplus = spare  # resized down while it was starting
            if surplus is not None:
                _retire(surplus)


_pool = _SparePool()
os.register_at_fork(after_in_child=_pool.forget_in_child)


def prewarm(size: int = 1) -> None:
    """Keep `size` spare shims (at most MAX_SPARES; 0: none) started and waiting.

    Returns at once: the spares are started in the background, and each one taken is
    replaced the same way.
    """
    _pool.resize(size)


def spare_pids() -> list[int]:
    """Pids of the spare shims waiting now, the next one to be taken first."""
    return _pool.pids()


def wait_for_spares(timeout: float) -> bool:
    """Wait until every spare `prewarm` asked for is started; False after `timeout` s."""
    return _pool.wait_full(timeout)


def hand_over(run: dict) -> Spare | None:
    """Send `run` to the oldest live spare, which then runs it as `shim.warm` reads it.

    None when no spare took it (none waiting, or the one taken died meanwhile): nothing
    was started, and the caller starts a cold shim.
    """
    spare = _pool.take()
    if spare is None:
        return None
    try:
        # The shim's format (see shim.warm): importing json there cost ~13 ms of CPU a spawn.
        spare.popen.stdin.write(marshal.dumps(run).hex().encode() + b"\n")
        spare.popen.stdin.close()
    except OSError:  # BrokenPipeError: it died while waiting
        _retire(spare)
        return None
    return spare


def _start_spare() -> Spare | None:
    try:
        popen = subprocess.Popen(
            shim_command("--warm"), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={}, start_new_session=True, close_fds=True)
    except OSError:  # EAGAIN, ENOMEM, EMFILE
        return None
    try:
        started_at = psutil.Process(popen.pid).create_time()
    except psutil.Error:  # died at once
        _retire(Spare(popen, 0.0, os.getpid()))
        return None
    return Spare(popen, started_at, os.getpid())


def _retire(spare: Spare) -> None:
    """Close its pipe and reap it: at EOF a spare exits before running anything."""
    with contextlib.suppress(OSError):
        spare.popen.stdin.close()
    spare.popen.wait()
