"""Supervisor shim: the session leader that outlives nobody and remembers the exit.

Forked for each run by the daemon's fork server (``shim.py --serve``, see `serve` and
``taskherd.host.forkserver``), or, when none is up, started cold by ``taskherd.host.procs.spawn`` as
``python -I -S .../shim.py EXIT_PATH HEADER LOG HEAD TAIL [OPTION PATH]... -- ARGV...`` (the
options: `--cgroup`, `--file`, `--copier-cgroup`, see `main`) with stdout/stderr already
pointing at the run's log. Either way the log header is written, the agent started as its
child (same process group; inside the run's cgroups when given: a forked shim's agent is the
child it forked ahead, which took the run and execs it, see `_spare`), and the shim waits for
it and writes the agent's exit status to EXIT_PATH atomically before exiting. A boxed role's
box spare runs ``shim.py --in-box`` inside its box, made before its run (see `in_box`).

With HEAD > 0 the log is capped (a role's ``max_log_bytes``): the agent writes into a pipe and
the shim copies it into the log (`os.splice`, no copy through user space), keeping the first
HEAD bytes and from TAIL to TAIL_ROOM x TAIL of the latest. When the log reaches HEAD + CUT_LINE +
TAIL_ROOM x TAIL bytes, the latest TAIL (from a line's start) is moved down after the head, behind
a line of fixed width saying how many bytes were cut (`_cut_line`), and the file truncated
there: nothing else writes the log, so nothing races with that. A reader that follows the log
(`taskherd.host.logfile.LogCursor`) reads the cut line before and after each read and reads again
when it changed; the line says "cutting" while the move is under way. When the agent ends,
what it left in the pipe is copied before the exit file is written; should a process it left
behind still hold the pipe, a child of the shim copies on to the end of the output (the
daemon stops such leftovers once the run is settled). Should the shim itself be killed
(`kill -9`), the pipe has no reader: the agent's next write gets SIGPIPE, and ends it, as the
daemon would stop an agent whose shim vanished anyway.

Why it exists: after a daemon restart the daemon is no longer the agent's
parent, so waitpid() is impossible and the exit code would be lost; the shim
is the parent that stays.

Kept to builtin modules only (``_signal`` instead of ``signal``, no ``json``):
every import here is paid on every cold spawn (``signal`` alone costs ~5 ms
because it imports ``enum``), and every module the fork server holds is memory its
shims share. The one exception is ``select``, a C extension that imports nothing (~0.3 ms of
a cold start, shared by every forked shim): waiting on the agent's output and on its end at
once, without it, would take a signal handler that raises inside a blocking splice. Not
importable as part of the package's API.
"""

import _signal
import gc
import marshal
import os
import select
import sys
import time

FORWARDED_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
# Python sets these to SIG_IGN for itself; an exec'd agent would inherit the
# ignore (e.g. `yes | head` never dying of SIGPIPE), so the child gets defaults.
RESET_IN_CHILD = (_signal.SIGPIPE, _signal.SIGXFSZ)
EXEC_FAILED_CODE = 127  # the shell's convention for "command not found"
# The line a capped log holds between its head and its tail: one size whatever it says, so
# that it is rewritten in place. taskherd.host.logfile reads it (CUT_LINE_SIZE, CUT_LINE_PREFIX).
CUT_LINE_SIZE = 128
CUT_LINE_PREFIX = b"\n# taskherd cut "
CUTTING = b"(cutting)"
SPLICE_CHUNK = 1 << 16  # a pipe's whole buffer
# The room past the head, in kept tails: a cut moves one tail down per TAIL_ROOM - 1 written,
# so every byte of a chatty agent's output is copied a third of a time more, not once more
# (with room for two tails, the shim's copying doubled its share of the disk's bandwidth).
TAIL_ROOM = 4
ALIGN_WINDOW = 1 << 12  # the kept tail starts at a line when one starts this close to its cut
DRAIN_CHUNKS = 64  # more than the largest pipe buffer (1 MiB) in SPLICE_CHUNKs
NONBLOCK = getattr(os, "SPLICE_F_NONBLOCK", 2)
HAS_SPLICE = hasattr(os, "splice")
PIPE_BUF = 4096  # a pipe's write of at most this many bytes is read whole (POSIX: >= 512)
# With no run waiting, the fork server forks its next spare this long after the last one took
# its run (see `serve`); its owner passes its own (forkserver.NEXT_SPARE_DELAY).
NEXT_SPARE_MS = 10

_agent_pid = 0
_pending_signals: list[int] = []


def _broadcast_to_group(signum):
    """Deliver `signum` once to every member of our process group but us.

    The shim ignores the signal while sending it so its own copy is discarded
    (a signal ignored at generation is dropped); otherwise it would re-broadcast
    its own broadcast forever.
    """
    _signal.signal(signum, _signal.SIG_IGN)
    try:
        os.killpg(os.getpgrp(), signum)
    finally:
        _signal.signal(signum, _on_signal)


def _on_signal(signum, _frame):
    if _agent_pid:
        _broadcast_to_group(signum)
    else:
        # Arrived while the agent was being started: forwarded right after.
        _pending_signals.append(signum)


