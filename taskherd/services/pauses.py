"""A runtime paused at a rate limit, and the one run that probes whether the limit lifted.

When an agent meets its provider's rate limit, every spawn of its runtime pauses (a cooldown
in the store, so every node and door sees it) until the limit's own reset, or a guess that
starts short and doubles while limits repeat. When the pause is up one run, the probe, is let
through; its getting past the provider lifts the pause for the rest, and a probe that meets
the limit again pauses the runtime for longer. No pause is longer than `[daemon]
max_rate_limit_pause`: a reset read from an agent's output can be wrong (a clock years ahead,
an epoch a test printed, a date misread), and the probe finds a limit that is still on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from taskherd.config import RoleConfig
from taskherd.model import Outcome, RunResult
from taskherd.runtimes.ratelimit import guessed_cooldown
from taskherd.services.live_runs import LiveRun
from taskherd.store import Store, StoreError

log = logging.getLogger("taskherd.supervisor")


class RuntimePauses:
    def __init__(self, store: Store, on_change: Callable[[], None],
                 max_pause: Callable[[], float]):
        self.store = store
        self.on_change = on_change  # wakes the dispatcher: a runtime may start again
        self.max_pause = max_pause  # the daemon's max_rate_limit_pause, as last reloaded

    def pause(self, role: RoleConfig, reset_at: float | None, reason: str, now: float,
              probe: bool = False) -> float:
        """Pause every spawn of the role's runtime until the limit lifts: when its text said,
        else a guess that starts short and doubles while limits repeat. A probe that meets the
        limit again doubles the last pause, whatever its text says (up to
        rate_limit_cooldown, or the text's reset if that is later). Returns when it lifts."""
        span = None
        previous = self.store.cooldown_of(role.runtime) if probe or reset_at is None else None
        if probe and previous is not None:
            last = previous.span or max(previous.until - previous.created_at, 1.0)
            span = min(2 * last, max(role.rate_limit_cooldown, last))
            reset_at = max(reset_at or now, now + span)
        elif reset_at is None:
            span = guessed_cooldown(previous and previous.until, previous and previous.span,
                                    now, role.rate_limit_cooldown)
            reset_at = max(now + span, previous.until if previous else now)
        reset_at = self._capped(role, reset_at, now)
        self.store.set_cooldown(role.runtime, reset_at, reason, now, span)
        return reset_at

    def _capped(self, role: RoleConfig, reset_at: float, now: float) -> float:
        longest = self.max_pause()
        if reset_at - now <= longest:
            return reset_at
        log.warning("runtime %s: its limit would pause it until %s, longer than "
                    "max_rate_limit_pause (%gs): paused until %s instead", role.runtime,
                    _iso(reset_at), longest, _iso(now + longest))
        return now + longest

    def probe_passed(self, live: LiveRun, now: float) -> None:
        """The probe got past the provider: the rest of its runtime may start."""
        live.probe = False
        try:
            if self.store.probe_passed(live.role.runtime, live.run.id, now):
                log.info("run %s: runtime %s got past its rate limit; it runs again",
                         live.run.id, live.role.runtime)
                self.on_change()
        except StoreError as error:
            live.probe = True  # told again at the next look
            log.warning("run %s: could not lift the cooldown: %s", live.run.id, error)

    def probe_ended(self, live: LiveRun, result: RunResult, now: float) -> None:
        """A success proves the limit lifted; any other end says nothing of it, so another
        probe may go."""
        try:
            if result.outcome is Outcome.SUCCEEDED:
                self.probe_passed(live, now)
            elif self.store.release_probe(live.role.runtime, live.run.id):
                self.on_change()
        except StoreError as error:
            log.warning("run %s: could not end its probe: %s", live.run.id, error)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()
