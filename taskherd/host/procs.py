"""The OS-process layer under the supervisor: spawn, watch, adopt, kill (what a process
does, its CPU time and its log's growth, is read in `taskherd.host.activity`).

No database code: callers record what these functions return (pid, start time,
log path) and feed it back to `adopt` after a daemon restart.

Every agent runs under `taskherd/host/shim.py`, a tiny Python process that is the
session leader and process-group leader (pgid == shim pid), starts the agent
as its child, waits for it and writes its exit status to ``<log>.exit``. The
shim exists because a restarted daemon is not the agent's parent and could
never learn the exit status by waitpid(). A spawn has the daemon's fork server
fork the shim when one is up (`taskherd.host.forkserver`: ~0.4 MB a shim instead of
an interpreter's ~3 MB), and starts a cold one otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from taskherd.host import forkserver, logfile

if TYPE_CHECKING:
    from taskherd.host.sandbox import SparePlan

HEADER_PREFIX = "# taskherd "
# psutil's create_time comes from boot-relative ticks plus the wall-clock boot
# time, which moves when NTP steps the clock; pid reuse inside one second would
# need the whole pid space to wrap within that second.
START_TIME_TOLERANCE = 1.0
FALLBACK_POLL_INTERVAL = 0.2  # without pidfds, death is still seen within 1 s
# A forked shim's zombie lasts until its fork server is scheduled: usually well under 1 ms.
REAP_WAIT, REAP_POLL_INTERVAL = 1.0, 0.002
# The most a pipe takes in one piece: an answer longer than this could interleave.
PIPE_BUF = getattr(select, "PIPE_BUF", 4096)
HEADER_ARG_LIMIT = 200  # prompts passed in argv must not bloat the header line
CARRIED_OVER_ENV = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TERM")
# Claude Code refuses to start inside another session when it sees these.
REMOVED_ENV = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT")


@dataclass(frozen=True)
class ExitStatus:
    """How an agent ended, as far as anyone could learn."""

    code: int | None = None  # exit code when the agent exited by itself
    signal: int | None = None  # signal number when a signal killed it
    ended_at: float | None = None  # wall-clock time the status was recorded
    # "exit_file": written by the shim; "terminate": the shim was SIGKILLed with
    # the group, status recorded by terminate(); "shim": only the shim's own
    # wait status was available; "unknown": the process is gone without a trace.
    source: str = "exit_file"

    @property
    def known(self) -> bool:
        return self.code is not None or self.signal is not None

    @property
    def succeeded(self) -> bool:
        return self.code == 0


UNKNOWN_EXIT = ExitStatus(source="unknown")


class ProcessHandle:
    """A live or finished agent, spawned here or adopted after a restart."""

    def __init__(self, pid: int, started_at: float, log_path: Path,
                 popen: subprocess.Popen | None = None, pidfd: int | None = None):
        self.pid = pid  # the shim's pid, which is also the process group id
        self.started_at = started_at  # psutil create_time of the shim
        self.log_path = log_path
        self.exit_path = exit_path_for(log_path)
        self._popen = popen  # set for our own children: the only way to reap them
        self._pidfd = pidfd  # pins the process identity; readable once it exits
        self._status: ExitStatus | None = None
        self._readable: asyncio.Future | None = None  # set once the pidfd is readable

    @property
    def is_child(self) -> bool:
        return self._popen is not None

    def poll(self) -> ExitStatus | None:
        """The exit status once the shim has exited, else None. Never blocks."""
        if self._status is None:
            self._status = (self._poll_child(self._popen) if self._popen
                            else self._poll_adopted())
        return self._status

    def is_alive(self) -> bool:
        return self.poll() is None

    async def wait_exit(self) -> ExitStatus:
        """Return once the process has exited; a pidfd makes this immediate.

        Any number of tasks may wait on one handle; cancelling one leaves the
        others waiting.
        """
        while (status := self.poll()) is None:
            fd = self._ensure_pidfd()
            if fd is None:
                await asyncio.sleep(FALLBACK_POLL_INTERVAL)
                continue
            loop = asyncio.get_running_loop()
            if self._readable is None or self._readable.get_loop() is not loop:
                # One shared registration: a second add_reader on the same fd
                # would replace the first waiter's callback and strand it.
                self._readable = _readable_future(loop, fd)
            await asyncio.shield(self._readable)
        self.close()  # the reader is gone once the future resolved
        return status

    async def wait_reaped(self, timeout: float = REAP_WAIT) -> None:
        """Return once the exited shim is no longer a zombie (or after `timeout` s).

        A shim forked by the fork server is reaped by the server, a moment after it exits;
        until then its zombie keeps its process group in existence, so a look for leftovers
        in the group (`live_group_members`) would walk every process on the host for
        nothing. Our own children are reaped by `poll`.
        """
        deadline = time.monotonic() + timeout
        while self.poll() is not None and not self.is_child and _is_zombie(self.pid):
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(REAP_POLL_INTERVAL)

    async def terminate(self, grace: float) -> ExitStatus:
        """SIGTERM the process group, SIGKILL after `grace` seconds; off the event loop."""
        return await terminate_async(self, grace)

    def send_signal(self, signum: int) -> None:
        """Signal the shim only (it forwards to its group).

        Raises ProcessLookupError once the shim has exited: its pid may by then
        belong to a stranger.
        """
        if self.poll() is not None:
            raise ProcessLookupError(f"shim {self.pid} has exited")
        if self._pidfd is not None:
            # Exact even if the pid were reused: the fd names this process.
            signal.pidfd_send_signal(self._pidfd, signum)
        else:
            # A child's pid cannot be reused before we reap it.
            os.kill(self.pid, signum)

    def close(self) -> None:
        """Release the pidfd; call from the event loop's thread if one waits."""
        if self._readable is not None and not self._readable.done():
            if self._pidfd is not None:  # always, as the future waits on it (wait_exit)
                self._readable.get_loop().remove_reader(self._pidfd)
            self._readable.cancel()
        self._readable = None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __del__(self) -> None:
        # Only the fd: the garbage collector may run in any thread, and an
        # event loop must not be touched from there.
        if self._pidfd is not None:
            os.close(self._pidfd)

    def __repr__(self) -> str:
        kind = "child" if self._popen else "adopted"
        return f"<ProcessHandle pid={self.pid} {kind} status={self._status}>"

    def _poll_child(self, popen: subprocess.Popen) -> ExitStatus | None:
        returncode = popen.poll()
        if returncode is None:
            return None
        recorded = read_exit_file(self.exit_path)
        if recorded is not None:
            return recorded
        if returncode < 0:  # the shim itself was killed; the agent shares its group
            return ExitStatus(signal=-returncode, ended_at=time.time(), source="shim")
        return UNKNOWN_EXIT

    def _poll_adopted(self) -> ExitStatus | None:
        if self._pidfd is not None:
            if not _is_readable(self._pidfd):
                return None
        elif _same_process_alive(self.pid, self.started_at):
            return None
        # The shim writes the file before it exits, so a gone shim without a
        # file means it was killed (or the host rebooted): nothing to learn.
        return read_exit_file(self.exit_path) or UNKNOWN_EXIT

    def _ensure_pidfd(self) -> int | None:
        if self._pidfd is None and self._status is None:
            self._pidfd = _open_pidfd(self.pid)
            # For an adopted pid the fd might name a newcomer that reused it.
            if self._pidfd is not None and not self._popen and not _same_process_alive(
                    self.pid, self.started_at):
                self.close()
                self._status = read_exit_file(self.exit_path) or UNKNOWN_EXIT
        return self._pidfd