def _write_exit_file(exit_path, code, signum, agent_pid):
    # temp + rename: a reader (a restarted daemon) sees no file or a whole one,
    # never a half-written status. No fsync: the file must survive the daemon's
    # death (page cache does), not a power cut, after which every agent is dead.
    code_json = "null" if code is None else code
    signal_json = "null" if signum is None else signum
    text = (f'{{"code": {code_json}, "signal": {signal_json}, '
            f'"agent_pid": {agent_pid}, "ended_at": {time.time():.6f}}}\n')
    temp_path = f"{exit_path}.tmp.{os.getpid()}"
    fd = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(temp_path, exit_path)


def _write_header(header_prefix, shim_pid=None, fd=1):
    # One os.write on an O_APPEND fd: the line lands whole, before the agent
    # exists, so even an empty run leaves proof it was born.
    fields = f'"pid": {shim_pid or os.getpid()}, "time": {time.time():.6f}}}'
    sep = "" if header_prefix.rstrip().endswith("{") else ", "
    os.write(fd, ("# taskherd " + header_prefix + sep + fields + "\n").encode())


def _start_agent(argv, env, output_fd=None, cgroups=(), files=()):
    # The agent's stdout and stderr: the log as the shim has it, or the pipe the shim copies.
    if cgroups or files:
        return _start_prepared(argv, env, output_fd, cgroups, files)
    actions = [] if output_fd is None else [(os.POSIX_SPAWN_DUP2, output_fd, 1),
                                            (os.POSIX_SPAWN_DUP2, output_fd, 2)]
    return os.posix_spawnp(
        argv[0], argv, env, file_actions=actions, setsigdef=RESET_IN_CHILD + FORWARDED_SIGNALS
    )


def _start_prepared(argv, env, output_fd, cgroups, files):
    """Start the agent inside its run's cgroups (its caps), with `files` open on fds 3, 4, …
    (its sandbox's seccomp filter, for bwrap): the child moves itself in before its exec, so
    the agent and everything it ever forks are counted from its first instruction
    (posix_spawn has no step for that). The shim itself stays out: a memory cap that kills
    must never kill the process that records the exit."""
    report_read, report_write = os.pipe()  # close on exec: EOF alone says the exec worked
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report_read)
            for path in cgroups:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, b"0")  # 0: the writing process
                finally:
                    os.close(fd)
            if output_fd is not None:
                os.dup2(output_fd, 1)
                os.dup2(output_fd, 2)
            opened = [os.open(path, os.O_RDONLY) for path in files]
            for number, fd in enumerate(opened, start=3):
                if fd != number:
                    os.dup2(fd, number)  # inheritable: the agent's starter reads it
                    os.close(fd)
                else:
                    os.set_inheritable(fd, True)
            for signum in RESET_IN_CHILD + FORWARDED_SIGNALS:
                _signal.signal(signum, _signal.SIG_DFL)
            os.execvpe(argv[0], argv, env)
        except OSError as error:
            os.write(report_write, f"{error.errno} {error}".encode())
        finally:
            os._exit(EXEC_FAILED_CODE)
    os.close(report_write)
    try:
        said = os.read(report_read, 4096)
    finally:
        os.close(report_read)
    if said:
        os.waitpid(pid, 0)
        errno_text, _, message = said.decode("utf-8", "replace").partition(" ")
        raise OSError(int(errno_text), message)
    return pid


def main(args, env=None):
    """Run ARGV (after EXIT_PATH HEADER LOG HEAD TAIL --) with `env` (default: ours) and
    record its end; with HEAD > 0 the agent's output reaches LOG through the shim, capped."""
    global _agent_pid
    given = {"--cgroup": [], "--file": [], "--copier-cgroup": []}
    while len(args) > 6 and args[5] in given:
        # --cgroup: a file the agent's starter writes 0 to, to join its cgroup; --file: one to
        # open on its next fd from 3; --copier-cgroup: one this shim joins to copy the output
        given[args[5]].append(args[6])
        args = args[:5] + args[7:]
    cgroups, files = given["--cgroup"], given["--file"]
    if len(args) < 7 or args[5] != "--":
        os.write(2, b"usage: shim.py EXIT_PATH HEADER LOG HEAD TAIL [--cgroup PROCS]... "
                    b"[--file PATH]... -- ARGV...\n")
        return 2
    exit_path, header_prefix, log_path, argv = args[0], args[1], args[2], args[6:]
    head, tail = int(args[3]), int(args[4])
    for signum in FORWARDED_SIGNALS:
        _signal.signal(signum, _on_signal)
    _write_header(header_prefix)
    output_read = output_write = None
    if head > 0:
        output_read, output_write = os.pipe()  # both close on exec: the agent gets fd 1 and 2
    try:
        agent_pid = _start_agent(argv, os.environ if env is None else env, output_write,
                                 cgroups, files)
    except OSError as error:
        os.write(2, f"# taskherd exec failed: {argv[0]}: {error}\n".encode())
        _write_exit_file(exit_path, EXEC_FAILED_CODE, None, 0)
        return EXEC_FAILED_CODE
    finally:
        if output_write is not None:
            os.close(output_write)  # the agent's copies are the pipe's only writers now
    _agent_pid = agent_pid
    for signum in _pending_signals:
        _broadcast_to_group(signum)
    if output_read is not None:
        _join(given["--copier-cgroup"])
        _copy_output(output_read, _CappedLog(log_path, head, tail), agent_pid)
    return _record_end(exit_path, agent_pid)


