"""Supervisor shim: the session leader that outlives nobody and remembers the exit.

Started by ``taskherd.procs.spawn`` as ``python -I -S .../shim.py EXIT_PATH HEADER -- ARGV...``
with stdout/stderr already pointing at the run's log. It writes the log header,
starts the agent as its child (same process group), waits for it, and writes
the agent's exit status to EXIT_PATH atomically before exiting.

Why it exists: after a daemon restart the daemon is no longer the agent's
parent, so waitpid() is impossible and the exit code would be lost; the shim
is the parent that stays.

Kept to builtin modules only (``_signal`` instead of ``signal``, no ``json``):
every import here is paid on every spawn (``signal`` alone costs ~5 ms
because it imports ``enum``). Not importable as part of the package's API.
"""

import _signal
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


def _start_agent(argv):
    return os.posix_spawnp(
        argv[0], argv, os.environ, setsigdef=RESET_IN_CHILD + FORWARDED_SIGNALS
    )


def main(args):
    global _agent_pid
    exit_path, header_prefix, separator, argv = args[0], args[1], args[2], args[3:]
    if separator != "--" or not argv:
        os.write(2, b"usage: shim.py EXIT_PATH HEADER -- ARGV...\n")
        return 2
    for signum in FORWARDED_SIGNALS:
        _signal.signal(signum, _on_signal)
    _write_header(header_prefix)
    try:
        agent_pid = _start_agent(argv)
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


def warm():
    """``shim.py --warm``: a spare (see ``taskherd.spares``), started before any run needs it,
    so the interpreter's start-up (~10 ms, most of a spawn's latency) is paid while nothing
    waits. Reads one run on stdin (a pipe from the daemon), takes on its log, stdin, cwd and
    environment, and goes on as ``main``. Exits quietly if the pipe closes first (the daemon
    went away).

    The run comes as one line of hex-encoded ``marshal`` data, not JSON: ``marshal`` is built
    in and already loaded, while ``import json`` (``re``, ``enum``…) cost as much CPU as the
    interpreter's own start-up, and with spawns back to back every spare's start-up competes
    with the runs for the same cores. Both ends are the same interpreter (sys.executable), so
    the format always matches; a newline never occurs in hex, so the line frames the run.
    """
    request = b""
    while not request.endswith(b"\n"):
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return 0
        request += chunk
    run = marshal.loads(bytes.fromhex(request.decode()))
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
    # The agent's environment exactly (putenv/unsetenv: posix_spawnp searches this PATH).
    os.environ.clear()
    os.environ.update(run["env"])
    args = [run["exit_path"], run["header"], "--"] + run["argv"]
    if run["cwd"]:
        try:
            os.chdir(run["cwd"])
        except OSError as error:
            _write_header(run["header"])
            os.write(2, f"# taskherd exec failed: cwd {run['cwd']}: {error}\n".encode())
            _write_exit_file(run["exit_path"], EXEC_FAILED_CODE, None, 0)
            return EXEC_FAILED_CODE
    return main(args)


if __name__ == "__main__":
    sys.exit(warm() if sys.argv[1:] == ["--warm"] else main(sys.argv[1:]))
