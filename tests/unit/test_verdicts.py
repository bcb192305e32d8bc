"""The supervisor's verdict on a running agent, decided from its facts alone (no process):
stalled past idle_timeout, a question ending it as needs_input (or kept for an answer),
a loop, the hard timeout, a gate's own idle window; and when it is looked at next."""

from __future__ import annotations

from dataclasses import replace

from taskherd.model import Liveness, Outcome
from taskherd.model.settings import RoleConfig
from taskherd.policy.liveness import (
    LOOK_GAP,
    QUIET_AFTER,
    QUIET_LOOK,
    SAMPLE_AHEAD,
    WAITING_LOOK,
    RunFacts,
    cpu_busy,
    judge,
)

NOW = 1_800_000_000.0
ROLE = RoleConfig(name="coder", timeout=3600.0, idle_timeout=600.0, input_timeout=60.0)


def facts(idle: float = 0.0, question: str | None = None, **fields) -> RunFacts:
    base = RunFacts(ROLE, spawned_at=NOW - 1000, last_activity=NOW - idle, writing=False,
                    question=lambda: question)
    return replace(base, **fields)


def test_a_quiet_run_is_stalled_past_idle_timeout_and_not_before() -> None:
    assert judge(facts(idle=599), NOW, interval=1.0).end is None
    end = judge(facts(idle=601), NOW, interval=1.0).end
    assert end is not None and end[0] is Outcome.STALLED and "idle_timeout 600s" in end[1]


def test_a_question_ends_the_run_at_input_timeout_or_waits_for_an_answer() -> None:
    early = judge(facts(idle=59, question="Continue? [y/N]"), NOW, interval=1.0)
    assert early.end is None and early.asked is None
    asked = judge(facts(idle=60, question="Continue? [y/N]"), NOW, interval=1.0)
    assert asked.end == (Outcome.NEEDS_INPUT, "waiting for input: Continue? [y/N]")
    assert asked.asked == "Continue? [y/N]"
    waits = replace(ROLE, on_input="wait")
    kept = judge(facts(idle=60, question="Continue? [y/N]", role=waits), NOW, interval=1.0)
    assert kept.end is None and kept.asked == "Continue? [y/N]"
    assert kept.shown == (Liveness.WAITING_INPUT, NOW, "Continue? [y/N]")
    assert kept.next_look == NOW + WAITING_LOOK and kept.sample_from == float("inf")
    # Kept waiting past idle_timeout: a person's answer is awaited, not a stall.
    still = judge(facts(idle=900, role=waits, waiting="Continue? [y/N]"), NOW, interval=1.0)
    assert still.end is None and still.asked is None


def test_a_loop_and_the_hard_timeout_end_the_run() -> None:
    assert judge(facts(looping="the same 2 lines 40 times"), NOW, interval=1.0).end == (
        Outcome.LOOPING, "the same 2 lines 40 times")
    late = judge(facts(spawned_at=NOW - 3601), NOW, interval=1.0).end
    assert late is not None and late[0] is Outcome.TIMED_OUT


def test_a_gate_is_judged_by_its_own_idle_window_alone() -> None:
    gate = facts(idle=31, gate_idle=30.0, looping="ignored", spawned_at=NOW - 9999)
    end = judge(gate, NOW, interval=1.0).end
    assert end is not None and end[0] is Outcome.STALLED and "idle_timeout 30s" in end[1]
    assert judge(replace(gate, last_activity=NOW - 29), NOW, interval=1.0).end is None


def test_the_next_look_is_when_a_threshold_could_next_fall() -> None:
    assert judge(facts(writing=True), NOW, interval=1.0).next_look == NOW + 1.0
    # Just active: it reads as quiet first; then its log is read within QUIET_LOOK (input
    # timeout 60 s is longer); sampled from SAMPLE_AHEAD before its idle threshold.
    fresh = judge(facts(idle=0.0), NOW, interval=1.0)
    assert fresh.next_look == NOW + QUIET_AFTER
    assert fresh.sample_from == NOW + 600 - SAMPLE_AHEAD
    quiet = judge(facts(idle=100), NOW, interval=1.0, spread=0.8)
    assert quiet.next_look == NOW + 0.8 * QUIET_LOOK
    near = judge(facts(idle=595), NOW, interval=1.0)
    assert near.next_look == NOW + 5 and near.sample_from < NOW
    # At a question, the input threshold is the near one.
    asking = judge(facts(idle=20, question="Proceed?"), NOW, interval=1.0)
    assert asking.sample_from == NOW + 40 - SAMPLE_AHEAD
    # Never sooner than LOOK_GAP, even when a threshold falls sooner.
    assert judge(facts(idle=599.9), NOW, interval=1.0).next_look == NOW + LOOK_GAP


def test_the_verdict_shown_changes_only_when_it_reads_differently() -> None:
    active = judge(facts(idle=1), NOW, interval=1.0).shown
    assert active == (Liveness.ACTIVE, NOW - 1, None)
    # Still active later: the same verdict, so nothing is written again.
    assert judge(facts(idle=0, shown=active), NOW + 5, interval=1.0).shown == active
    assert judge(facts(idle=QUIET_AFTER), NOW, interval=1.0).shown == (
        Liveness.QUIET, NOW - QUIET_AFTER, None)


def test_cpu_counts_as_work_only_at_a_rate() -> None:
    assert cpu_busy(0.5, 5.0)
    assert not cpu_busy(0.01, 60.0)  # an idle interpreter's ticks, summed over a minute
