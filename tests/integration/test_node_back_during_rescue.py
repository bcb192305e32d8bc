"""A node that starts again while another node is declaring it down (PostgreSQL: the two
transactions interleave; SQLite has one writer at a time, so they never do there)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait

import pytest

from taskherd.model import NewTask, Outcome, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import StoreError, open_store
from tests.interleave import pause_before, wait_for_lock_wait_or

LEASE = 60.0
NOW = 1000.0


def during_rescue(rescuer, pause_at: str, pg_url: str, action):
    """n1 (`rescuer`) declares n0 down and pauses its rescue before the statement `pause_at`;
    `action` (n0's own call) is then made and left to wait on the rescue's locks, and the
    rescue goes on. Returns the rescue's result and `action`'s future, settled."""
    under_way, go_on = pause_before(rescuer, pause_at)
    with ThreadPoolExecutor(2) as threads:
        try:
            rescue = threads.submit(rescuer.rescue_down_nodes, "n1", NOW + 20,
                                    lambda role: RetryPolicy())
            assert under_way.wait(10)
            acted = threads.submit(action)
            wait_for_lock_wait_or(acted.done, pg_url)
        finally:
            go_on.set()
        rescued = rescue.result(10)
        wait([acted], timeout=10)
    return rescued, acted


def test_a_node_starting_during_its_rescue_learns_it_was_declared_down(pg_url):
    # The daemon of n0 died, not its machine: its agent runs on. n1 declares n0 down and
    # rescues the run just as n0's new daemon starts. Were n0's start to read its record
    # before the rescue commits, it would learn nothing of it: it would neither adopt the run
    # (no longer open) nor stop its agent (not knowing it had been declared down), and the
    # agent would run on, unwatched, beside the task's next run on another node.
    with open_store(pg_url, durability="normal") as node, \
            open_store(pg_url, durability="normal") as other:
        node.node_up("n0", host="a", pid=1, version="1", lease=LEASE, roles=["r"], now=NOW,
                     timeout=15.0)
        node.enqueue(NewTask(role="r", title="outlives its daemon"), NOW)
        held = node.claim(ClaimRequest("n0", NOW, LEASE))
        node.mark_spawned(held.run.id, NOW, LEASE, pid=4242, pid_started_at=NOW, log_path=None)
        # n1's rescue has declared n0 down and holds its record, about to end its runs.
        [down], back = during_rescue(
            other, "open_runs_of_down_node", pg_url,
            lambda: node.node_up("n0", host="a", pid=2, version="1", lease=LEASE, roles=["r"],
                                 now=NOW + 20, timeout=15.0))
        again = back.result()
    assert [f.run.id for f in down.rescued] == [held.run.id]
    assert down.rescued[0].run.outcome is Outcome.LOST
    # Started after the rescue committed: it knows, and finds the run to stop its agent.
    assert again.was_down_at == NOW + 20
    assert [run.id for run in node.lost_runs_of_node("n0", since=again.was_down_at)] \
        == [held.run.id]


def test_a_heartbeat_during_its_rescue_learns_the_node_was_declared_down(pg_url):
    # A node only slow, declared down as it says it is alive: it learns it (and says so).
    with open_store(pg_url, durability="normal") as node, \
            open_store(pg_url, durability="normal") as other:
        node.node_up("n0", host="a", pid=1, version="1", lease=LEASE, roles=["r"], now=NOW,
                     timeout=15.0)
        rescued, seen = during_rescue(
            other, "open_runs_of_down_node", pg_url,
            lambda: node.node_seen("n0", NOW + 20, running=0, roles=["r"]))
        assert len(rescued) == 1
        before = seen.result()
    assert before.down_at == NOW + 20 and before.down_by == "n1"


def test_an_agent_told_its_done_was_taken_is_never_run_again_by_a_rescue(pg_url):
    # n0 is only slow: n1 declares it down and reads its run to end it, while n0's agent says
    # `taskherd done` through its daemon. Had the report committed after the rescue read the
    # run, the agent would have been told it was taken, and the rescue would still end the run
    # `lost` and its task run a second time.
    with open_store(pg_url, durability="normal") as node, \
            open_store(pg_url, durability="normal") as other:
        node.node_up("n0", host="a", pid=1, version="1", lease=LEASE, roles=["r"], now=NOW,
                     timeout=15.0)
        task = node.enqueue(NewTask(role="r", title="deploy once"), NOW).task
        held = node.claim(ClaimRequest("n0", NOW, LEASE))
        node.mark_spawned(held.run.id, NOW, LEASE, pid=4242, pid_started_at=NOW, log_path=None)
        [down], report = during_rescue(
            other, "end_run", pg_url,
            lambda: node.report(held.run.id, "done", NOW + 20, "deployed"))
        with pytest.raises(StoreError, match="already ended"):
            report.result()  # the agent is told: it is not its task any more
    [rescued] = down.rescued
    assert rescued.run.outcome is Outcome.LOST and rescued.task.state is TaskState.READY
    assert node.get_task(task.id).state is TaskState.READY
