"""Whether an open run still looks alive, from what the store knows of it: one rule, read by
`taskherd runs stale` and shareable by the monitor, so the two never disagree.

Pure: the run, its task's lease, its role's thresholds and `now` in; a reason (for a person)
or None out. The tiers: the node that owns the run is down or stopped; the task's lease
expired; claimed but never spawned past the role's spawn_timeout; no heartbeat, spawn or
claim for longer than the role's idle_timeout (or a limit the caller gives).
"""

from __future__ import annotations

from datetime import datetime

from taskherd.model import Run
from taskherd.store.nodes import Node


def last_activity(run: Run) -> float:
    """The latest sign of life the store recorded for a run."""
    return max(t for t in (run.heartbeat_at, run.spawned_at, run.claimed_at) if t is not None)


def node_down_reason(node: Node | None, now: float) -> str | None:
    """Why the run's node cannot be watching it, or None while it is up (or unknown)."""
    if node is None or node.status(now) == "up":
        return None
    if node.stopped_at is not None:
        return f"its node {node.name} stopped at {_shown(node.stopped_at)}"
    return f"its node {node.name} is down (last seen {_shown(node.last_seen)})"


def stale_reason(run: Run, lease_expires_at: float | None, *, spawn_timeout: float,
                 idle_timeout: float, now: float) -> str | None:
    """Why an open run looks stuck, or None while it looks alive."""
    if lease_expires_at is not None and lease_expires_at < now:
        return f"lease expired {now - lease_expires_at:.0f}s ago (node {run.node} gone?)"
    if run.spawned_at is None and now - run.claimed_at > spawn_timeout:
        return f"claimed {now - run.claimed_at:.0f}s ago and never spawned"
    idle = now - last_activity(run)
    if idle > idle_timeout:
        return f"no heartbeat or progress for {idle:.0f}s"
    return None


def _shown(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