def _record_end(exit_path, agent_pid):
    """Wait for the agent and write its exit file; the shim's exit code."""
    _, wait_status = os.waitpid(agent_pid, 0)  # retried on EINTR (PEP 475)
    if os.WIFSIGNALED(wait_status):
        signum = os.WTERMSIG(wait_status)
        _write_exit_file(exit_path, None, signum, agent_pid)
        return 128 + signum
    code = os.waitstatus_to_exitcode(wait_status)
    _write_exit_file(exit_path, code, None, agent_pid)
    return code


def _join(cgroup_files):
    """Move this shim (one thread) into the given cgroups; a cgroup that refuses leaves the
    shim where it was (its copying merely uncapped), never the run unrecorded."""
    for path in cgroup_files:
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError:
            pass


class _CappedLog:
    """The run's log as the shim writes it past its header: its first `head` bytes, then the
    latest output, cut down to its last `tail` bytes (from a line's start) whenever it reaches
    TAIL_ROOM x tail past the head and its cut line. Written at explicit offsets through a
    descriptor of its own (no O_APPEND: the tail is moved down in place)."""

    __slots__ = ("fd", "size", "head", "tail", "limit", "cut", "_splice")

    def __init__(self, path, head, tail):
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        # The header, or more from an earlier attempt (lseek, not fstat: a forked shim owns
        # each page it writes, and a stat result is some twenty new objects).
        self.size = os.lseek(self.fd, 0, os.SEEK_END)
        self.head = max(head, self.size)  # the header is never cut
        self.tail = tail
        self.limit = self.head + CUT_LINE_SIZE + TAIL_ROOM * tail
        self.cut = -1  # bytes cut so far; -1: none yet (no cut line in the file)
        self._splice = HAS_SPLICE

    def take(self, pipe_fd, flags=0):
        """Copy what the pipe holds (at most one chunk) to the log; 0 at end of output."""
        try:
            if self.size >= self.limit:
                self._cut_middle()
            count = min(SPLICE_CHUNK, self.limit - self.size)
            moved = self._move(pipe_fd, count, flags)
        except BlockingIOError:
            raise
        except OSError:
            # The log cannot take it (a full disk, a quota): the output is dropped, not left
            # in the pipe, so the agent goes on as it would writing to a full disk itself.
            if flags:
                os.set_blocking(pipe_fd, False)
            return len(os.read(pipe_fd, SPLICE_CHUNK))
        self.size += moved
        return moved

    def _move(self, pipe_fd, count, flags):
        if self._splice:
            try:
                return os.splice(pipe_fd, self.fd, count, offset_dst=self.size, flags=flags)
            except OSError as error:
                if error.errno not in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: a file
                    raise                            # system splice cannot write: by hand
                self._splice = False
        if flags:
            os.set_blocking(pipe_fd, False)
        data = os.read(pipe_fd, count)
        view = memoryview(data)
        while view:
            view = view[os.pwrite(self.fd, view, self.size + len(data) - len(view)):]
        return len(data)

    def _cut_middle(self):
        keep_from = self.size - self.tail
        start = os.pread(self.fd, ALIGN_WINDOW, keep_from).find(b"\n")
        if start >= 0:
            keep_from += start + 1  # the kept tail begins with a whole line
        kept = self.size - keep_from
        # Order matters to a reader (taskherd.host.logfile): the line says "cutting" before a byte
        # moves, and its new count is written only once the file is whole again.
        os.pwrite(self.fd, _cut_line(CUTTING), self.head)
        _copy_within(self.fd, keep_from, self.head + CUT_LINE_SIZE, kept)
        os.ftruncate(self.fd, self.head + CUT_LINE_SIZE + kept)
        gone_before = max(self.cut, 0)
        cut_line_before = CUT_LINE_SIZE if self.cut >= 0 else 0
        # Bytes of output between the head and the kept tail, the cut line's own not counted.
        self.cut = gone_before + keep_from - self.head - cut_line_before
        os.pwrite(self.fd, _cut_line(str(self.cut).encode()), self.head)
        self.size = self.head + CUT_LINE_SIZE + kept


def _cut_line(count):
    text = (CUT_LINE_PREFIX + count + b" bytes of output here; the log keeps its first and last"
            b" part")
    return text[:CUT_LINE_SIZE - 1].ljust(CUT_LINE_SIZE - 1) + b"\n"


def _copy_within(fd, source, target, count):
    """Copy `count` bytes of the file from `source` to `target` (ranges apart)."""
    while count > 0:
        try:
            moved = os.copy_file_range(fd, fd, count, source, target)
        except (OSError, AttributeError):  # EXDEV, EINVAL on some file systems: by hand
            moved = os.pwrite(fd, os.pread(fd, min(count, 1 << 20), source), target)
        if moved <= 0:
            return
        source, target, count = source + moved, target + moved, count - moved