@dataclass(frozen=True)
class SpawnedProcess:
    """What the caller records for a run so that `adopt` can find it again."""

    pid: int  # shim pid == process group id
    started_at: float  # psutil create_time of the shim, guards against pid reuse
    log_path: Path
    exit_path: Path
    handle: ProcessHandle = field(compare=False, repr=False)


class ProgramNotFound(FileNotFoundError):
    """The program a role names is not there (or not executable) on the agent's PATH: the
    machine's configuration, not the agent's doing."""


def exit_path_for(log_path: Path) -> Path:
    return Path(f"{log_path}.exit")


def spawn(argv: list[str], *, env: dict[str, str], cwd: str | None, log_path: Path,
          stdin_path: Path | None = None, header: Mapping | None = None,
          keep_input_open: bool = False, max_log_bytes: int | None = None,
          cgroups: Sequence[str] = (), open_files: Sequence[str] = (),
          copier_cgroups: Sequence[str] = (),
          box: SparePlan | None = None) -> SpawnedProcess:
    """Start `argv` under the shim in a new session, output appended to `log_path`.

    With `max_log_bytes` the output reaches the log through the shim, which keeps its head and
    its tail within that size (see `taskherd.host.shim`); without, the agent writes the log itself.

    With `keep_input_open` the agent's standard input is a FIFO beside the log
    (`input_path_for`) that the shim holds open for the run's life, so the agent never reads
    an end of input and `send_input` reaches it; otherwise it is `stdin_path` or /dev/null.

    `cgroups`: the `cgroup.procs` files the agent joins before its exec (its caps; the shim
    itself stays out of them). `open_files`: opened read-only on the agent's fds 3, 4, … (its
    sandbox's seccomp filter). `copier_cgroups`: where the shim moves itself while it copies
    a capped log (the role's cpu cap: a chatty agent's output is copied on its cores).
    `box`: `argv` is its role's box around the agent; the run goes through the role's box spare
    when one waits (`forkserver.fork_boxed`), and a spare is asked for the next run.

    Raises FileNotFoundError naming the program when it cannot be found on the
    env's PATH, before anything is started. Returns once the shim has been
    exec'd; the agent itself starts a few milliseconds later.
    """
    check_argv(argv, env, cwd)
    log_path = Path(log_path)
    exit_path = exit_path_for(log_path)
    # A re-used log path must not report the previous attempt's exit.
    exit_path.unlink(missing_ok=True)
    header_prefix = _header_prefix(header or {}, argv)
    head = tail = 0
    if max_log_bytes is not None:
        head, tail = logfile.layout(max_log_bytes, len(header_prefix) + 64)
        header_prefix = _header_prefix({**(header or {}), "log_head": head}, argv)
    # A file, not a pipe: output survives the daemon's death and nothing
    # blocks when nobody reads.
    input_path = _make_input_channel(log_path) if keep_input_open else None
    if input_path is not None and stdin_path is not None:
        raise ValueError("an agent's stdin is either a file or its kept-open input channel")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        with _stdin_for(stdin_path, input_path) as stdin:
            # No cwd: ours, as a cold shim inherits it (a forked one would get the server's).
            # Absolute: the fork server runs in /, where a relative cwd means something else.
            run = {"exit_path": str(exit_path), "header": header_prefix, "argv": argv,
                   "env": env, "cwd": os.path.abspath(cwd or "."), "log": str(log_path),
                   "stdin": str(stdin_path) if stdin_path else None,
                   "input": str(input_path) if input_path else None,
                   "log_head": head, "log_tail": tail, "cgroups": list(cgroups),
                   "files": list(open_files), "copier_cgroups": list(copier_cgroups)}
            # A missing cwd goes the cold way, where Popen raises for it; a forked shim
            # would only report it as the run's exit 127.
            usable = cwd is None or os.path.isdir(cwd)
            forked = _fork_boxed(box, run) if usable and box else None
            if forked is None and usable:
                forked = forkserver.fork_shim(run)
            if forked is None:
                joins = [arg for path in cgroups for arg in ("--cgroup", path)]
                joins += [arg for path in open_files for arg in ("--file", path)]
                joins += [arg for path in copier_cgroups for arg in ("--copier-cgroup", path)]
                shim_argv = forkserver.shim_command(str(exit_path), header_prefix,
                                                    str(log_path), str(head), str(tail),
                                                    *joins, "--", *argv)
                popen = subprocess.Popen(shim_argv, stdin=stdin, stdout=log_fd, stderr=log_fd,
                                         env=env, cwd=cwd, start_new_session=True,
                                         close_fds=True)
                # The shim is our unreaped child, so even if it already exited its
                # create time is still readable.
                started_at = psutil.Process(popen.pid).create_time()
    finally:
        os.close(log_fd)
    if box is not None:
        forkserver.want_box_spare(box)
    if forked is not None:
        # The fork server's child, not ours: watched like a run adopted after a restart.
        handle = _watch(forked.pid, forked.started_at, log_path)
        return SpawnedProcess(forked.pid, forked.started_at, log_path, exit_path, handle)
    handle = ProcessHandle(popen.pid, started_at, log_path, popen=popen)
    return SpawnedProcess(popen.pid, started_at, log_path, exit_path, handle)


