"""What the supervisor reads of a watched agent's output at a look: the new part fed to its
runtime's reader (loops, rate limits, the result), the end kept to read a question from, and
when it was written. A running gate's output is only a sign of life.
"""

from __future__ import annotations

import logging

from taskherd.policy.questions import question_in
from taskherd.policy.sizes import format_size
from taskherd.runtimes.ratelimit import RateLimitSignal
from taskherd.services.live_runs import LiveRun
from taskherd.services.output_feed import READ_BYTES_PER_SECOND, OutputFeed

log = logging.getLogger("taskherd.supervisor")
RECENT_BYTES = 4096  # the end of a run's output kept to read a question from


def read_new_output(live: LiveRun, now: float,
                    final: bool = False) -> tuple[float | None, RateLimitSignal | None]:
    """Feed what the agent wrote since the last look to its reader, within the look's share
    (`services/output_feed.py`; at the run's end, the end's window whole). Returns when it
    was written (the log's mtime, no earlier than that look; None if it wrote nothing), and
    the rate limit its reader met in it, if any."""
    looked_at, live.looked_at = live.looked_at, now
    if live.output is None or live.output.path != live.handle.log_path:
        live.output = OutputFeed(live.handle.log_path)  # the agent's log, or its gate's
    fresh, info = live.output.read(now, final)
    if fresh is None or info is None:
        return None, None
    live.log_offset = live.output.offset
    live.output_at = now
    written_at = min(max(info.st_mtime, looked_at), now)
    if live.gate is not None:
        return written_at, None  # a gate's output is only a sign of life
    if fresh.passed_over and not live.output_skipped:
        live.output_skipped = True  # said once a run: a chatty agent would fill the log
        log.warning("run %s: its agent writes faster than the daemon reads; %s passed "
                    "over, its latest output read from now on (looks read %s a second)",
                    live.run.id, format_size(fresh.passed_over),
                    format_size(READ_BYTES_PER_SECOND))
    if fresh.gap:
        live.reader.gap()
    chunk = fresh.data
    live.recent = (live.recent + chunk[-RECENT_BYTES:])[-RECENT_BYTES:]
    return written_at, live.reader.feed(chunk, now) if chunk else None


def question_of(live: LiveRun) -> str | None:
    """The question the agent's output ends with, read once per new output (a read is a
    dozen patterns over 4 KB: the verdict asks only when a threshold needs it)."""
    if live.question_read_at != live.log_offset:
        live.question_read_at = live.log_offset
        live.question = question_in(live.recent.decode("utf-8", "replace"),
                                    live.role.input_patterns)
    return live.question
