"""A runtime paused at a rate limit or while its endpoint is down, and the one run that
probes whether the limit lifted or the endpoint came back.

When an agent meets its provider's rate limit, every spawn of its runtime pauses (a cooldown
in the store, so every node and door sees it) until the limit's own reset, or a guess that
starts short and doubles while limits repeat. When the pause is up one run, the probe, is let
through; its getting past the provider lifts the pause for the rest, and a probe that meets
the limit again pauses the runtime for longer. No pause is longer than `[daemon]
max_rate_limit_pause`: a reset read from an agent's output can be wrong (a clock years ahead,
an epoch a test printed, a date misread), and the probe finds a limit that is still on.

An endpoint that is down (a chat gateway that restarts: faults.endpoint_fault) pauses its
runtime the same way, for OUTAGE_FIRST_PAUSE; each probe that finds it still down doubles the
pause, up to OUTAGE_LONGEST_PAUSE, so a gateway back after two minutes is found within half a
minute of its return and asked once per pause meanwhile. The cooldown keeps since when it is
down (`down_since`, for `status`, the board and the `endpoint_down`/`endpoint_up` deliveries).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from taskherd.model import Outcome, RunResult
from taskherd.model.delivery import ENDPOINT_DOWN, ENDPOINT_UP
from taskherd.model.settings import Config, RoleConfig
from taskherd.runtimes.ratelimit import guessed_cooldown
from taskherd.services.live_runs import LiveRun
from taskherd.store import Store, StoreError

log = logging.getLogger("taskherd.supervisor")

# An endpoint found down is asked again (one probe request) after this long, then twice as
# long after each probe that finds it still down, up to the longest: short enough that a
# gateway's restart costs seconds, long enough that one down for hours is asked twice a minute.
OUTAGE_FIRST_PAUSE = 1.0
OUTAGE_LONGEST_PAUSE = 30.0


class RuntimePauses:
    def __init__(self, store: Store, on_change: Callable[[], None],
                 config_of: Callable[[], Config]):
        self.store = store
        self.on_change = on_change  # wakes the dispatcher: a runtime may start again
        self.config_of = config_of  # as last reloaded: max_rate_limit_pause, delivery targets

    def max_pause(self) -> float:
        return self.config_of().daemon.max_rate_limit_pause

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
            span = guessed_cooldown(previous.until if previous else None,
                                    previous.span if previous else None, now,
                                    role.rate_limit_cooldown)
            reset_at = max(now + span, previous.until if previous else now)
        reset_at = self._capped(role, reset_at, now)
        self.store.set_cooldown(role.runtime, reset_at, reason, now, span)
        return reset_at

    def endpoint_down(self, role: RoleConfig, reason: str, now: float,
                      probe: bool = False) -> float:
        """Pause every spawn of the role's runtime: its endpoint is down. The pause an outage
        already holds is kept (runs cut off together by one restart do not lengthen it); a
        probe that finds it still down doubles it. Returns when the next probe may go."""
        try:
            previous = self.store.cooldown_of(role.runtime)
            if previous is None or previous.down_since is None:
                span = OUTAGE_FIRST_PAUSE
            elif probe:
                span = min(2 * (previous.span or OUTAGE_FIRST_PAUSE), OUTAGE_LONGEST_PAUSE)
            else:
                span = previous.span or OUTAGE_FIRST_PAUSE
            until = self._capped(role, now + span, now)
            cooldown = self.store.endpoint_down(role.runtime, until, reason, span,
                                                self._targets(role, ENDPOINT_DOWN), now)
        except StoreError as error:
            # The run is still settled (no strike); its task's next run meets the endpoint
            # and pauses the runtime then.
            log.warning("runtime %s: its endpoint is down, but the pause could not be "
                        "written: %s", role.runtime, error)
            return now
        if previous is None or previous.down_since is None:
            log.warning("runtime %s: its endpoint is down (%s); its runs wait, no strike, and "
                        "one probes it at %s", role.runtime, reason, _iso(cooldown.until))
        return cooldown.until

    def _targets(self, role: RoleConfig, event: str) -> list[str]:
        """The delivery aliases of every role of the runtime whose `on` names `event`."""
        from taskherd.ops.budget import budget_targets

        config = self.config_of()
        roles = [r.name for r in config.roles.values() if r.runtime == role.runtime]
        return list(dict.fromkeys(a for name in roles
                                  for a in budget_targets(config, name, event)))

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
            targets = self._targets(live.role, ENDPOINT_UP)
            if self.store.probe_passed(live.role.runtime, live.run.id, now, targets):
                log.info("run %s: runtime %s got past its rate limit or outage; it runs again",
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