def _fork_boxed(box: SparePlan, run: dict) -> forkserver.ForkedShim | None:
    """`run` given to its role's box spare, whose in-box starter opens its files through the
    log dir's bind (`box.source`): by their real paths, which lie there."""
    from taskherd.host.sandbox import within  # loaded already: the box was made there

    real = {key: os.path.realpath(run[key]) for key in ("log", "input", "stdin") if run[key]}
    if not all(within(Path(path), Path(box.source)) for path in real.values()):
        return None  # a stdin file elsewhere: the cold box opens it outside
    # Its cgroups joined from inside by their bound folders when it can (a move of itself);
    # else the daemon moves it in (forkserver.fork_boxed).
    staged = box.staged_cgroups(run["cgroups"]) if run["cgroups"] else None
    joins = {"cgroups": [], "box_cgroups": staged} if staged else {}
    # The header says so (`"box": "spare"`): the argv it shows is the cold box's, the same box.
    return forkserver.fork_boxed(box, {**run, **real, **joins, "argv": list(box.agent_argv),
                                       "header": run["header"] + ', "box": "spare"',
                                       "box_files": list(box.run_files)})


def _make_input_channel(log_path: Path) -> Path:
    path = input_path_for(log_path)
    path.unlink(missing_ok=True)  # a re-used log path's old channel
    os.mkfifo(path, 0o600)  # private: whoever can write it can type into the agent
    return path


