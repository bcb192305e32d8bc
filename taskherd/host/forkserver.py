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

A boxed role (a sandbox, no git) also has a **box spare**: a spare whose starter has
already exec'd bubblewrap with the role's options around the in-box starter
(``shim.py --in-box``, see `shim.in_box`), so that a run waits neither for a fork nor for
bwrap's own start (~3-5 ms of CPU). It is asked for like a run (`want_box_spare`, made by
the owner's background thread), waits for one run on a FIFO of its own, and answers on the
server's output as a spare does. A run is still started once: the owner gives up on a spare
that does not answer by killing its process group (the box dies with its shim), and
starts the run the cold way. No spare for the role, a dead one, or one made with other
options (a reload: `SparePlan.fingerprint`) → the cold way, and a new spare is asked for.

This module also says how every shim is started (`shim_command`), forked or cold, so that
the two cannot drift apart.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import psutil

if TYPE_CHECKING:  # not imported: a command that spawns nothing boxed needs none of it
    from taskherd.host.sandbox import SparePlan

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
# With no run waiting, the server forks its next spare this long after the last spare took its
# run, not beside its agent's exec (see shim.serve); a run that comes sooner has it forked at
# once.
NEXT_SPARE_DELAY = 0.010
# A spare taken this soon after its fork: runs come in a burst, and the next is forked at once.
BURST_WINDOW = 0.010
UP = b"up\n"  # the server's first line (shim.UP; the shim imports nothing of the package)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def shim_command(*shim_args: str) -> list[str]:
    """The command line that runs the shim with `shim_args`."""
    return [sys.executable, *SHIM_PYTHON_FLAGS, SHIM_PATH, *shim_args]


@dataclass(frozen=True)
class ForkedShim:
    """A shim the server forked for a run: what the caller records to watch it."""

    pid: int  # also its process group and session id
    started_at: float  # its create time as psutil gives it: the run's pid_started_at


