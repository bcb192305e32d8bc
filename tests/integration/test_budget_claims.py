"""A budget holds across nodes: two processes, each a node with its own store and its own
dispatcher on one database (a SQLite file, a PostgreSQL server), spend one role's budget
together; so do two real daemons (`taskherd up`) running real agent processes. No run
starts once the spend committed reaches the limit, on either node; the pause begins once
and is delivered once, to a real webhook on 127.0.0.1; when the day rolls over spawns
resume, and the resumption is delivered too where the role asks for it.

"Committed" is what the claim counts: the cost of the runs that ended, plus each run still
open at its expected cost (the mean of the role's priced runs this month, else
`run_estimate_usd`). So the budget can be overshot by one thing only: runs already in flight
that end up costing more than expected (test_runs_in_flight_may_overshoot_...); never by a run
started after the limit was reached.

The workers run in lockstep (each holds its run open until the other has claimed, or a few
seconds pass) so that both nodes claim at the budget's edge together: a check made before the
claim, in a transaction of its own, lets both see the last place and both take it.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
import time
import traceback
from datetime import datetime
from zoneinfo import ZoneInfo

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.ops import Queue
from taskherd.ops import delivery as delivery_ops
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits
from taskherd.services.delivery import Deliverer
from taskherd.services.dispatcher import Dispatcher
from taskherd.services.supervisor import LiveRuns
from taskherd.store import open_store
from tests.e2e.fake_webhook import FakeWebhook

PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2026, 11, 23, 10, 0, tzinfo=PARIS).timestamp()
MIDNIGHT = datetime(2026, 11, 24, 0, 0, tzinfo=PARIS).timestamp()
RUN_COST = 0.30
# Nine runs' worth: odd, so the two nodes in lockstep reach the edge together, each looking
# at eight runs committed and room for one more.
LIMIT = 2.70
LOCKSTEP_WAIT = 3.0  # seconds a worker holds its run for the other node's claim at most


def raw_config(database: str, node: str, on: list[str] | None = None) -> dict:
    coder = {"command": ["true"], "budget": {"daily_usd": LIMIT}, "deliver_to": ["@ops"]}
    if on:
        coder["on"] = on
    return {"daemon": {"database": database, "data_dir": "data", "timezone": "Europe/Paris",
                       "node": node},
            "budgets": {"run_estimate_usd": RUN_COST},
            "roles": {"coder": coder, "qa": {"command": ["true"]}}}


class LockstepSpawner:
    """The dispatcher's `start`: the run spawns, waits for the other node's next claim (the
    barrier), then ends costing RUN_COST."""

    def __init__(self, store, barrier, clock):
        self.store, self.barrier, self.clock = store, barrier, clock
        self.runs: list[int] = []

    def __call__(self, claim, now, probe=False):
        self.store.mark_spawned(claim.run.id, now, 600, pid=None, pid_started_at=None,
                                log_path=None)
        try:
            self.barrier.wait(LOCKSTEP_WAIT)
        except threading.BrokenBarrierError:
            pass  # the other node has stopped claiming: on alone
        result = RunResult(Outcome.SUCCEEDED, 0, summary="ok", cost_usd=RUN_COST)
        self.store.finish_run(claim.run.id, result, RetryPolicy(), self.clock())
        self.runs.append(claim.run.id)
        return claim


def worker(raw: dict, root: str, start, barrier, out) -> None:
    node = raw["daemon"]["node"]
    try:
        from pathlib import Path

        config = parse_config(raw, base_dir=Path(root))
        store = open_store(raw["daemon"]["database"], durability="normal")
        began = time.monotonic()

        def clock() -> float:  # the same morning in Paris, moving on as the test runs
            return NOW + (time.monotonic() - began)

        spawner = LockstepSpawner(store, barrier, clock)
        dispatcher = Dispatcher(config, store, LiveRuns({}, {}), spawner)
        start.wait(60)
        idle = 0
        while idle < 3:  # passes that start nothing: the budget is spent for this node too
            idle = idle + 1 if dispatcher.run_once(clock())["started"] == 0 else 0
        barrier.abort()  # the other node waits for no claim of this one any more
        store.close()
        out.put((node, spawner.runs, None))
    except BaseException:  # noqa: BLE001 - every failure goes back to the test, named
        out.put((node, [], traceback.format_exc()))


def run_two_nodes(database: str, root) -> list[tuple[str, list[int]]]:
    context = multiprocessing.get_context("spawn")
    start, out, barrier = context.Event(), context.Queue(), context.Barrier(2)
    processes = [context.Process(target=worker, args=(raw_config(database, f"node-{i}"),
                                                      str(root), start, barrier, out))
                 for i in range(2)]
    for process in processes:
        process.start()
    start.set()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    errors = [f"{node}:\n{error}" for node, _, error in results if error]
    assert not errors, "\n".join(errors)
    return [(node, runs) for node, runs, _ in results]


def test_two_nodes_never_start_a_run_past_a_shared_budget(database, tmp_path):
    hook = FakeWebhook().start()
    try:
        config = parse_config(raw_config(database, "node-t", on=["budget_paused",
                                                                 "budget_resumed"]),
                              base_dir=tmp_path)
        with open_store(database, durability="normal") as store:
            queue = Queue(config, store)
            delivery_ops.add_alias(queue, "ops", "webhook", hook.url, NOW)
            store.enqueue_many([NewTask(role="coder", title=f"c{i}") for i in range(16)], NOW)

            results = run_two_nodes(database, tmp_path)

            runs = store.list_runs(role="coder", limit=100)
            assert len(runs) == round(LIMIT / RUN_COST)  # nine, and not one more
            assert sum(run.cost_usd for run in runs) <= LIMIT + 1e-9
            assert all(run.ended_at is not None for run in runs)
            # Both nodes ran some: the budget was shared, not spent by one node alone.
            assert all(node_runs for _, node_runs in results), results
            assert len(store.list_tasks(state=TaskState.READY, limit=100)) == 7
            pause = store.cooldown_of("budget:coder")
            assert pause.until == MIDNIGHT

            # Both nodes found the budget spent, pass after pass: the targets hear it once.
            Deliverer(store, lambda: NOW + 60).run_once(NOW + 60)
            paused = [body for body in hook.acknowledged if body["event"] == "budget_paused"]
            assert len(paused) == 1, hook.acknowledged
            assert paused[0]["budget"]["scope"] == "coder"
            assert paused[0]["budget"]["until"] == MIDNIGHT
            assert "coder daily limit $2.70 reached" in paused[0]["budget"]["reason"]

            # A new day in Paris: both nodes look, one lifts the pause and tells it, and the
            # role's work resumes until the new day's budget is spent.
            after = MIDNIGHT + 1
            nodes = [Dispatcher(parse_config(raw_config(database, f"node-{i}",
                                                        on=["budget_paused", "budget_resumed"]),
                                             base_dir=tmp_path),
                                store, LiveRuns({}, {}), lambda claim, now: claim)
                     for i in range(2)]
            started = sum(node.run_once(after)["started"] for node in nodes)
            assert started == 7  # the seven left, in flight at $0.30 expected each: $2.10
            Deliverer(store, lambda: after).run_once(after)
            events = [body["event"] for body in hook.acknowledged]
            assert events == ["budget_paused", "budget_resumed"]
    finally:
        hook.stop()


def test_runs_in_flight_may_overshoot_by_what_they_cost_past_their_estimate(database, tmp_path):
    """The one overshoot a budget allows: runs that started while the spend committed left
    room, and ended costing more than they were expected to. The claim after them is refused."""
    limits = ClaimLimits.from_config(parse_config(
        {"daemon": {"timezone": "Europe/Paris"}, "budgets": {"run_estimate_usd": 0.30},
         "roles": {"coder": {"command": ["true"], "budget": {"daily_usd": 1.0}}}},
        base_dir=tmp_path))
    with open_store(database, durability="normal") as store:
        store.enqueue_many([NewTask(role="coder", title=f"c{i}") for i in range(5)], NOW)
        claims = [store.claim(ClaimRequest("n1", NOW, 600, roles=["coder"], limits=limits))
                  for _ in range(4)]
        assert [c is not None for c in claims] == [True, True, True, False]  # $0.90 in flight
        for claim in claims[:3]:
            store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, 0, cost_usd=0.50),
                             RetryPolicy(), NOW + 1)
        refused = store.attempt_claim(ClaimRequest("n1", NOW + 2, 600, roles=["coder"],
                                                   limits=limits))
        [refusal] = refused.refused
        assert refused.claim is None and refusal.budget.until == MIDNIGHT
        assert "$1.50 spent or running" in refusal.reason
        spent = sum(run.cost_usd for run in store.list_runs(role="coder"))
        assert round(spent, 2) == 1.50  # over by the in-flight runs' excess, and only that


def test_a_role_without_a_budget_is_claimed_beside_a_spent_one(database, tmp_path):
    limits = ClaimLimits.from_config(parse_config(
        {"daemon": {"timezone": "Europe/Paris"},
         "roles": {"coder": {"command": ["true"], "budget": {"daily_usd": 0.10}},
                   "qa": {"command": ["true"]}}}, base_dir=tmp_path))
    assert limits.budget_scopes("qa") == () and not limits.crosses_nodes("qa", None)
    with open_store(database, durability="normal") as store:
        store.enqueue(NewTask(role="coder", title="c"), NOW)
        store.enqueue(NewTask(role="coder", title="c2"), NOW)
        store.enqueue(NewTask(role="qa", title="q"), NOW)
        first = store.claim(ClaimRequest("n1", NOW, 600, roles=["coder", "qa"], limits=limits))
        assert first.task.title == "c"  # nothing spent yet, and no estimate: it fits
        store.finish_run(first.run.id, RunResult(Outcome.SUCCEEDED, 0, cost_usd=0.25),
                         RetryPolicy(), NOW)
        second = store.attempt_claim(ClaimRequest("n1", NOW, 600, roles=["coder", "qa"],
                                                  limits=limits))
        assert second.claim.task.title == "q"
        assert [(r.role, r.budget is not None) for r in second.refused] == [("coder", True)]


def test_a_pause_begins_and_lifts_once_whoever_asks(database):
    """The store's two transitions: the first call begins (or ends) the pause and writes the
    outbox, every later one finds it done; a pause only moves to a later reset, and a look at
    a pause that has moved since lifts nothing."""
    with open_store(database, durability="normal") as store, \
            open_store(database, durability="normal") as other:
        reason = "budget: coder daily limit $1.00 reached"
        assert store.pause_budget("coder", MIDNIGHT, reason, ["ops"], NOW)
        assert not other.pause_budget("coder", MIDNIGHT, reason, ["ops"], NOW + 5)
        month_end = MIDNIGHT + 7 * 86400  # the month's limit, reached while the day's held
        assert not other.pause_budget("coder", month_end, reason, ["ops"], NOW + 9)
        assert store.cooldown_of("budget:coder").until == month_end
        assert not store.lift_budget_pause("coder", MIDNIGHT, ["ops"], month_end + 1)  # stale
        assert other.lift_budget_pause("coder", month_end, ["ops"], month_end + 1)
        assert not store.lift_budget_pause("coder", month_end, ["ops"], month_end + 2)
        # A pause whose period passed but which nobody lifted yet: the next one is new.
        assert store.pause_budget("coder", MIDNIGHT, reason, [], NOW)
        assert store.pause_budget("coder", month_end + 86400, reason, ["ops"], month_end + 3)
        events = [d.event for d in store.list_deliveries(alias="ops", limit=10)]
        assert sorted(events) == ["budget_paused", "budget_paused", "budget_resumed"]


DAEMON_AGENT = """
    import sys, time
    sys.stdin.read()
    time.sleep(0.3)  # its work: long enough that runs of both nodes are open together
    print("TASK_COMPLETE: done")