def _copy_output(pipe_fd, log, agent_pid):
    """Copy the agent's output into `log` until the agent has ended and what it wrote is in.
    Should a process it left behind still hold the pipe, a child of this shim copies on to
    the end of the output, so that the exit file is written now."""
    try:
        agent_fd = os.pidfd_open(agent_pid)
    except (OSError, AttributeError):  # Linux < 5.3: the exit waits for the end of output
        agent_fd = None
    # select(), not a poll object: fewer objects made and touched in a shim that owns each page
    # it writes; its descriptors are few, far below select()'s limit of 1024.
    watched = [pipe_fd] if agent_fd is None else [pipe_fd, agent_fd]
    while True:
        ready = select.select(watched, (), ())[0]  # EINTR retried (PEP 475)
        if agent_fd in ready:
            break
        if pipe_fd in ready and not log.take(pipe_fd):
            os.close(pipe_fd)  # end of output: every writer has closed the pipe
            if agent_fd is not None:
                os.close(agent_fd)
            return
    os.close(agent_fd)
    # The agent has ended, its descriptors closed: what it wrote is in the pipe. More than a
    # pipe can hold, or no end of output, means another process writes there.
    try:
        for _ in range(DRAIN_CHUNKS):
            if not log.take(pipe_fd, NONBLOCK):
                os.close(pipe_fd)
                return
    except BlockingIOError:
        pass
    _copy_on_in_child(pipe_fd, log)
    os.close(pipe_fd)


def _copy_on_in_child(pipe_fd, log):
    try:
        pid = os.fork()
    except OSError:
        return  # none to copy on: the leftovers get SIGPIPE at their next write
    if pid:
        return
    code = 1
    try:
        for signum in FORWARDED_SIGNALS:
            _signal.signal(signum, _signal.SIG_DFL)  # stopped with the leftovers, not forwarded
        os.set_blocking(pipe_fd, True)
        while log.take(pipe_fd):
            pass
        code = 0
    finally:
        os._exit(code)  # never back into the shim's own path: it writes the exit file


def read_line(fd, pending):
    """The next line on `fd` (without its newline), or None at end of input.

    `pending` (a bytearray) keeps what was read past the line for the next call.
    """
    buffer = pending
    while b"\n" not in buffer:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def read_run(fd, pending):
    """The next run sent on `fd`, or None at end of input (the sender went away).

    One line of hex-encoded ``marshal`` data, not JSON: ``marshal`` is built in and already
    loaded, while ``import json`` (``re``, ``enum``…) costs as much CPU as the interpreter's
    own start-up. Both ends are the same interpreter (sys.executable), so the format always
    matches; a newline never occurs in hex, so the line frames the run.
    """
    line = read_line(fd, pending)
    return None if line is None else marshal.loads(bytes.fromhex(line.decode()))


def _reap_children(_signum, _frame):
    # The fork server's shims are its children until it exits: reaped as they end, so no
    # zombie waits for the next request.
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def serve(next_spare_ms=NEXT_SPARE_MS, burst_ms=NEXT_SPARE_MS):
    """``shim.py --serve [NEXT_SPARE_MS BURST_MS]``: a fork server, one per daemon, that forks
    a shim for each run.

    It forks a spare shim ahead of each run and does nothing else; the spare has forked its
    agent's starter (`_spare`), which reads the run from the server's input itself
    (`read_run`: one request at a time, so nothing past its line is there), answers
    ``PID START_TICKS`` (its shim's) on the server's output, and tells the server, which
    forks the next spare when another run waits on its input, else NEXT_SPARE_MS later (at
    once in a burst: a spare taken within BURST_MS of its fork). The
    fork, and the copy-on-write faults that follow it in both processes, so happen while
    nobody waits: with a thousand shims alive, a fork now and then takes several
    milliseconds, which a run would otherwise wait for between its claim and its agent's
    start; nor beside the exec of the agent just started, which they slowed by ~1 ms on a
    2-core machine.

    Memory: every shim forked here shares this process's pages copy-on-write and owns only
    the pages written after its fork, on either side (a page the server writes before
    forking the next spare stays the spare's alone, its old frame). Every object Python
    touches is written (its reference count), so the server's loop is a pipe, a fork and a
    one-byte read (~90 KiB copied per run, as a bare Python fork loop), and the work of a
    run (reading, answering, opening its files, building its argv) is done by the starter,
    whose copies go away at its exec: the shim that stays writes only what it keeps.
    (With the server reading, answering and handing over each run, and the shim preparing
    it, ~600 KiB stayed with every shim.)

    Single-threaded on purpose: a fork copies only the calling thread, and nothing here
    holds a lock another thread could own. The heap is frozen (`gc.freeze`) so the
    collector never walks, and so never dirties, the pages the shims share. Exits at end of
    input (its owner went away: the spare's starter reads it and says so), or when no
    process can be forked (the owner starts its runs cold meanwhile). Shims it forked are
    not touched by that; they run on, re-parented like any shim after a daemon restart.
    """
    _warm_capped_log()
    _rehearse_run(WARM_UP_CALLS)
    gc.collect()
    gc.freeze()
    gc.disable()  # what the server and its shims make is freed by refcount: no walk
    _signal.signal(_signal.SIGCHLD, _reap_children)
    server = os.getpid()
    _watch_own_end()
    devnull = os.open(os.devnull, os.O_RDWR)  # each spare's 0 and 1 (not inherited)
    next_spare, burst = next_spare_ms / 1000, burst_ms / 1000
    up = UP
    while True:
        told_read, told_write = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # EAGAIN, ENOMEM: no spare to read the next run, so none may wait
            return 1
        if pid == 0:
            _spare(server, told_read, told_write, devnull)
        os.close(told_write)
        if up is not None:
            # Said once, its first spare forked: the owner sends runs only from here, so
            # that none waits for this start-up (an interpreter, the warm-ups above: tens
            # of milliseconds) on the way from its claim to its agent's exec.
            _answer(up)
            up = None
        # Taken within `burst` s of its fork: runs come in a burst.
        in_burst = burst > 0 and select.select((told_read,), (), (), burst)[0]
        # b"": the spare ended without a run (killed): another is forked at once.
        told = os.read(told_read, 1)
        if told == TOOK_RUN and not in_burst:
            # The next spare is forked once another run waits on our input (or it ended),
            # else `next_spare` s after this one took its run, when its agent has long been
            # exec'd: its two forks (ours, the spare's of its starter) then compete neither
            # with that exec nor with the agent's first milliseconds (its dynamic linking);
            # forked at once, they slowed the agent's start by ~1 ms on a 2-core machine. In
            # a burst it is forked at once, as the last run is prepared: each run would wait
            # for a fork otherwise (300 agents started in 4.5 s, not 1.9). select(), few
            # objects: each one made or touched here is a page the spare forked next owns
            # (`bench/shim_pages.py`).
            select.select(INPUT, (), (), next_spare)
        os.close(told_read)
        if told == END_OF_INPUT:
            return 0


