"""The dispatcher: which ready tasks may start now, within every limit.

Limits: the node's max_concurrent, each role's max_concurrent and stagger, pools, runtime
cooldowns, and budgets (a role, or the fleet, whose next run would spend past a limit waits
for the period to reset). The store picks the task (P0 first, FIFO within a priority) and
checks the role's and pools' limits and its budgets across every node in the claim's
transaction; the dispatcher asks first, of its own counts, which roles this node may start
now (its tags, its slots, the runs it holds), and learns from the store why the others were
passed by. Both ask the same rule (taskherd/policy/admission.py).

Before any of them, the node's disk: full, below min_free_disk or after a disk fault, the
node starts nothing (services/disk_pause.py); each pass looks again, so it resumes in the
first pass that finds room.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from taskherd.model import (
    Claim,
    Cooldown,
    Event,
    EventKind,
    InboxLimit,
    Priority,
    TaskState,
)
from taskherd.model.settings import Config, RoleConfig
from taskherd.policy import admission, waits
from taskherd.policy.admission import ClaimAttempt, ClaimRequest, Refusal
from taskherd.policy.budgets import COOLDOWN_PREFIX, Pause
from taskherd.policy.limits import ClaimLimits
from taskherd.services.disk_pause import DiskPause
from taskherd.services.live_runs import LiveRuns
from taskherd.store import Store, StoreError

log = logging.getLogger("taskherd.dispatcher")
P0_WARNING_INTERVAL = 60.0  # seconds between two warnings about the same waiting P0 task
# A probe taken but never claimed (its node died in between) is given up after this long.
PROBE_CLAIM_TIMEOUT = 60.0
# With nothing of a runtime to run, its probe is looked for again after this long: taking and
# releasing it costs two writes, which each dispatch pass would otherwise repeat.
PROBE_RETRY = 1.0
# A pass uses the cooldowns an earlier pass read for this long at most while no event says
# they changed: a read each pass cost each claim a store query (and the store's lock) on its
# way. A probe another node takes or gives up tells none: meanwhile a claim it makes moot is
# refused by the store's own count, as is one of a cooldown begun since the read.
COOLDOWNS_KEPT = 1.0
COOLDOWN_EVENTS = frozenset({EventKind.COOLDOWN_SET, EventKind.COOLDOWN_CLEARED,
                             EventKind.BUDGET_PAUSED, EventKind.BUDGET_RESUMED})


@dataclass(frozen=True)
class Room:
    """What may start right now."""

    roles: tuple[RoleConfig, ...]  # roles with room, most free first (none: no slot free)
    full_pools: tuple[str, ...]  # full here, or on every node as a claim found
    blocked_by: dict[str, str]  # role → why it has no room (for the P0 warning)


@dataclass(frozen=True)
class DispatcherSettings:
    # The fallback look when no event came is the config's [daemon] poll_interval (reloadable).
    min_sleep: float = 0.01  # shortest wait for a stagger to end
    # Starts in one pass at most; the next pass follows at once, after whatever else waits
    # for the event loop: a burst of a thousand claims held it for seconds (deaths unsettled,
    # every other service waiting).
    starts_per_pass: int = 8


class Dispatcher:
    """Claims what fits and hands each claim to `start` (the supervisor's), which says whether
    an agent started; it knows the live runs only through their read-only view."""

    def __init__(self, config: Config, store: Store, live: LiveRuns,
                 start: Callable[..., object],
                 settings: DispatcherSettings = DispatcherSettings(),
                 disk: DiskPause | None = None):
        self.config = config
        self.store = store
        self.live = live
        self.start = start
        self.settings = settings
        # The supervisor's, in the daemon: the faults it meets starting runs pause this node.
        self.disk = disk or DiskPause(store, lambda: self.config)
        self._warned_p0: dict[int, float] = {}
        self._probe_tried: dict[str, float] = {}  # runtime → when a probe found nothing to run
        self._over: dict[str, Pause] = {}  # budget scopes paused (this pass)
        self._refused: dict[str, Refusal] = {}  # the store's word on the last pass
        self._more = False  # the last pass stopped at starts_per_pass with room left
        # The last pass's view of the runtimes paused (rate limits, outages, probes awaited)
        # and its limits, for the claims made as runs end between passes (`follow_on`).
        self._cooled: dict[str, str] | None = None
        self._limits: tuple[Config, ClaimLimits] | None = None
        self._cooldowns: tuple[float, list[Cooldown]] | None = None  # (read at, every one)

    def reload(self, config: Config) -> None:
        """The daemon's reloaded config: the next pass reads it."""
        self.config = config

    def run_once(self, now: float) -> dict[str, int]:
        limits = self._limits_now()
        if (paused := self.disk.check(now)) is not None:
            self._more = False
            self._warn_waiting_p0(now, {}, limits)
            log.debug("dispatch pass: paused, %s", paused)
            return {"started": 0, "disk_paused": 1}
        cooldowns = self._cooldowns_now(now)
        budget_paused = [c for c in cooldowns if c.runtime.startswith(COOLDOWN_PREFIX)]
        cooldowns = [c for c in cooldowns if not c.runtime.startswith(COOLDOWN_PREFIX)]
        cooled = {c.runtime: waits.cooldown_wait(c, now) for c in cooldowns}
        self._cooled = cooled
        self._over = self._over_budget(now, budget_paused)
        if self.config.budgets or budget_paused:
            self._cooldowns = None  # the pauses it began or lifted are cooldowns too
        started = 0
        self._refused = {}
        for cooldown in cooldowns:
            if cooldown.probing(now):
                self._cooldowns = None  # its probe taken, given up or released: read again
                if self._probe(cooldown, now, cooled, limits):
                    started += 1
        self._more = False
        while True:
            if started >= self.settings.starts_per_pass:
                self._more = True
                break
            if self.disk.faulted:
                break  # a start just met a disk fault: the next pass judges the disk again
            room = self.room(now, cooled, limits)
            if not room.roles:
                break
            # The claim's events are told once its agent is on its way: telling them (a
            # datagram to every listener, this daemon's own among them) is not on the way
            # from the claim to the exec.
            with self.store.events_held():
                claim = self._claim(now, room.roles, room.full_pools, limits)
                if claim is None:
                    break
                if self.start(claim, now) is not None:
                    started += 1
        if self._budget_spent_in_pass(started):
            self._over = self._over_budget(now, None)
        if not self._more:  # (cut short, the next pass goes on at once: no P0 waits)
            self._warn_waiting_p0(now, cooled, limits)
        log.debug("dispatch pass: started %s, %s running, cooldowns %s", started,
                  len(self.live), sorted(cooled) or "none")
        return {"started": started}

    def hear(self, event: Event) -> None:
        """A committed change, told: cooldowns set or lifted (a rate limit, an outage, a
        budget), here or on any node, are read again at the next pass."""
        if event.kind in COOLDOWN_EVENTS:
            self._cooldowns = None

    def _cooldowns_now(self, now: float) -> list[Cooldown]:
        """Every cooldown, as read at most COOLDOWNS_KEPT ago and unchanged since, as far as
        events tell."""
        kept = self._cooldowns
        if kept is None or not 0 <= now - kept[0] < COOLDOWNS_KEPT:
            kept = self._cooldowns = (now, self.store.all_cooldowns())
        return kept[1]

    def _probe(self, cooldown: Cooldown, now: float, cooled: dict[str, str],
               limits: ClaimLimits) -> bool:
        """Start the one run that tests whether `cooldown`'s limit has lifted, if nobody has.
        Its claim is held to every other limit and budget: only the lifted cooldown is moot."""
        runtime, node = cooldown.runtime, self.config.daemon.node
        if cooldown.probe_node is not None and not self._probe_abandoned(cooldown, now):
            return False
        if now - self._probe_tried.get(runtime, float("-inf")) < PROBE_RETRY:
            return False
        if cooldown.probe_node is not None:
            self.store.release_probe(runtime, cooldown.probe_run_id)
        if not self.store.take_probe(runtime, node, now):
            return False  # another node took it
        others = {name: why for name, why in cooled.items() if name != runtime}
        room = self.room(now, others, limits)
        roles = tuple(role for role in room.roles if role.runtime == runtime)
        claim = self._claim(now, roles, room.full_pools, limits) if roles else None
        if claim is None:
            self.store.release_probe(runtime)  # nothing to run here: another node may
            self._probe_tried[runtime] = now
            return False
        self.store.attach_probe(runtime, node, claim.run.id, now)
        log.info("runtime %s: its cooldown ended; run %s (task %s) probes it first",
                 runtime, claim.run.id, claim.task.id)
        return self.start(claim, now, probe=True) is not None

    def follow_on(self, now: float) -> ClaimRequest | None:
        """The claim for the slot a run's end just freed, made in the store's transaction
        that ends the run (`Store.finish_run_and_claim`), so a busy node takes its next task
        in the commit that settles its last: None when this node would not claim now (its
        disk paused, no role with room, no pass made yet). The runtimes paused are the last
        pass's; the store's claim counts every limit again across nodes, a cooldown or a
        budget begun since among them, and a runtime whose probe is awaited waits for it."""
        if self._cooled is None or self.disk.faulted or self.disk.check(now) is not None:
            return None
        limits = self._limits_now()
        room = self.room(now, self._cooled, limits)
        if not room.roles:
            return None
        return self._request(now, room.roles, room.full_pools, limits)

    def took(self, attempt: ClaimAttempt, now: float) -> None:
        """What the claim `follow_on` asked for came back with: its run started, and why
        others were passed by kept for the next pass, as a pass's own claims."""
        self._refused.update((refusal.role, refusal) for refusal in attempt.refused)
        if attempt.claim is not None:
            self.start(attempt.claim, now)

    def _limits_now(self) -> ClaimLimits:
        """The limits of the config as last reloaded, made once per config."""
        if self._limits is None or self._limits[0] is not self.config:
            self._limits = (self.config, ClaimLimits.from_config(self.config))
        return self._limits[1]

    def _claim(self, now: float, roles: tuple[RoleConfig, ...], full_pools: tuple[str, ...],
               limits: ClaimLimits) -> Claim | None:
        """The store's claim of a task of `roles` (the first of them for a task of role any),
        within `limits`; why it passed others by is kept for the rest of the pass."""
        attempt = self.store.attempt_claim(self._request(now, roles, full_pools, limits))
        self._refused.update((refusal.role, refusal) for refusal in attempt.refused)
        return attempt.claim

    def _request(self, now: float, roles: tuple[RoleConfig, ...], full_pools: tuple[str, ...],
                 limits: ClaimLimits) -> ClaimRequest:
        return ClaimRequest(
            self.config.daemon.node, now, self.config.daemon.lease,
            roles=[role.name for role in roles], full_pools=full_pools,
            as_role=roles[0].name, runtime_of={role.name: role.runtime for role in roles},
            inbox=self._inbox_limit(), limits=limits,
            # The run's credential is recorded with the claim, not in a transaction of its
            # own between the claim and the agent's start (the spawn's hot path): its secret
            # here, the store names the run in the token (`<run_id>.<secret>`).
            credential=secrets.token_urlsafe(32))

    def _inbox_limit(self) -> InboxLimit:
        return InboxLimit(self.config.messages.inbox_messages, self.config.messages.inbox_bytes)

    def _probe_abandoned(self, cooldown: Cooldown, now: float) -> bool:
        """A probe whose run ended without telling (lost with its node), or that was never
        claimed: another may go."""
        if cooldown.probe_run_id is None:
            started = cooldown.probe_started_at or now
            return now - started > PROBE_CLAIM_TIMEOUT
        try:
            return self.store.get_run(cooldown.probe_run_id).ended_at is not None
        except StoreError:
            return True  # pruned

    def _over_budget(self, now: float, paused: list[Cooldown] | None) -> dict[str, Pause]:
        """Scopes whose next run would spend past a limit, until when, as the pass begins
        (their pauses begun or lifted to match); the claim checks again, across every node,
        each run started since."""
        if not self.config.budgets and not paused:
            return {}  # (a pause left by budgets since removed from the config is lifted)
        from taskherd.ops.budget import apply_budget_pauses

        return apply_budget_pauses(self.config, self.store, now, paused)

    def _budget_spent_in_pass(self, started: int) -> bool:
        """Whether this pass may have spent a budget: it started a run, or a claim was refused
        for a budget another node spent since the pass began. Then its pause begins now (and
        is told now), not at the next pass."""
        return bool(self.config.budgets) and (
            started > 0 or any(r.budget for r in self._refused.values()))

    def room(self, now: float, cooled: dict[str, str], limits: ClaimLimits) -> Room:
        counts = self._counts(cooled)
        running = counts.running
        blocked_by: dict[str, str] = {}
        open_roles = []
        here = self._node_room()
        for role in self.config.roles.values():
            reason = waits.role_wait(limits, role.name, counts, now, node=here)
            if reason:
                blocked_by[role.name] = reason
            else:
                open_roles.append(role)
        open_roles.sort(key=lambda r: running.get(r.name, 0) - (r.max_concurrent or 1 << 30))
        full = counts.full_pools | admission.full_pools(limits, counts.pools_running)
        return Room(tuple(open_roles), tuple(sorted(full)), blocked_by)

    def _counts(self, cooled: dict[str, str]) -> waits.Counts:
        """What this node counts for why a role or task waits (taskherd/policy/waits.py): its own
        runs, and what the store's claims refused on the last pass (they counted every node's
        runs): a role full on other nodes is not tried again this pass."""
        full_pools = {r.pool for r in self._refused.values() if r.pool is not None}
        told = {name: r.reason for name, r in self._refused.items() if r.pool is None}
        spawns = {r.name: self.live.last_spawn(r.name) for r in self.config.roles.values()}
        return waits.Counts(
            running=dict(self.live.running_per_role()),
            pools_running=dict(self.live.pools_in_use()), full_pools=frozenset(full_pools),
            last_spawn={name: at for name, at in spawns.items() if at is not None},
            paused_runtimes=cooled, over_budget=dict(self._over), role_reasons=told,
            nodes=(self._node_room(),))

    def _node_room(self) -> waits.NodeRoom:
        """This node, as far as starting a run on it goes: the roles it has the tags for, its
        runs and slots, its disk."""
        daemon = self.config.daemon
        return waits.NodeRoom(daemon.node, frozenset(self.config.runnable_roles),
                              len(self.live), daemon.max_concurrent, self.disk.reason,
                              tuple(daemon.tags))

    def next_wake(self, now: float) -> float:
        """The fallback poll, or sooner when a staggered role gets room again or a delayed
        task (a backoff, a chain's `delay`) becomes claimable: it must not wait for the poll.
        At once when the last pass stopped at starts_per_pass."""
        if self._more:
            return now
        wake = now + self.config.daemon.poll_interval
        for soon in (self.next_stagger_end(now), self.store.next_run_after(now)):
            if soon is not None:
                wake = min(wake, max(soon, now + self.settings.min_sleep))
        return wake

    def next_stagger_end(self, now: float) -> float | None:
        """When a staggered role gets room again, here or because another node's spawn
        (which the store reported) ends its gap, so the loop can wake for it."""
        spawns = {r.name: self.live.last_spawn(r.name) for r in self.config.roles.values()
                  if r.stagger}
        ends = [spawned + r.stagger for r in self.config.roles.values()
                if r.stagger and (spawned := spawns[r.name]) is not None]
        ends += [refusal.retry_at for refusal in self._refused.values() if refusal.retry_at]
        future = [end for end in ends if end > now]
        return min(future) if future else None

    def _warn_waiting_p0(self, now: float, cooled: dict[str, str],
                         limits: ClaimLimits) -> None:
        """A P0 that has to wait is worth a warning that says what it waits for."""
        waiting = [t for t in self.store.waiting_at_priority(Priority.P0, limit=5)
                   if t.state is TaskState.READY and t.run_after <= now]
        if not waiting:
            return
        counts = self._counts(cooled)
        for task in waiting:
            if now - self._warned_p0.get(task.id, -P0_WARNING_INTERVAL) < P0_WARNING_INTERVAL:
                continue
            self._warned_p0[task.id] = now
            why = waits.task_wait(task, limits, counts, now) or "no role has room"
            log.warning("P0 task %s (%s) waits: %s", task.id, task.role, why)