"""


def midday_zone() -> str:
    """A fixed-offset zone in which it is about noon now: the budget's day does not roll over
    while the test runs, whenever it runs."""
    offset = 12 - datetime.now(ZoneInfo("UTC")).hour
    offset = offset - 24 if offset > 12 else offset
    return f"Etc/GMT{-offset:+d}"  # Etc/GMT-3 is UTC+3


def test_two_daemons_spend_one_budget_and_tell_the_pause_once(database, tmp_path):
    """Two real `taskherd up` processes, two nodes on one database, each running up to three
    agents: together they start nine $0.30 runs under a $2.70 budget (a command's run has no
    cost of its own and counts at unknown_run_usd), never a tenth, and the pause reaches the
    webhook once."""
    from tests.fleet import Fleet, agent

    hook = FakeWebhook().start()
    program = agent(tmp_path, "agent", DAEMON_AGENT)
    zone = midday_zone()
    nodes = []
    try:
        for name in ("node-a", "node-b"):
            root = tmp_path / name
            root.mkdir()
            nodes.append(Fleet(root, f"""
                [daemon]
                database = "{database}"
                data_dir = "data"
                node = "{name}"
                timezone = "{zone}"
                max_concurrent = 3
                path = "/usr/bin:/bin"

                [budgets]
                unknown_run_usd = 0.30

                [roles.coder]
                command = ["{sys.executable}", "{program}"]
                budget = {{ daily_usd = 2.70 }}
                deliver_to = ["@ops"]
                on = ["budget_paused"]
                """))
        first = nodes[0]
        first.cli("alias", "add", "ops", "webhook", hook.url)
        for i in range(14):
            first.add(f"c{i}", role="coder")
        for node in nodes:
            node.up()

        def spent_and_told():
            runs = first.store.list_runs(role="coder", limit=100)
            return (len(runs) >= 9 and all(run.ended_at is not None for run in runs)
                    and any(body["event"] == "budget_paused" for body in hook.acknowledged))

        first.wait_until(spent_and_told, 60, "nine runs ended and the pause delivered")
        for node in nodes:
            assert node.stop() == 0
        runs = first.store.list_runs(role="coder", limit=100)
        assert len(runs) == 9, [(run.id, run.node) for run in runs]
        assert {run.node for run in runs} == {"node-a", "node-b"}
        assert [body["event"] for body in hook.acknowledged] == ["budget_paused"]
        assert [d.event for d in first.store.list_deliveries(alias="ops")] == ["budget_paused"]
        assert len(first.store.list_tasks(state=TaskState.READY, limit=100)) == 5
    finally:
        for node in nodes:
            node.close()
        hook.stop()


class AnotherNodeSpendsAtTheProbe:
    """The store, where another node's run spends the budget's last place just as this node
    takes a rate limit's probe: after this node's pass began and looked at the budget."""

    def __init__(self, store):
        self.store = store

    def __getattr__(self, name):
        return getattr(self.store, name)

    def take_probe(self, runtime, node, now):
        spent = self.store.claim(ClaimRequest("node-other", now, 600, roles=["coder"]))
        self.store.finish_run(spent.run.id, RunResult(Outcome.SUCCEEDED, 0, cost_usd=RUN_COST),
                              RetryPolicy(), now)
        return self.store.take_probe(runtime, node, now)


def test_a_probe_after_a_rate_limit_is_held_to_the_budget_too(database, tmp_path):
    config = parse_config(raw_config(database, "node-0"), base_dir=tmp_path)
    runtime = config.roles["coder"].runtime
    started = []
    with open_store(database, durability="normal") as store:
        for i in range(8):  # $2.40 of $2.70 spent: room for one more run, as the pass begins
            store.enqueue(NewTask(role="coder", title=f"spent {i}"), NOW)
            claim = store.claim(ClaimRequest("node-other", NOW, 600, roles=["coder"]))
            store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, 0, cost_usd=RUN_COST),
                             RetryPolicy(), NOW)
        for title in ("taken by the other node", "the probe's candidate"):
            store.enqueue(NewTask(role="coder", title=title), NOW)
        store.set_cooldown(runtime, NOW - 1, "rate limited", NOW - 600)  # lifted: probe it
        dispatcher = Dispatcher(config, AnotherNodeSpendsAtTheProbe(store), LiveRuns({}, {}),
                                lambda claim, now, probe=False: started.append(claim) or claim)
        assert dispatcher.run_once(NOW)["started"] == 0
        assert started == []
        waiting = store.list_tasks(state=TaskState.READY, limit=10)
        assert [task.title for task in waiting] == ["the probe's candidate"]
