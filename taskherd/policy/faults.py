"""Whose fault a failure is: the agent's, which costs its task a strike, or the machine's,
which costs nothing. A machine's fault (`model.Fault`) puts the task back in the queue as it
was and pauses what met it, with the reason shown (`taskherd status`, `doctor`, the board,
the delivery targets), until a probe passes: a full disk pauses the node, a chat endpoint
that is down (`endpoint_fault`) pauses its runtime.

This module is the one place that says which; every path that meets a failure asks it: the
supervisor when a run cannot start, when a run ends and when its settle cannot be written,
the dispatcher before it claims (the free-space floor), the chat runtime when its call
fails. Pure: it judges errors and figures handed to it and reads nothing itself
(`diskspace.py` reads the disk).
"""

from __future__ import annotations

import errno
from collections.abc import Iterable

from taskherd.model import Fault, Outcome
from taskherd.model.record import Record
from taskherd.policy.sizes import format_size

# What a disk answers when it takes no more: full, over the user's quota, mounted read-only.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
# How a run can end when its disk fills under it without the agent being at fault: its process
# died writing its output or its exit status (crashed), it exited non-zero on a write that
# failed (failed, unless it said `taskherd fail` itself), or its start could not be recorded
# (lost). Timeouts, stalls and loops are the agent's behaviour whatever the disk holds.
DISK_CAUSED = frozenset({Outcome.CRASHED, Outcome.FAILED, Outcome.LOST})
_DISK_WORDS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded",
               errno.EROFS: "disk read-only"}
# What a gateway in front of a model answers while it, or what it forwards to, is away: bad
# gateway, unavailable, gateway timeout, and the 5xx proxies and providers use alike (Cloudflare's
# 520-524, "overloaded" 529). Not 500 or 501: an internal error can be this prompt's doing, and
# an outage would hold the whole runtime behind a task whose every probe fails.
ENDPOINT_DOWN_STATUSES = frozenset({502, 503, 504}) | frozenset(range(505, 600))
# httpx's errors (named, so that this module imports no HTTP client) that say the endpoint was
# not there to answer: the connection refused, reset or never made, or the answer cut short
# (a gateway that restarts mid-answer). Not a read timeout: an endpoint that took the request
# and went silent is judged as a stalled run, as before.
ENDPOINT_DOWN_ERRORS = frozenset({"ConnectError", "ConnectTimeout", "ReadError", "WriteError",
                                  "CloseError", "RemoteProtocolError", "PoolTimeout",
                                  "ProxyError"})


def fault_of(error: BaseException | None) -> Fault | None:
    """The machine's fault behind `error`, or behind the error it was raised from (`raise …
    from`); None when nothing in it says it was not the agent's (or the caller's) doing.

    A disk's errno says it, and so does an error that carries a `fault` (the store's
    `StoreDiskFull`: "database or disk is full")."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DISK_ERRNOS:
            return Fault.DISK
        fault = getattr(error, "fault", None)
        if isinstance(fault, Fault):
            return fault
        error = error.__cause__
    return None


def fault_text(error: BaseException) -> str:
    """One line on a machine's fault for the run's error and the node's pause reason: what
    the disk said first ("disk full: [Errno 28] No space left on device: '…'")."""
    text = str(error)
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in DISK_ERRNOS:
            return f"{_DISK_WORDS[cause.errno]}: {text}"
        cause = cause.__cause__
    return text if text.startswith("disk ") else f"disk full: {text}"


def endpoint_fault(http_status: int | None, error: BaseException | None) -> Fault | None:
    """Whether a chat call failed because its endpoint was down (Fault.ENDPOINT: no strike,
    its runtime pauses), judged from the transport's error (refused, reset, cut short) and
    the HTTP status it answered; None when the failure is the call's own (a 4xx, a 500, a
    stall)."""
    if error is not None and any(kind.__name__ in ENDPOINT_DOWN_ERRORS
                                 for kind in type(error).__mro__):
        return Fault.ENDPOINT  # (a 200 whose stream was cut: the cut tells)
    if http_status is not None and http_status in ENDPOINT_DOWN_STATUSES:
        return Fault.ENDPOINT
    return None


def fault_at_end(outcome: Outcome, report: str | None, disk_short: str | None) -> Fault | None:
    """Whether a run's end was the machine's: it crashed, failed or was lost while its disk
    was full or below the node's floor (`disk_short` says how), and the agent did not itself
    report failure. A run that succeeded keeps its success whatever the disk holds."""
    if disk_short is not None and outcome in DISK_CAUSED and report != "fail":
        return Fault.DISK
    return None


class DiskReading(Record):
    """One folder the node writes to, as the file system reports it."""

    path: str
    free: int  # bytes an unprivileged writer may still use (statvfs f_bavail × f_frsize)
    read_only: bool = False


def disk_short(readings: Iterable[DiskReading], floor: int) -> str | None:
    """Why the node may start nothing new, judged from its folders: one is read-only, full,
    or has less free space than `floor` bytes ([daemon] min_free_disk); None when every one
    has room. A floor of 0 still stops at a full disk: nothing can be written there."""
    for reading in readings:
        if reading.read_only:
            return f"{reading.path} is read-only"
        if reading.free < floor:
            return (f"{format_size(reading.free)} free at {reading.path}, below "
                    f"min_free_disk {format_size(floor)}")
        if reading.free == 0:
            return f"{reading.path} is full"
    return None
