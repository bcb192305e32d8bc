"""Supervisor shim: the session leader that outlives nobody and remembers the exit.

Forked for each run by the daemon's fork server (``shim.py --serve``, see `serve` and
``taskherd.forkserver``), or, when none is up, started cold by ``taskherd.procs.spawn`` as
``python -I -S .../shim.py EXIT_PATH HEADER -- ARGV...`` with stdout/stderr already pointing
at the run's log. Either way it writes the log header, starts the agent as its child (same
process group), waits for it, and writes the agent's exit status to EXIT_PATH atomically
before exiting.

Why it exists: after a daemon restart the daemon is no longer the agent's
parent, so waitpid() is impossible and the exit code would be lost; the shim
is the parent that stays.

Kept to builtin modules only (``_signal`` instead of ``signal``, no ``json``):
every import here is paid on every cold spawn (``signal`` alone costs ~5 ms
because it imports ``enum``), and every module the fork server holds is memory its
shims share. Not importable as part of the package's API.
"""

import _signal
import gc
import marshal
import os
import sys
import time

FORWARDED_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
# Python sets these to SIG_IGN for itself; an exec'd agent would inherit the
# ignore (e.g. `yes | head` never dying of SIGPIPE), so the child gets defaults.
RESET_IN_CHILD = (_signal.SIGPIPE, _signal.SIGXFSZ)
EXEC_FAILED_CODE = 127  # the shell's convention for "command not found"

_agent_pid = 0
_pending_signals = []


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


def _write_header(header_prefix):
    # One os.write on an O_APPEND fd: the line lands whole, before the agent
    # exists, so even an empty run leaves proof it was born.
    fields = f'"pid": {os.getpid()}, "time": {time.time():.6f}}}'
    sep = "" if header_prefix.rstrip().endswith("{") else ", "
    os.write(1, ("# taskherd " + header_prefix + sep + fields + "\n").encode())


def _start_agent(argv, env):
    return os.posix_spawnp(
        argv[0], argv, env, setsigdef=RESET_IN_CHILD + FORWARDED_SIGNALS
    )


def main(args, env=None):
    """Run ARGV (after EXIT_PATH HEADER --) with `env` (default: ours) and record its end."""
    global _agent_pid
    exit_path, header_prefix, separator, argv = args[0], args[1], args[2], args[3:]
    if separator != "--" or not argv:
        os.write(2, b"usage: shim.py EXIT_PATH HEADER -- ARGV...\n")
        return 2
    for signum in FORWARDED_SIGNALS:
        _signal.signal(signum, _on_signal)
    _write_header(header_prefix)
    try:
        agent_pid = _start_agent(argv, os.environ if env is None else env)
    except OSError as error:
        os.write(2, f"# taskherd exec failed: {argv[0]}: {error}\n".encode())
        _write_exit_file(exit_path, EXEC_FAILED_CODE, None, 0)
        return EXEC_FAILED_CODE
    _agent_pid = agent_pid
    for signum in _pending_signals:
        _broadcast_to_group(signum)
    _, wait_status = os.waitpid(agent_pid, 0)  # retried on EINTR (PEP 475)
    if os.WIFSIGNALED(wait_status):
        signum = os.WTERMSIG(wait_status)
        _write_exit_file(exit_path, None, signum, agent_pid)
        return 128 + signum
    code = os.waitstatus_to_exitcode(wait_status)
    _write_exit_file(exit_path, code, None, agent_pid)
    return code


def read_run(fd, pending):
    """The next run sent on `fd`, or None at end of input (the sender went away).

    One line of hex-encoded ``marshal`` data, not JSON: ``marshal`` is built in and already
    loaded, while ``import json`` (``re``, ``enum``…) costs as much CPU as the interpreter's
    own start-up. Both ends are the same interpreter (sys.executable), so the format always
    matches; a newline never occurs in hex, so the line frames the run. `pending` (a
    bytearray) keeps what was read past the line for the next call.
    """
    buffer = pending
    while b"\n" not in buffer:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return marshal.loads(bytes.fromhex(line.decode()))


