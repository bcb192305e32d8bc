"""Whether an open run still looks alive, from what the store knows of it: one rule, read by
`taskherd runs stale` and shareable by the monitor, so the two never disagree. The
supervisor's verdict on a running agent it watches (`judge`: from the facts it gathered at a
look, whether a threshold ends the run, how it reads, and when to look next). And the words
and the next threshold of that verdict as the store keeps it (`runs list`).

Pure: the run, its task's lease, its role's thresholds and `now` in; a reason (for a person)
or None out. The tiers: the node that owns the run is down or stopped; the task's lease
expired; claimed but never spawned past the role's spawn_timeout; no heartbeat, spawn or
claim for longer than the role's idle_timeout (or a limit the caller gives).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from taskherd.model import Liveness, Outcome, Run
from taskherd.model.nodes import Node
from taskherd.model.record import Record
from taskherd.model.settings import RoleConfig


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
LOOK_GAP = 0.25  # the least time between two rounds of looks: due looks are taken together
CPU_BUSY_SHARE = 0.05  # share of one core, between two samples, that counts as working

Shown = tuple[Liveness, float, "str | None"]  # a verdict as a person reads it: what, since, note


class RunFacts(Record):
    """What the supervisor knows of a running agent when it looks at it: the facts its
    verdict is decided from, gathered from its log, its heartbeats and its CPU time."""

    role: RoleConfig  # timeout, idle_timeout, input_timeout, on_input
    spawned_at: float
    last_activity: float  # its latest sign of work: output written, a heartbeat, CPU used
    writing: bool  # this look found new output
    # The question its output ends with, read when a threshold needs it: reading one is a
    # pass of a dozen patterns over 4 KB, and a busy agent's is never needed.
    question: Callable[[], str | None]
    looping: str | None = None  # the block its output repeats, if its reader found a loop
    waiting: str | None = None  # the question it waits at for a person (on_input = wait)
    gate_idle: float | None = None  # a quality gate runs in its stead, idle past this ends it
    shown: Shown | None = None  # the verdict as last written to the store


class Verdict(Record):
    """What to do with a run after a look, and when to look again."""

    next_look: float
    sample_from: float  # from when its CPU time is worth a sample (a threshold is near)
    end: tuple[Outcome, str] | None = None  # end it so (its watcher settles the run)
    asked: str | None = None  # it stopped at this question just now: tell the store
    shown: Shown | None = None  # the verdict as it reads now (written when it changed)


def judge(facts: RunFacts, now: float, *, interval: float, spread: float = 1.0) -> Verdict:
    """The verdict on a running agent at `now`: ended as stalled, timed out, looping or
    needing input, or left running; and when it could next cross a threshold (looked at no
    later). `interval`: the supervisor's round; `spread` (0.8 to 1): the share of QUIET_LOOK
    a quiet log goes unread, drawn by the caller so runs started together drift apart."""
    end, asked = _end(facts, now)
    if end is not None and asked is None:
        return Verdict(now, now, end=end)
    waiting = asked if asked is not None and facts.role.on_input == "wait" else facts.waiting
    if asked is not None:
        shown: Shown | None = (Liveness.WAITING_INPUT, now, asked)
    else:
        shown = _reads_as(facts, now)
    facts_now = facts if waiting is facts.waiting else replace(facts, waiting=waiting)
    return Verdict(_next_look(facts_now, now, interval, spread), sample_from(facts_now),
                   end=end, asked=asked, shown=shown)


def sample_from(facts: RunFacts) -> float:
    """From when CPU time matters: SAMPLE_AHEAD before its idle (or input) threshold; never
    while it waits for a person (only a busy run's, which the caller samples anyway)."""
    if facts.waiting is not None:
        return float("inf")
    return _nearest_threshold(facts) - SAMPLE_AHEAD


def cpu_busy(used: float, elapsed: float) -> bool:
    """Whether CPU seconds `used` over `elapsed` seconds are work: a rate, not any growth,
    since an idle Node.js or Python process still ticks a few milliseconds a second, and
    summed over minutes that would look like work."""
    return used >= CPU_BUSY_SHARE * max(elapsed, 1e-3)


def input_after(role: RoleConfig) -> float:
    """Idleness at a question that means waiting for input: never longer than idle_timeout,
    so an agent at a question is never charged a strike as stalled."""
    return min(role.input_timeout, role.idle_timeout)


def quiet_after(role: RoleConfig) -> float:
    """Silence that makes a run read as quiet: QUIET_AFTER, or half a shorter idle_timeout."""
    return min(QUIET_AFTER, role.idle_timeout / 2)


def _end(facts: RunFacts, now: float) -> tuple[tuple[Outcome, str] | None, str | None]:
    """Whether a threshold ends the run now (and the question it stopped at, if that is
    why): a gate's idle window; else a loop, the hard timeout, a question, idle_timeout."""
    idle = now - facts.last_activity
    if facts.gate_idle is not None:
        if idle > facts.gate_idle:
            reason = (f"stalled: no output or CPU for {idle:.0f}s "
                      f"(idle_timeout {facts.gate_idle:g}s)")
            return (Outcome.STALLED, reason), None
        return None, None
    role = facts.role
    if facts.looping is not None:
        return (Outcome.LOOPING, facts.looping), None
    if now - facts.spawned_at > role.timeout:
        return (Outcome.TIMED_OUT, f"ran longer than timeout ({role.timeout:g}s)"), None
    if facts.waiting is not None:
        return None, None  # on_input = wait: kept for a person's answer (the timeout holds)
    if idle >= input_after(role) and (question := facts.question()) is not None:
        if role.on_input == "wait":
            return None, question  # kept alive for `taskherd task answer`
        return (Outcome.NEEDS_INPUT, f"waiting for input: {question}"), question
    if idle > role.idle_timeout:
        reason = (f"no output, heartbeat or CPU for {idle:.0f}s "
                  f"(idle_timeout {role.idle_timeout:g}s)")
        return (Outcome.STALLED, reason), None
    return None, None


def _nearest_threshold(facts: RunFacts) -> float:
    """When idleness ends the run next: input_timeout only if it ends with a question."""
    if facts.gate_idle is not None:
        return facts.last_activity + facts.gate_idle
    idle_limit = facts.role.idle_timeout
    if facts.question() is not None:
        idle_limit = input_after(facts.role)
    return facts.last_activity + idle_limit


def _next_look(facts: RunFacts, now: float, interval: float, spread: float) -> float:
    """When the run could next cross a threshold, and no later: while it writes, each round
    (its output is read as it comes: loops, rate limits, questions); else the first of its
    hard timeout, its idle (or input) threshold and SAMPLE_AHEAD before it (a CPU baseline),
    the moment it reads as quiet, and the longest its log may go unread."""
    next_round = now + interval
    times = [facts.spawned_at + facts.role.timeout]
    if facts.writing:
        times.append(next_round)
    elif facts.waiting is not None:
        times.append(now + WAITING_LOOK)  # whether it moved on after an answer
    else:
        threshold = _nearest_threshold(facts)
        times += [threshold, threshold - SAMPLE_AHEAD,
                  facts.last_activity + quiet_after(facts.role),
                  now + _unread_limit(facts) * spread]
    future = [t for t in times if t > now]
    return max(now + LOOK_GAP, min(future, default=next_round))


def _unread_limit(facts: RunFacts) -> float:
    """How long a quiet run's log may go unread. A question written meanwhile is timed from
    its write (the log's mtime), so reading within input_timeout still ends the run on time;
    other news (a loop starting, a rate limit) waits at most QUIET_LOOK."""
    if facts.gate_idle is not None:
        return QUIET_LOOK
    return min(QUIET_LOOK, input_after(facts.role))


def _reads_as(facts: RunFacts, now: float) -> Shown | None:
    """The verdict as a person reads it: waiting for input, quiet since its last sign of
    work, or active (since it became so: an active run is not written again at each look)."""
    if facts.waiting is not None:
        return (Liveness.WAITING_INPUT, facts.shown[1] if facts.shown else now, facts.waiting)
    if now - facts.last_activity >= quiet_after(facts.role):
        return (Liveness.QUIET, facts.last_activity, None)
    if facts.shown is not None and facts.shown[0] is Liveness.ACTIVE:
        return facts.shown
    return (Liveness.ACTIVE, facts.last_activity, None)



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