_server_end = None  # the server's pidfd (its own), readable once it ended: its starters look


def _watch_own_end():
    """Open the server's pidfd on itself (close-on-exec), which its starters inherit: one poll
    tells one whether the server was alive after its answer (see `_starter`), where reading
    its shim's /proc stat for its parent took three system calls and the parsing of a line, on
    the way from a claim to the exec. Without pidfds (Linux < 5.3) they read the stat."""
    global _server_end
    try:
        _server_end = os.pidfd_open(os.getpid())
    except (AttributeError, OSError):
        _server_end = None


def _server_gone(server, shim):
    """Whether the server ended (so its shim's parent is no longer the server)."""
    if _server_end is not None:
        return bool(select.select((_server_end,), (), (), 0)[0])
    return int(_stat_fields(shim)[1]) != server


TOOK_RUN, END_OF_INPUT = b"R", b"E"  # what a spare tells its server
UP = b"up\n"  # what the server tells its owner once it can take runs
INPUT = (0,)  # the server's input, where the daemon's runs wait
WARM_UP_CALLS = 10  # more than Python 3.11 runs a function before specializing its code


def _warm_capped_log():
    """Make capped logs (on /dev/null) here, before the shims are forked: the first ones
    write what a class's first instances write once (its code specialized, its attributes'
    lookups cached), which each shim would otherwise copy for itself (~50 KiB a shim); a
    shim's own then writes little more than the new object."""
    for _ in range(WARM_UP_CALLS):
        os.close(_CappedLog(os.devnull, 1, 1).fd)


# A run as the daemon sends one, of a usual size: read ahead of any run (`_rehearse_run`).
_SAMPLE_RUN = {"exit_path": "/" + "x" * 80, "header": "x" * 200, "argv": ["x" * 20] * 3,
               "env": {f"X{number}": "x" * 60 for number in range(12)}, "cwd": "/",
               "log": "/" + "x" * 80, "stdin": None, "input": None, "log_head": 1,
               "log_tail": 1, "cgroups": [], "files": [], "copier_cgroups": []}


def _rehearse_run(times):
    """Read a made-up run `times` times as a starter reads its own, and build what it tells
    its shim. Here in the server, before the spares are forked, the code's specialization
    is done once, in pages every starter shares; in a starter, as it waits, the pages the
    reading writes (the allocator's pools, the reference counts of what it touches) become
    its own before its run comes, not on the way from the claim to the exec (~0.15 ms of
    it on a 2-core machine; they go away with its exec)."""
    line = marshal.dumps(_SAMPLE_RUN).hex().encode() + b"\n"
    for _ in range(times):
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, line)
            run = read_run(read_end, bytearray())
        finally:
            os.close(read_end)
            os.close(write_end)
        marshal.dumps((run["exit_path"], run.get("input"), run["log"], run.get("log_head", 0),
                       run.get("log_tail", 0), run.get("copier_cgroups", [])))


def _rehearse_start(shim):
    """A starter's steps from its run's log to the agent's exec, on /dev/null and with no
    effect, before its run comes: the pages they write (the reference counts of the functions
    and constants they use, the header's strings) become the starter's while it waits, not
    by copy-on-write faults on the way from the claim to the exec (~25 of the ~50 it met
    there, ~2 µs each on a 2-core VM)."""
    fd = os.open(os.devnull, os.O_WRONLY | os.O_APPEND)
    try:
        _write_header(_SAMPLE_RUN["header"], shim, fd)
        os.close(_above(os.dup(fd), 3))
        os.dup2(fd, fd)
        for signum in RESET_IN_CHILD + FORWARDED_SIGNALS:
            _signal.signal(signum, _signal.getsignal(signum))  # as it was, until the exec
        os.write(fd, marshal.dumps(_SAMPLE_RUN["env"]))
        _SAMPLE_RUN["env"].get("PATH", os.defpath).split(":")
    finally:
        os.close(fd)