@dataclass(frozen=True)
class _BoxSpare:
    """A box spare alive (as far as we know): its shim, its channel, what it was made of."""

    shim: ForkedShim
    start_ticks: int
    channel: Path
    fingerprint: tuple
    server: subprocess.Popen  # whose output it answers on


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
        self._boxes: dict[str, _BoxSpare] = {}  # a role's box spare
        self._box_wishes: dict[str, SparePlan] = {}  # spares to make
        self._channels = 0
        self._stops = 0  # stop()s so far: a server whose start began before one is not used

    def want(self, wanted: bool) -> None:
        with self._changed:
            self._wanted = wanted
            # Not wanted: the server is taken out and stopped (it had been kept, and stopped
            # only by the next start, with the box spares waiting on its pipes), its box
            # spares and wishes forgotten (they end with its input).
            server, self._server = (self._server, None) if not wanted else (None, self._server)
            if not wanted:
                self._stops += 1
                self._boxes.clear()
                self._box_wishes.clear()
            if wanted:
                self._ensure_starter()
                self._changed.notify_all()
                return
        if server is not None:
            _stop(server)

    def fork_shim(self, run: dict) -> ForkedShim | None:
        """Have the server fork a shim for `run`; None when no server could (start cold)."""
        with self._changed:
            reply = self._request(run)
        if reply is None:
            return None
        pid, start_ticks = reply
        return ForkedShim(pid, psutil.boot_time() + start_ticks / _CLOCK_TICKS)

    def _request(self, run: dict) -> tuple[int, int] | None:
        """A spare's answer to `run` (held: `_changed`)."""
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
        return reply

    def fork_boxed(self, plan: SparePlan, run: dict) -> ForkedShim | None:
        """Give `run` to the box spare of `plan.key`; None when there is none to take it (no
        spare, a dead one, one made of other options, one that did not answer): nothing
        was started, and the caller starts the run the cold way."""
        with self._changed:
            spare = self._boxes.pop(plan.key, None)
            if spare is None:
                return None
            if spare.fingerprint != plan.fingerprint or spare.server is not self._server:
                _end_box(spare)
                return None
            try:
                # Pinned first: a spare gone before the run is given (killed, its box
                # failed) is told by its pid; one gone after, by the pidfd turning readable.
                pidfd = os.pidfd_open(spare.shim.pid)
            except OSError:
                pidfd = None
            if pidfd is None or _start_ticks(spare.shim.pid) != spare.start_ticks:
                _end_box(spare)
                return self._closed(pidfd)
            if run.get("cgroups"):
                joined = _join_box(spare.shim.pid, run["cgroups"])
                if joined is None:  # its box not up yet: kept for the next run
                    self._boxes[plan.key] = spare
                    return self._closed(pidfd)
                if not joined:  # the cold box's starter meets the same refusal, and says it
                    _end_box(spare)
                    return self._closed(pidfd)
            try:  # non-blocking: with no reader (the spare is gone) the open fails at once
                fd = os.open(spare.channel, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                _end_box(spare)
                return self._closed(pidfd)
            try:
                os.set_blocking(fd, True)
                _write_all(fd, marshal.dumps(run).hex().encode() + b"\n")
            except OSError:
                _end_box(spare)
                return self._closed(pidfd)
            finally:
                os.close(fd)
            reply = _read_reply(_stdout(spare.server).fileno(), REPLY_TIMEOUT, pidfd)
            os.close(pidfd)
            if reply != (spare.shim.pid, spare.start_ticks):
                # Stopped or wedged: killed (its box with it) before the run goes the cold
                # way, so that it is never started twice; the server is replaced, since an
                # answer written meanwhile would be read as the next request's.
                _end_box(spare)
                self._server = None
                self._changed.notify_all()
                _stop(spare.server)
                return None
            spare.channel.unlink(missing_ok=True)
            return spare.shim

    @staticmethod
    def _closed(pidfd: int | None) -> None:
        if pidfd is not None:
            os.close(pidfd)

    def want_box_spare(self, plan: SparePlan) -> None:
        """Have a box spare made for `plan` (in the background), unless one is there."""
        with self._changed:
            spare = self._boxes.get(plan.key)
            if (spare is not None and spare.fingerprint == plan.fingerprint
                    and spare.server is self._server):
                return
            self._box_wishes[plan.key] = plan
            self._ensure_starter()
            self._changed.notify_all()

    def keep_box_spares(self, keys: set[str]) -> None:
        with self._changed:
            for key in [key for key in self._boxes if key not in keys]:
                _end_box(self._boxes.pop(key))
            for key in [key for key in self._box_wishes if key not in keys]:
                del self._box_wishes[key]

    def box_spare_pid(self, plan: SparePlan) -> int | None:
        with self._changed:
            spare = self._boxes.get(plan.key)
            if (spare is None or spare.server is not self._server
                    or spare.fingerprint != plan.fingerprint):
                return None
            return spare.shim.pid

    def _make_box_spares(self) -> None:
        """The box spares wished for (held: `_changed`)."""
        while self._box_wishes and self._server is not None:
            key, plan = self._box_wishes.popitem()
            channel_dir = Path(plan.channels)
            old = self._boxes.pop(key, None)
            if old is not None:
                _end_box(old)  # made of other options (a reload)
            self._channels += 1
            channel = channel_dir / f"box-{os.getpid()}-{self._channels}"
            try:
                channel_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                channel.unlink(missing_ok=True)
                os.mkfifo(channel, 0o600)  # whoever can write it gives the box its run
            except OSError:
                continue
            server = self._server
            reply = self._request({"box_spare": list(plan.argv), "files": list(plan.files),
                                   "channel": str(channel), "stage": plan.stage,
                                   "source": plan.source})
            if reply is None:
                channel.unlink(missing_ok=True)
                continue
            pid, start_ticks = reply
            shim = ForkedShim(pid, psutil.boot_time() + start_ticks / _CLOCK_TICKS)
            assert server is not None
            self._boxes[key] = _BoxSpare(shim, start_ticks, channel, plan.fingerprint, server)

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
                self._changed.wait_for(lambda: self._wanted and (
                    self._server is None or bool(self._box_wishes)))
                if self._server is not None:
                    self._make_box_spares()
                    continue
                stops = self._stops
            server = _start_server()  # outside the lock: a spawn must not wait for this
            surplus = None
            with self._changed:
                if server is None:
                    # Out of processes or memory: spawns go cold meanwhile, and a prompt
                    # retry would only hammer a machine that is already short.
                    self._changed.wait(RESTART_INTERVAL)
                elif self._wanted and self._server is None and self._stops == stops:
                    self._server, self._owner = server, os.getpid()
                    self._changed.notify_all()
                else:
                    # No longer wanted while it was starting: stopped since, whatever start()
                    # came after (it was started with the settings of before the stop).
                    surplus = server
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


def fork_boxed(plan: SparePlan, run: dict) -> ForkedShim | None:
    """A shim whose agent is started in its role's box spare (see the module's docstring);
    None when there is no spare to take it: the caller starts the run the cold way."""
    return _server.fork_boxed(plan, run)


def want_box_spare(plan: SparePlan) -> None:
    """Have a box spare made ahead for `plan`'s role, unless one made of the same options
    waits; returns at once."""
    _server.want_box_spare(plan)


def keep_box_spares(keys: set[str]) -> None:
    """End the box spares of roles not in `keys` (taken out of the config)."""
    _server.keep_box_spares(keys)


def box_spare_pid(plan: SparePlan) -> int | None:
    """The shim pid of the box spare `plan` would take, if one is known."""
    return _server.box_spare_pid(plan)


def clear_box_channels(folder: Path) -> None:
    """Remove the FIFOs of box spares that earlier daemons left in `folder` (their spares went
    away with them), not this process's."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    own = f"box-{os.getpid()}-"
    for name in names:
        if name.startswith("box-") and not name.startswith(own):
            with contextlib.suppress(OSError):
                os.unlink(folder / name)


def _join_box(shim: int, cgroup_files: list[str]) -> bool | None:
    """Move a box spare's in-box starter (the agent to be) into a run's cgroups, from here:
    inside, the box's /sys/fs/cgroup is read-only and its pids are not the host's. Done
    before the run is given, so the agent is capped from its first instruction, with no
    round trip between the box and its shim on the way to its exec. True: moved; False: a
    cgroup refused; None: the box has no starter yet (bwrap still making it)."""
    starter = _box_starter(shim)
    if starter is None:
        return None
    try:
        for path in cgroup_files:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, str(starter).encode())
            finally:
                os.close(fd)
    except OSError:
        return False
    return True


def _box_starter(shim: int) -> int | None:
    """The in-box starter's host pid: the shim's child is bwrap, whose child is the box's
    init (bwrap again), whose child is the starter."""
    pid = shim
    for _ in range(3):
        try:
            with open(f"/proc/{pid}/task/{pid}/children", "rb") as children:
                found = children.read().split()
        except OSError:
            return None
        if len(found) != 1:
            return None
        pid = int(found[0])
    return pid


def _end_box(spare: _BoxSpare) -> None:
    """Kill a box spare's process group (its shim leads it; bwrap dies with its parent)."""
    spare.channel.unlink(missing_ok=True)
    if _start_ticks(spare.shim.pid) == spare.start_ticks:  # not a later owner of the pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(spare.shim.pid, signal.SIGKILL)


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def _start_server() -> subprocess.Popen | None:
    """A server that said it is up (shim.UP), or None: runs are given to it only then, so
    that none waits for its start-up (tens of milliseconds), which a request would otherwise
    wait for on the spawn's way, and a cold shim is started meanwhile instead."""
    try:
        server = subprocess.Popen(
            shim_command("--serve", *(str(round(delay * 1000))
                                      for delay in (NEXT_SPARE_DELAY, BURST_WINDOW))),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={},
            cwd="/", start_new_session=True, close_fds=True, bufsize=0)
    except OSError:  # EAGAIN, ENOMEM, EMFILE
        return None
    if _read_up(_stdout(server).fileno(), REPLY_TIMEOUT):
        return server
    _stop(server)  # it could not start its loop (no fork), or is wedged
    return None


def _read_up(fd: int, timeout: float) -> bool:
    """Whether the server's first line, within `timeout` s, says it is up. Read whole and
    alone: no run is sent before it, so no answer follows it yet."""
    said = b""
    while not said.endswith(b"\n"):
        if not wait_readable(fd, timeout):
            return False
        chunk = os.read(fd, len(UP) - len(said))
        if not chunk:
            return False
        said += chunk
    return said == UP


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


def _read_reply(fd: int, timeout: float,
                gone: int | None = None) -> tuple[int, int] | None:
    """``PID START_TICKS``, or None when nothing whole came within `timeout` s, or `gone` (a
    box spare's pidfd) turned readable first.

    Requests are one at a time, so an answer is never mixed with another's.
    """
    reply = b""
    while not reply.endswith(b"\n"):
        if gone is not None:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.register(gone, select.POLLIN)
            # The answer counts whenever it is there: a quick run's shim may be gone by then.
            if fd not in dict(poller.poll(max(timeout, 0) * 1000)):
                return None
        elif not wait_readable(fd, timeout):
            return None
        chunk = os.read(fd, 64)
        if not chunk:
            return None
        reply += chunk
    pid, start_ticks = reply.split()
    return int(pid), int(start_ticks)
