"""What a watched run's end means: its result as its runtime reads it, overruled by the
supervisor's own reason when it ended the run (unless the work was done first), and a rate
limit the run met that its runtime is not yet paused for.
"""

from __future__ import annotations

import dataclasses

from taskherd.host import procs
from taskherd.model import Outcome, Run, RunResult
from taskherd.runtimes.ratelimit import known_reset
from taskherd.services.live_runs import LiveRun

VANISHED_WHILE_DOWN = ("the process vanished without an exit status while no daemon ran on "
                       "this node (its machine died, or it was killed with it)")


def result_of(live: LiveRun, run: Run, status: procs.ExitStatus, now: float) -> RunResult:
    result = live.runtime.result(live.role, live.reader, status, run, now, live.handle)
    if (live.ended_unwatched and result.outcome is Outcome.CRASHED
            and status.code is None and status.signal is None):
        # Its shim died too, without a word, while no daemon ran here: the machine died
        # (or all was killed with it). As when another node rescues the run of a node
        # that stays down: lost, no strike, back at once; not the agent's crash.
        return RunResult(Outcome.LOST, error=VANISHED_WHILE_DOWN, error_tail=result.error_tail)
    if result.output_tail is None:  # for a chain's `when` and a reviewer's verdict
        result = dataclasses.replace(result, output_tail=live.reader.error_tail or None)
    if live.kill_reason is None or result.outcome is Outcome.SUCCEEDED and (
            run.report == "done" or live.reader.summary is not None):
        return result  # work that was completed before the kill counts (partial success)
    outcome, reason = live.kill_reason
    retry_at = result.retry_at if outcome is Outcome.RATE_LIMITED else None
    # What the run spent is kept whatever ended it: a killed run cost money too.
    return dataclasses.replace(result, outcome=outcome, exit_code=status.code, summary=None,
                               error=reason, error_tail=live.reader.error_tail,
                               retry_at=retry_at)


def limit_left(live: LiveRun, result: RunResult, status: procs.ExitStatus,
               now: float) -> tuple[float | None, str] | None:
    """(reset, reason) of a limit the run met that its runtime is not yet paused for: one
    found only at its end, or a reset time learnt after the pause (a result event's after
    an api_retry's). None: nothing more to pause for."""
    if live.paused_for is None and result.outcome is Outcome.RATE_LIMITED:
        return result.retry_at, result.error or "rate limited"  # the runtime's own reading
    signal = live.reader.limit_met(status, now)
    if signal is None or signal == live.paused_for or (
            live.paused_for is not None and signal.reset_at is None):
        return None
    return known_reset(signal, now), signal.excerpt or signal.source