@contextlib.contextmanager
def _stdin_for(stdin_path: Path | None, input_path: Path | None):
    if input_path is not None:
        # Read and write: opening never blocks, and with a writer always present (this fd in
        # the shim, for its whole life) the agent never reads an end of input.
        fd = os.open(input_path, os.O_RDWR | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)
    elif stdin_path is not None:
        with open(stdin_path, "rb") as stdin:
            yield stdin
    else:
        yield subprocess.DEVNULL


def adopt(pid: int, started_at: float, log_path: Path, *,
          tolerance: float = START_TIME_TOLERANCE) -> ProcessHandle | None:
    """Re-attach to a run spawned by an earlier daemon (not by this process).

    Returns a live handle if `pid` is alive and started at `started_at` (within
    `tolerance` seconds), otherwise a finished handle whose poll() gives the
    status from the exit file, or UNKNOWN_EXIT without one. Returns None only
    when neither the process, its log nor its exit file exists: nothing was
    ever spawned there.
    """
    log_path = Path(log_path)
    live = _live_handle(pid, started_at, log_path, tolerance)
    if live is not None:
        return live
    if not log_path.exists() and not exit_path_for(log_path).exists():
        return None
    return _ended_handle(pid, started_at, log_path)


def _watch(pid: int, started_at: float, log_path: Path) -> ProcessHandle:
    """A shim the fork server started for us (its log exists): a handle as `adopt` gives.

    The pidfd is opened first, then the process looked at once: the fd pins it, so one look
    tells the shim from a later owner of its pid (`_live_handle` looks before and after, as
    an adopted pid may be anyone's; each look reads /proc three times, on the spawn's path).
    """
    pidfd = _open_pidfd(pid)
    if _same_process_alive(pid, started_at):
        return ProcessHandle(pid, started_at, log_path, pidfd=pidfd)
    if pidfd is not None:
        os.close(pidfd)
    return _ended_handle(pid, started_at, log_path)


def _live_handle(pid: int, started_at: float, log_path: Path,
                 tolerance: float) -> ProcessHandle | None:
    if _same_process_alive(pid, started_at, tolerance):
        pidfd = _open_pidfd(pid)
        # Checked again after opening: the fd pins the process, the first check
        # might have seen a predecessor of the pid.
        if pidfd is None or _same_process_alive(pid, started_at, tolerance):
            return ProcessHandle(pid, started_at, log_path, pidfd=pidfd)
        os.close(pidfd)
    return None


def _ended_handle(pid: int, started_at: float, log_path: Path) -> ProcessHandle:
    handle = ProcessHandle(pid, started_at, log_path)
    handle._status = read_exit_file(handle.exit_path) or UNKNOWN_EXIT
    return handle


def read_exit_file(exit_path: Path) -> ExitStatus | None:
    try:
        data = json.loads(Path(exit_path).read_text())
    except FileNotFoundError:
        return None
    except ValueError:  # not written by us (renames are atomic): say so, don't crash
        return UNKNOWN_EXIT
    return ExitStatus(code=data.get("code"), signal=data.get("signal"),
                      ended_at=data.get("ended_at"), source=data.get("source", "exit_file"))


