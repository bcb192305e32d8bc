"""The dispatcher: which ready tasks may start now, within every limit.

Limits: the node's max_concurrent, each role's max_concurrent and stagger, pools, and runtime
cooldowns. The store picks the task (P0 first, FIFO within a priority) and checks the role's
and pools' limits across every node in the claim's transaction (taskherd/limits.py); the
dispatcher says which roles this node may run (its tags) and skips at once those its own
runs already fill, and learns from the store why the others were passed by.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from taskherd.config import Config, RoleConfig
from taskherd.limits import ClaimLimits, Refusal
from taskherd.model import Claim, Priority, TaskState
from taskherd.services.supervisor import LiveRuns
from taskherd.store import Store

log = logging.getLogger("taskherd.dispatcher")
P0_WARNING_INTERVAL = 60.0  # seconds between two warnings about the same waiting P0 task


@dataclass(frozen=True)
class Room:
    """What may start right now."""

    slots: int  # node slots free
    roles: tuple[RoleConfig, ...]  # roles with room, most free first
    full_pools: tuple[str, ...]
    blocked_by: dict[str, str]  # role → why it has no room (for the P0 warning)


@dataclass(frozen=True)
class DispatcherSettings:
    # The fallback look when no event came is the config's [daemon] poll_interval (reloadable).
    min_sleep: float = 0.01  # shortest wait for a stagger to end


class Dispatcher:
    """Claims what fits and hands each claim to `start` (the supervisor's), which says whether
    an agent started; it knows the live runs only through their read-only view."""

    def __init__(self, config: Config, store: Store, live: LiveRuns,
                 start: Callable[[Claim, float], object],
                 settings: DispatcherSettings = DispatcherSettings()):
        self.config = config
        self.store = store
        self.live = live
        self.start = start
        self.settings = settings
        self._warned_p0: dict[int, float] = {}
        self._refused: dict[str, Refusal] = {}  # the store's word on the last pass

    def run_once(self, now: float) -> dict[str, int]:
        started = 0
        cooled = {c.runtime: c.until for c in self.store.active_cooldowns(now)}
        limits = ClaimLimits.from_config(self.config)  # the config may have been reloaded
        self._refused = {}
        while True:
            room = self.room(now, cooled)
            if room.slots <= 0 or not room.roles:
                break
            claim = self.store.claim(
                self.config.daemon.node, now, self.config.daemon.lease,
                roles=[role.name for role in room.roles], full_pools=room.full_pools,
                as_role=room.roles[0].name,
                runtime_of={role.name: role.runtime for role in room.roles},
                limits=limits, refusals=self._refused,
            )
            if claim is None:
                break
            if self.start(claim, now) is not None:
                started += 1
        self._warn_waiting_p0(now, cooled)
        log.debug("dispatch pass: started %s, %s running, cooldowns %s", started,
                  len(self.live), sorted(cooled) or "none")
        return {"started": started}

    def room(self, now: float, cooled: dict[str, float]) -> Room:
        running = self.live.running_per_role()
        pool_use = self.live.pools_in_use()
        full_pools = tuple(p for p, cap in self.config.pools.items() if pool_use[p] >= cap)
        full_pools += tuple(r.pool for r in self._refused.values()
                            if r.pool is not None and r.pool not in full_pools)
        blocked_by: dict[str, str] = {}
        open_roles = []
        for role in self.config.roles.values():
            reason = self._no_room_reason(role, now, running, full_pools, cooled)
            refused = self._refused.get(role.name)
            if reason is None and refused is not None and refused.pool is None:
                reason = refused.reason  # full on other nodes: not tried again this pass
            if reason:
                blocked_by[role.name] = reason
            else:
                open_roles.append(role)
        open_roles.sort(key=lambda r: running[r.name] - (r.max_concurrent or 1 << 30))
        slots = self.config.daemon.max_concurrent - len(self.live)
        return Room(slots, tuple(open_roles), full_pools, blocked_by)

    def _no_room_reason(self, role: RoleConfig, now: float, running: Counter,
                        full_pools: tuple[str, ...], cooled: dict[str, float]) -> str | None:
        """Why the role cannot start here now, as far as this node's own runs tell (the store
        counts every node's at the claim)."""
        if not self.config.runs_here(role):
            return (f"role {role.name} runs on nodes tagged {', '.join(role.nodes)}; this node "
                    f"has {', '.join(self.config.daemon.tags) or 'no tags'}")
        if role.runtime in cooled:
            until = datetime.fromtimestamp(cooled[role.runtime]).astimezone()
            return (f"runtime {role.runtime} is rate-limited until "
                    f"{until.isoformat(sep=' ', timespec='seconds')}")
        if role.max_concurrent is not None and running[role.name] >= role.max_concurrent:
            return f"role {role.name} is at max_concurrent {role.max_concurrent}"
        last = self.live.last_spawn(role.name)
        if role.stagger and last is not None and now - last < role.stagger:
            return f"role {role.name} staggers spawns by {role.stagger:g}s"
        if role.pool is not None and role.pool in full_pools:
            return f"pool {role.pool} is full"
        return None

    def next_wake(self, now: float) -> float:
        """The fallback poll, or sooner when a staggered role gets room again."""
        poll = now + self.config.daemon.poll_interval
        stagger_end = self.next_stagger_end(now)
        if stagger_end is None:
            return poll
        return min(poll, max(stagger_end, now + self.settings.min_sleep))

    def next_stagger_end(self, now: float) -> float | None:
        """When a staggered role gets room again, here or because another node's spawn
        (which the store reported) ends its gap, so the loop can wake for it."""
        spawns = {r.name: self.live.last_spawn(r.name) for r in self.config.roles.values()
                  if r.stagger}
        ends = [spawns[r.name] + r.stagger for r in self.config.roles.values()
                if r.stagger and spawns[r.name] is not None]
        ends += [refusal.retry_at for refusal in self._refused.values() if refusal.retry_at]
        future = [end for end in ends if end > now]
        return min(future) if future else None

    def _warn_waiting_p0(self, now: float, cooled: dict[str, float]) -> None:
        """A P0 that has to wait is worth a warning that says what it waits for."""
        waiting = [t for t in self.store.list_tasks(state=TaskState.READY, limit=5)
                   if t.priority is Priority.P0 and t.run_after <= now]
        if not waiting:
            return
        room = self.room(now, cooled)
        for task in waiting:
            if now - self._warned_p0.get(task.id, -P0_WARNING_INTERVAL) < P0_WARNING_INTERVAL:
                continue
            self._warned_p0[task.id] = now
            log.warning("P0 task %s (%s) waits: %s", task.id, task.role,
                        self._why_waiting(task.role, task.pool, room))

    def _why_waiting(self, role: str, pool: str | None, room: Room) -> str:
        if room.slots <= 0:
            return f"node at max_concurrent {self.config.daemon.max_concurrent}"
        if role != "any" and role not in self.config.roles:
            return f"role {role} is not configured on this node"
        if role in room.blocked_by:
            return room.blocked_by[role]
        if pool in room.full_pools:
            return f"pool {pool} is full"
        return "no role has room"