def take_run(run):
    """Take on the run's log, stdin, cwd and environment, then go on as ``main``."""
    log_fd = os.open(run["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    if run.get("input"):
        # The run's input FIFO, read and write: this shim holds it open for the run's life,
        # so the agent never reads an end of input and `taskherd task answer` reaches it.
        stdin_fd = os.open(run["input"], os.O_RDWR)
    else:
        stdin_fd = os.open(run["stdin"] or os.devnull, os.O_RDONLY)
    os.dup2(stdin_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(stdin_fd)
    os.close(log_fd)
    # The agent gets the run's environment as it is; only PATH is set in ours, since
    # posix_spawnp searches our PATH. (Not os.environ.update: its pure-Python machinery
    # would write to pages this shim shares with its fork server.)
    env = run["env"]
    if "PATH" in env:
        os.putenv("PATH", env["PATH"])
    args = [run["exit_path"], run["header"], "--"] + run["argv"]
    if run["cwd"]:
        try:
            os.chdir(run["cwd"])
        except OSError as error:
            _write_header(run["header"])
            os.write(2, f"# taskherd exec failed: cwd {run['cwd']}: {error}\n".encode())
            _write_exit_file(run["exit_path"], EXEC_FAILED_CODE, None, 0)
            return EXEC_FAILED_CODE
    return main(args, env)


def _reap_children(_signum, _frame):
    # The fork server's shims are its children until it exits: reaped as they end, so no
    # zombie waits for the next request.
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _start_ticks(pid):
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    try:
        stat = os.read(fd, 4096)
    finally:
        os.close(fd)
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def serve():
    """``shim.py --serve``: a fork server, one per daemon, that forks a shim for each run.

    Reads runs on stdin (`read_run`), one after another; for each it forks a child that
    starts a new session and runs it as `take_run`, and answers ``PID START_TICKS`` on
    stdout. Every shim forked here shares this process's pages copy-on-write, so one costs
    the few pages it writes to (~0.2 MB) instead of a whole interpreter (~3 MB).

    Single-threaded on purpose: a fork copies only the calling thread, and nothing here
    holds a lock another thread could own. The heap is frozen (`gc.freeze`) so the
    collector never walks, and so never dirties, the pages the shims share. Exits at end of
    input: its owner went away. Shims it forked are not touched by that; they run on,
    re-parented like any shim after a daemon restart.
    """
    gc.collect()
    gc.freeze()
    _signal.signal(_signal.SIGCHLD, _reap_children)
    pending = bytearray()
    while (run := read_run(0, pending)) is not None:
        _fork_one(run)
    return 0


def _fork_one(run):
    # The shim starts the agent only once its pid is on its way to the daemon ("go" comes
    # after the answer): if this server dies first, the shim exits without starting
    # anything, so the daemon, which then starts the run another way, never runs it twice.
    # The answer does not wait for the shim to lead its session: that would be two more
    # wake-ups on a busy machine, and the daemon treats a group that does not exist yet
    # as a shim still running (see procs.terminate).
    go_read, go_write = os.pipe()
    # SIGCHLD held back until the start time is read: a shim that ends at once must not be
    # reaped (and its pid freed) before its identity is known.
    _signal.pthread_sigmask(_signal.SIG_BLOCK, [_signal.SIGCHLD])
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(go_write)
            # Its own session, as a cold shim has: then its group never becomes orphaned
            # when this server exits, which would SIGHUP a stopped agent (job control).
            os.setsid()
            if os.read(go_read, 1):
                os.close(go_read)
                code = _forked_shim(run)
        finally:
            os._exit(code)  # never back into the server's loop, no interpreter teardown
    os.close(go_read)
    try:
        reply = f"{pid} {_start_ticks(pid)}\n"
    except (OSError, ValueError, IndexError):
        reply = f"{pid} 0\n"
    os.write(1, reply.encode())
    os.write(go_write, b"g")
    os.close(go_write)
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [_signal.SIGCHLD])


def _forked_shim(run):
    gc.disable()  # the few objects a shim makes are freed by refcount; no walk of shared pages
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)  # waitpid must see the agent's end
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [_signal.SIGCHLD])
    return take_run(run)  # replaces the server's pipes on 0, 1 and 2 with the run's


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1:]))