def _spare(server, told_read, told_write, devnull):
    """A forked shim: fork the starter of its agent now, then wait for it; never returns.

    What it does from its fork on is written so as to touch few objects: a forked shim owns
    every page it writes, and Python writes the reference count of each object it touches
    (a page or more for each function called the first time, each new object; `python
    bench/shim_pages.py` shows them). The run's work is its starter's, whose pages go away
    at its exec.
    """
    global _agent_pid
    code = 1
    try:
        os.close(told_read)
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)  # waitpid must see the agent's end
        # Its own session, as a cold shim has: then its group never becomes orphaned
        # when this server exits, which would SIGHUP a stopped agent (job control).
        os.setsid()
        report_read, report_write = os.pipe()
        output_read, output_write = os.pipe()  # the agent's output, when its log is capped
        agent = os.fork()
        if agent == 0:
            os.close(report_read)
            _starter(server, told_write, report_write, output_read, output_write)
        # From here a signal is forwarded to the group: before its exec the starter (with
        # the default actions) dies of it, as its agent would.
        _agent_pid = agent
        for signum in FORWARDED_SIGNALS:
            _signal.signal(signum, _on_signal)
        os.close(told_write)
        os.close(report_write)
        os.close(output_write)
        if _server_end is not None:
            os.close(_server_end)  # its starter's to look at
        # The server's pipes to its owner are not kept: a copy of them here would hide the
        # server's end from the owner (no EOF, no broken pipe). The starter has its own.
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        told = os.read(report_read, PIPE_BUF)  # its starter's one write: whole
        while len(told) >= PIPE_BUF and (more := os.read(report_read, PIPE_BUF)):
            told += more  # (paths longer than the pipe writes at once)
        code = _shim_of(agent, told, output_read)
    finally:
        os._exit(code)  # never back into the server's loop, no interpreter teardown


def _shim_of(agent, told, output_read):
    """What a forked shim does while its agent runs, once its starter `told` it what it must
    know: as `main` does once it started its agent. An exec that failed ends the starter with
    EXEC_FAILED_CODE, and the reason in the log."""
    if not told:  # the starter ended without a run (end of input, its server gone)
        os.waitpid(agent, 0)
        return 1
    exit_path, input_path, log_path, head, tail, copier_cgroups = marshal.loads(told)
    if input_path:
        # The run's input FIFO, read and write: this shim holds it open for the run's life,
        # so the agent never reads an end of input and `taskherd task answer` reaches it.
        os.open(input_path, os.O_RDWR)
    if head > 0:
        if copier_cgroups:
            _join(copier_cgroups)
        _copy_output(output_read, _CappedLog(log_path, head, tail), agent)
    else:
        os.close(output_read)
    return _record_end(exit_path, agent)


def _starter(server, told_write, report_write, output_read, output_write):
    """The agent's starter, forked by its shim ahead of the run: waits for the run, answers
    for its shim, tells it what it must know (`_shim_of`), prepares the run and becomes its
    agent; never returns. The agent starts only once the answer is on its way to the daemon
    and the server is known to have been alive after it: the daemon reads what came before
    the server's end (see forkserver.fork_shim), so a run it gave up on, and starts cold,
    is never also started here. A starter whose server or shim died exits without reading."""
    code = EXEC_FAILED_CODE
    try:
        os.close(output_read)
        shim = os.getppid()
        start_ticks = _stat_fields(shim)[19].decode()
        _rehearse_run(1)
        _rehearse_start(shim)
        waiting = select.poll()
        waiting.register(0, select.POLLIN)
        for fd in (told_write, report_write):
            waiting.register(fd, 0)  # POLLERR once the reading end is closed: its holder died
        if set(dict(waiting.poll())) - {0}:
            return
        run = read_run(0, bytearray())
        if run is None:
            os.write(told_write, END_OF_INPUT)
            return
        channel = _open_channel(run) if run.get("box_spare") else None
        _answer(f"{shim} {start_ticks}\n".encode())
        os.write(told_write, TOOK_RUN)  # its input is the next run's from here
        os.close(told_write)
        if _server_gone(server, shim):
            return  # the server's end came before the daemon could know of this run
        if run.get("box_spare"):
            if channel is not None:
                _become_box(run, channel, shim, start_ticks, report_write, output_write)
            return
        _become_agent(run, shim, report_write, output_write)
    finally:
        os._exit(code)