def unrecorded_spawn(log_path: Path) -> tuple[int, float | None] | None:
    """The shim of a run whose spawn never reached the store (its daemon died between
    starting the agent and recording its pid): (pid, start time) from the header the shim
    writes into the run's log before it starts the agent; None if no shim ever started there.

    The start time is the live process's own when it was created before that header was
    written (then it can only be the shim: two live processes never share a pid); None when
    the shim is gone, so that `adopt` never mistakes a later owner of the pid for it.
    """
    try:
        header = read_header(log_path)
        if header is None:  # no header
            return None
        pid, written = int(header["pid"]), float(header["time"])
    except (TypeError, KeyError, ValueError):  # not a header the shim wrote
        return None
    try:
        process = psutil.Process(pid)
        created = process.create_time()
        # No tolerance: a later owner of the pid, started within a second of the header,
        # would pass for the shim and be stopped or adopted in its place.
        if created <= written and process.status() != psutil.STATUS_ZOMBIE:
            return pid, created
    except psutil.Error:
        pass
    return pid, None


def read_header(log_path: Path) -> dict | None:
    """The header line's fields, or None if the log does not start with one."""
    try:
        with open(log_path, "rb") as log:
            # Bounded: a log that is one long line must not be read whole for its first.
            first_line = log.readline(logfile.HEADER_READ).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    if not first_line.startswith(HEADER_PREFIX):
        return None
    return json.loads(first_line[len(HEADER_PREFIX):])


def input_path_for(log_path: Path | str) -> Path:
    """The run's input channel: a FIFO that is the agent's standard input (on_input = wait)."""
    return Path(f"{log_path}.input")


def send_input(log_path: Path | str, text: bytes) -> None:
    """Write `text` to the agent's standard input through its run's FIFO.

    Raises FileNotFoundError when the run has no input channel, and ProcessLookupError when
    nobody holds its other end any more (the shim, which keeps it open, has exited).
    """
    path = input_path_for(log_path)
    if len(text) > PIPE_BUF:
        raise ValueError(f"an answer is at most {PIPE_BUF} bytes (got {len(text)})")
    try:
        # Non-blocking: opening a FIFO for writing with no reader would wait forever.
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ENXIO:
            raise ProcessLookupError(f"the agent behind {path} is no longer running") from error
        raise
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise FileNotFoundError(f"{path} is not a run's input channel")
        os.write(fd, text)  # at most PIPE_BUF bytes: written whole or not at all
    finally:
        os.close(fd)


def agent_env(base_path: str, extra: Mapping[str, str], taskherd_vars: Mapping[str, str], *,
              inherit_from: Mapping[str, str] = os.environ) -> dict[str, str]:
    """An explicit environment for an agent; nothing leaks in by accident.

    A few session variables are carried over from `inherit_from`, PATH is
    `base_path`, then the role's `extra`, then `taskherd_vars` (which must all
    be TASKHERD_*), and the Claude Code nesting markers are removed last so no
    role can reintroduce them.
    """
    for key in taskherd_vars:
        if not key.startswith("TASKHERD_"):
            raise ValueError(f"taskherd_vars key {key!r} must start with 'TASKHERD_'")
    env = {key: inherit_from[key] for key in CARRIED_OVER_ENV if key in inherit_from}
    env["PATH"] = base_path
    env.update(extra)
    env.update(taskherd_vars)
    for key in REMOVED_ENV:
        env.pop(key, None)
    for key, value in env.items():
        if not isinstance(value, str):
            raise TypeError(f"environment variable {key} must be a str, got {value!r}")
    return env


