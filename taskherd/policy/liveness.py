"""Whether an open run still looks alive, from what the store knows of it: one rule, read by
`taskherd runs stale` and shareable by the monitor, so the two never disagree. And the words
and the next threshold of the supervisor's verdict on a running agent (`runs list`).

Pure: the run, its task's lease, its role's thresholds and `now` in; a reason (for a person)
or None out. The tiers: the node that owns the run is down or stopped; the task's lease
expired; claimed but never spawned past the role's spawn_timeout; no heartbeat, spawn or
claim for longer than the role's idle_timeout (or a limit the caller gives).
"""

from __future__ import annotations

from datetime import datetime

from taskherd.model import Liveness, Run
from taskherd.model.nodes import Node


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
                 idle_timeout: float, now: float, last_seen: float | None = None) -> str | None:
    """Why an open run looks stuck, or None while it looks alive. `last_seen`: its latest
    sign of life where the store does not keep it (its log written), if known."""
    if lease_expires_at is not None and lease_expires_at < now:
        return f"lease expired {now - lease_expires_at:.0f}s ago (node {run.node} gone?)"
    if run.spawned_at is None and now - run.claimed_at > spawn_timeout:
        return f"claimed {now - run.claimed_at:.0f}s ago and never spawned"
    idle = now - max(last_activity(run), last_seen or 0.0)
    if idle > idle_timeout:
        return f"no heartbeat or progress for {idle:.0f}s"
    return None


def _shown(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


# -- the supervisor's verdict on a running agent ------------------------------------------

QUIET_AFTER = 15.0  # seconds without a sign of work before a run reads as quiet
# The longest a quiet agent's log goes unread (and less: its input_timeout): what it writes
# meanwhile (a loop starting, a rate limit) is seen this late at worst. A question is timed
# from when it was written, so it still ends the run on time.
QUIET_LOOK = 30.0
WAITING_LOOK = 5.0  # an agent kept waiting for an answer is looked at this often
SAMPLE_AHEAD = 10.0  # CPU time is sampled from this long before a threshold could fall


def next_threshold(run: Run, *, input_timeout: float, idle_timeout: float, timeout: float,
                   now: float) -> tuple[str, float] | None:
    """What ends the run next if nothing changes, and when: for a person reading `runs list`.

    From the stored verdict: a quiet run is stalled `idle_timeout` after it went quiet (or
    asked for input at `input_timeout`, if its last output is a question); a waiting or
    active one meets only its hard `timeout`.
    """
    if run.ended_at is not None or run.spawned_at is None:
        return None
    candidates = [("timeout", run.spawned_at + timeout)]
    if run.liveness == Liveness.QUIET and run.liveness_since is not None:
        candidates.append(("stalled", run.liveness_since + idle_timeout))
    return min(candidates, key=lambda candidate: candidate[1])


def verdict_text(run: Run, now: float) -> str:
    """The verdict in words: active, quiet since T, waiting for input: "…", looping."""
    if run.ended_at is not None:
        return run.outcome.value if run.outcome else "ended"
    if run.spawned_at is None:
        return "starting"
    if run.liveness == Liveness.QUIET and run.liveness_since is not None:
        return f"quiet since {_clock(run.liveness_since)}"
    if run.liveness == Liveness.WAITING_INPUT:
        question = (run.liveness_note or "").replace("\n", " ")
        return f'waiting for input: "{_clipped(question, 80)}"'
    if run.liveness == Liveness.LOOPING:
        return "looping"
    return "active"


def _clock(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%H:%M:%S")


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