def _become_agent(run, shim, report_write, output_write):
    """Take on the run's log (its header written), stdin, cwd, cgroups and files, tell the
    shim what it needs, and exec the agent; when that fails, say why in the log (the starter
    then ends with EXEC_FAILED_CODE)."""
    log_fd = os.open(run["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    _write_header(run["header"], shim)
    told = marshal.dumps((run["exit_path"], run.get("input"), run["log"],
                          run.get("log_head", 0), run.get("log_tail", 0),
                          run.get("copier_cgroups", [])))
    if run.get("input"):
        stdin_fd = os.open(run["input"], os.O_RDWR)
    else:
        stdin_fd = os.open(run["stdin"] or os.devnull, os.O_RDONLY)
    os.dup2(stdin_fd, 0)
    os.close(stdin_fd)
    files = run.get("files", ())
    # The agent's files go on 3, 4, …: what is still needed after them moves out of the way.
    log_fd, report_write = (_above(fd, 3 + len(files)) for fd in (log_fd, report_write))
    what = run["argv"][0]
    try:
        if run["cwd"]:
            what = f"cwd {run['cwd']}"
            os.chdir(run["cwd"])
            what = run["argv"][0]
        for path in run.get("cgroups", ()):
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # 0: the writing process
            finally:
                os.close(fd)
        if run.get("log_head", 0) > 0:
            os.dup2(output_write, 1)
            os.dup2(output_write, 2)
        for number, path in enumerate(files, start=3):
            fd = os.open(path, os.O_RDONLY)
            if fd != number:
                os.dup2(fd, number)  # inheritable: bwrap reads it
                os.close(fd)
            else:
                os.set_inheritable(fd, True)
        for signum in RESET_IN_CHILD + FORWARDED_SIGNALS:
            _signal.signal(signum, _signal.SIG_DFL)
        # Last: the shim wakes (to open the log it copies into, then wait) while this execs.
        os.write(report_write, told)
        told = b""
        _exec(run["argv"], run["env"])
    except OSError as error:
        os.write(log_fd, f"# taskherd exec failed: {what}: {error}\n".encode())
        if told:
            os.write(report_write, told)


def _open_channel(request):
    """A box spare's channel, opened before its answer: once the daemon knows of the spare, a
    run written there has a reader (an open that finds none says the spare is gone)."""
    try:
        return os.open(request["channel"], os.O_RDWR)  # never an end of input: see `in_box`
    except OSError:
        return None  # answered all the same, then gone: its runs go the cold way


def _become_box(request, channel, shim, start_ticks, report_write, output_write):
    """A box spare (``forkserver.want_box_spare``): exec bwrap with its role's options around
    the in-box starter (`in_box`), which waits in there for a run on a channel of its own.
    What it must know of its shim (pid, start ticks) is known here, outside its PID
    namespace, and passed in; so are the shim's pipes, the server's (its 0 and 1) and the
    box's seccomp filter (on 3, 4, …), all inherited through bwrap."""
    files = request.get("files", ())
    kept = [_above(fd, 3 + len(files)) for fd in (channel, report_write, output_write)]
    for number, path in enumerate(files, start=3):
        fd = os.open(path, os.O_RDONLY)
        if fd != number:
            os.dup2(fd, number)  # inheritable: bwrap reads it
            os.close(fd)
        else:
            os.set_inheritable(fd, True)
    for fd in kept:
        os.set_inheritable(fd, True)
    for signum in RESET_IN_CHILD + FORWARDED_SIGNALS:
        _signal.signal(signum, _signal.SIG_DFL)
    argv = [*request["box_spare"], "--", sys.executable, "-I", "-S", os.path.abspath(__file__),
            "--in-box", *map(str, kept), str(shim), start_ticks, request["stage"],
            request["source"], f"{os.getuid()}:{os.getgid()}"]
    os.execve(argv[0], argv, {})


# What the in-box starter calls through ctypes (<linux/mount.h>, <linux/prctl.h>,
# <linux/capability.h>).
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
CLONE_NEWUSER = 0x10000000
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _Kernel:
    """The calls Python has no module for, loaded before the run comes (ctypes costs
    milliseconds to import and resolve, which a run would wait for)."""

    def __init__(self):
        import ctypes

        self.ctypes = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open("/proc/sys/kernel/cap_last_cap", os.O_RDONLY)
        try:
            self.last_cap = int(os.read(fd, 32))
        finally:
            os.close(fd)

    def _check(self, result, what):
        if result != 0:
            number = self.ctypes.get_errno()
            raise OSError(number, f"{what}: {os.strerror(number)}")

    def bind_read_only(self, source, target):
        self._check(self.libc.mount(source.encode(), target.encode(), None, MS_BIND, None),
                    f"bind {target}")
        self._check(self.libc.mount(None, target.encode(), None,
                                    MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                                    None), f"read-only {target}")

    def cover(self, path):
        """An empty read-only tmpfs over `path`: what was mounted there can no longer be
        reached by any path. Not an unmount, which waits for an RCU grace period (0.1 to
        1.5 ms on the way to the agent's exec). The agent holds no capability, so it cannot
        take the cover off; in a user namespace of its own it gets a copy of it locked to
        what it covers (the kernel's rule for mounts from a more privileged namespace), as
        bwrap's own hiding of the data dir is."""
        self._check(self.libc.mount(b"tmpfs", path.encode(), b"tmpfs",
                                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"mode=0"),
                    f"cover {path}")

    def become(self, uid, gid):
        """Be `uid`:`gid` again, as the agent of a box made for its run alone is: a box spare
        of a daemon run as a normal user is made as root of its user namespace (bwrap's own
        second namespace, mapping the user back, would own none of the box's mounts, which the
        starter could then not make), so the starter enters a user namespace of its own that
        maps the user back, once its mounts are made (bwrap gave it CAP_SETFCAP for this: the
        kernel lets a namespace map its parent's root only to one who had it)."""
        self._check(self.libc.unshare(CLONE_NEWUSER), "unshare a user namespace")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} 0 1"),
                           ("gid_map", f"{gid} 0 1")):
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)

    def drop_capabilities(self):
        """None left, none to gain: the bounding set emptied (CAP_SETPCAP, needed for that,
        last), the ambient set cleared, then effective, permitted and inheritable zeroed.
        bwrap set no_new_privs: no setuid program or file capability gives any back."""
        for cap in range(self.last_cap + 1):
            self._check(self.libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "drop bounding cap")
        self._check(self.libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0),
                    "clear ambient caps")
        header = (self.ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
        data = (self.ctypes.c_uint32 * 6)()
        self._check(self.libc.capset(header, data), "capset")


def in_box(args):
    """``shim.py --in-box CHANNEL REPORT OUTPUT SHIM START_TICKS STAGE SOURCE UID:GID``: a box
    spare's starter, run by bwrap inside its role's box, made before any run was claimed.

    It waits for one run on CHANNEL (a FIFO of its own the daemon writes), and goes away
    when the daemon does (its fork server's input, our 0, hangs up) or its shim does. Then,
    as `_starter` and `_become_agent` do outside: it answers for its shim on the server's
    output (our 1), takes on the run's log (header written), stdin and input through STAGE
    (a bind of SOURCE, the daemon's log dir, that only it uses), binds the run's files
    read-only at their real paths, covers STAGE's tmpfs with an empty one, drops every
    capability (bwrap gave it CAP_SYS_ADMIN and CAP_SETPCAP for this alone), tells its
    shim and execs the agent. A
    run with caps has it join its cgroups first, through their folders bound in for this
    (cgroup v1; covered then), or finds it moved in by the daemon (v2: the box's
    /sys/fs/cgroup is read-only, and its cgroup namespace would refuse the move)."""
    channel, report, output = (int(fd) for fd in args[:3])
    shim, start_ticks, stage, source = int(args[3]), args[4], args[5], args[6]
    uid, gid = (int(number) for number in args[7].split(":"))
    for fd in (channel, report, output):
        os.set_inheritable(fd, False)  # none of them is the agent's
    kernel = _Kernel()
    waiting = select.poll()
    waiting.register(channel, select.POLLIN)
    for fd in (0, report):
        waiting.register(fd, 0)  # POLLHUP, POLLERR: the daemon, or the shim, went away
    ready = dict(waiting.poll())
    if set(ready) - {channel}:
        return 1
    run = read_run(channel, bytearray())
    if run is None:
        return 1
    _answer(f"{shim} {start_ticks}\n".encode())

    def staged(path):
        return stage + path[len(source):]

    told = marshal.dumps((run["exit_path"], run.get("input"), run["log"],
                          run.get("log_head", 0), run.get("log_tail", 0),
                          run.get("copier_cgroups", [])))
    try:
        log_fd = os.open(staged(run["log"]), os.O_WRONLY | os.O_APPEND)
    except OSError:
        os.write(report, told)  # its shim records the exit (127) all the same
        return EXEC_FAILED_CODE
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    _write_header(run["header"], shim)
    what = "its box"
    try:
        if run.get("input"):
            stdin_fd = os.open(staged(run["input"]), os.O_RDWR)
        else:
            stdin_fd = os.open(staged(run["stdin"]) if run["stdin"] else os.devnull,
                               os.O_RDONLY)
        os.dup2(stdin_fd, 0)  # the server's input is not the agent's
        os.close(stdin_fd)
        what = "its cgroups"
        for path in run.get("box_cgroups") or ():
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # 0: the writing process (the kernel's fast path)
            finally:
                os.close(fd)
        what = "its run files"
        for path in run["box_files"]:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)  # in the hiding tmpfs
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
            kernel.bind_read_only(staged(path), path)
        # The stage's tmpfs, with the log dir's bind and the cgroup folders' in it: covered
        # whole by one mount.
        kernel.cover(os.path.dirname(stage))
        if os.getuid() != uid:  # root of the box's user namespace: see _Kernel.become
            kernel.become(uid, gid)
        what = f"cwd {run['cwd']}"
        os.chdir(run["cwd"])
        what = run["argv"][0]
        if run.get("log_head", 0) > 0:
            os.dup2(output, 1)
            os.dup2(output, 2)
        for signum in RESET_IN_CHILD + FORWARDED_SIGNALS + (_signal.SIGINT,):
            _signal.signal(signum, _signal.SIG_DFL)
        kernel.drop_capabilities()
        os.write(report, told)
        told = b""
        _exec(run["argv"], run["env"])
    except OSError as error:
        os.write(log_fd, f"# taskherd exec failed: {what}: {error}\n".encode())
        if told:
            os.write(report, told)
    return EXEC_FAILED_CODE