def terminate(handle: ProcessHandle, grace: float = 10.0) -> ExitStatus:
    """SIGTERM the whole process group, SIGKILL whatever is left after `grace` s.

    Waits until no live process remains in the group (grandchildren that
    ignore SIGTERM included) and returns the agent's exit status.
    """
    _signal_run(handle, signal.SIGTERM)
    if _wait_group_empty(handle, time.monotonic() + grace):
        return handle.poll() or UNKNOWN_EXIT
    _kill_group(handle.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        handle.send_signal(signal.SIGKILL)  # a shim not yet leading its group is not in it
    _wait_group_empty(handle, time.monotonic() + 5.0)
    status = handle.poll()
    if status is not None and status.source in ("shim", "unknown"):
        # SIGKILL took the shim with the group before it could record
        # anything: record it now so that a later adopt() learns it too.
        _record_killed(handle.exit_path, signal.SIGKILL)
        handle._status = read_exit_file(handle.exit_path)
    return handle.poll() or UNKNOWN_EXIT


async def terminate_async(handle: ProcessHandle, grace: float = 10.0) -> ExitStatus:
    """`terminate` without blocking the event loop (runs in a worker thread)."""
    return await asyncio.to_thread(terminate, handle, grace)


def _signal_run(handle: ProcessHandle, signum: int) -> None:
    # Signal the live shim, which re-sends to its group once. Signalling the
    # group directly would also reach the shim, whose forwarding would give
    # the agent the signal twice (a second SIGINT aborts a graceful cleanup).
    if handle.is_alive():
        try:
            handle.send_signal(signum)
            return
        except ProcessLookupError:
            pass
    _kill_group(handle.pid, signum)  # shim gone: orphans may remain in the group


def _kill_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _wait_group_empty(handle: ProcessHandle, deadline: float) -> bool:
    """Bounded polling: grandchildren have no pidfd we could wait on.

    The shim itself is asked first: one just forked by the fork server may not lead its
    group yet, and an empty group would then be mistaken for an ended run.
    """
    interval = 0.005
    while True:
        # poll() also reaps our own shim, whose zombie would count as a member.
        if handle.poll() is not None and not live_group_members(handle.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
        interval = min(interval * 2, 0.05)


def live_group_members(pgid: int) -> list[int]:
    """Pids of non-zombie processes in process group `pgid`.

    Zombies are skipped on purpose: an init that does not reap orphans
    (common in containers) would otherwise make a killed group look alive.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # someone else's process is in there; still look
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (OSError, psutil.Error):
            continue
    return members


def _record_killed(exit_path: Path, signum: int) -> None:
    text = json.dumps({"code": None, "signal": int(signum), "ended_at": time.time(),
                       "source": "terminate"})
    temp_path = Path(f"{exit_path}.tmp.{os.getpid()}")
    # Owner-only like every data file: write_text() left it 0644 under the usual umask.
    fd = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w") as temp_file:
        temp_file.write(text + "\n")
    try:
        os.link(temp_path, exit_path)  # never overwrite a status the shim managed to write
    except FileExistsError:
        pass
    finally:
        temp_path.unlink()
    for leftover in exit_path.parent.glob(exit_path.name + ".tmp.*"):
        leftover.unlink(missing_ok=True)  # the killed shim's half-written file


def _is_zombie(pid: int) -> bool:
    # A zombie's pid is not reused before it is reaped: no start time to compare.
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read()
    except OSError:  # reaped, or not Linux (where the walk is the only way)
        return False
    return text[text.rindex(b")") + 2:][:1] == b"Z"


def _same_process_alive(pid: int, started_at: float,
                        tolerance: float = START_TIME_TOLERANCE) -> bool:
    try:
        process = psutil.Process(pid)
        return (abs(process.create_time() - started_at) <= tolerance
                and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or already gone
        return None


def _is_readable(fd: int) -> bool:
    return forkserver.wait_readable(fd, 0)


def _readable_future(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.Future:
    ready = loop.create_future()

    def on_ready() -> None:
        loop.remove_reader(fd)  # a pidfd stays readable: fire once
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, on_ready)
    return ready


def check_argv(argv: list[str], env: Mapping[str, str], cwd: str | None) -> None:
    """FileNotFoundError naming the program when `argv` cannot be started with `env`."""
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError(f"argv must be a non-empty list of str, got {argv!r}")
    program = argv[0]
    if "/" in program:
        found = os.access(os.path.join(cwd or ".", program), os.X_OK)
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    if not found:
        raise ProgramNotFound(
            f"agent program {program!r} not found or not executable "
            f"(PATH={env.get('PATH', os.defpath)!r}, cwd={cwd!r})")


def _header_prefix(header: Mapping, argv: list[str]) -> str:
    """The header's JSON minus its closing brace; the shim appends pid and time."""
    fields = dict(header)
    fields.setdefault("argv", [_abbreviate(arg) for arg in argv])
    return json.dumps(fields, default=str)[:-1]


def _abbreviate(arg: str) -> str:
    if len(arg) <= HEADER_ARG_LIMIT:
        return arg
    return f"{arg[:HEADER_ARG_LIMIT]}…({len(arg)} chars)"