def _exec(argv, env):
    """execvpe, searching the agent's PATH: os.execvpe's own search (get_exec_path, with its
    warnings filters) takes about a millisecond in a freshly forked interpreter, on the way
    from a claim to the agent's start. Raises OSError as execvpe does."""
    program = argv[0]
    if "/" in program:
        os.execve(program, argv, env)
    failed = None
    for folder in env.get("PATH", os.defpath).split(":"):
        try:
            os.execve(f"{folder or '.'}/{program}", argv, env)
        except (FileNotFoundError, NotADirectoryError) as error:
            failed = failed or error
        except OSError as error:  # EACCES, ENOEXEC…: said unless a later folder has it
            if failed is None or isinstance(failed, (FileNotFoundError, NotADirectoryError)):
                failed = error
    raise failed or FileNotFoundError(2, "No such file or directory", program)


def _above(fd, floor):
    """`fd`, or a copy of it numbered `floor` or more in its place."""
    held = []
    while fd < floor:
        held.append(fd)
        fd = os.dup(fd)  # the lowest number free, past those held
    for old in held:
        os.close(old)
    return fd


def _answer(data):
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def _stat_fields(pid):
    """/proc/PID/stat's fields after the command's name: [1] the parent's pid, [19] the start
    time in clock ticks since boot."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    try:
        stat = os.read(fd, 4096)
    finally:
        os.close(fd)
    return stat[stat.rindex(b")") + 2:].split()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(serve(*map(int, sys.argv[2:4])))
    sys.exit(in_box(sys.argv[2:]) if sys.argv[1:2] == ["--in-box"] else main(sys.argv[1:]))
