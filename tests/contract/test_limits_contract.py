"""Limits hold across nodes: a claim counts every node's open runs of its role and pools, the
role's latest claim on any node (stagger) and the runtime's cooldown, in its own transaction.
Each "node" here is a store of its own on the same database, as a second daemon would hold."""

from __future__ import annotations

import pytest

from taskherd.model import InboxLimit, NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits, PoolLimit, RoleLimit
from taskherd.store.messages import NewMessage
from taskherd.store.postgres import PostgresStore
from taskherd.store.sqlite import SQLiteStore

NOW = 1_700_000_000.0
LEASE = 60.0


@pytest.fixture(params=["sqlite", "postgres", "postgres in steps"])
def store(request, tmp_path):
    """The contract's stores, and PostgreSQL's as a role that may not create the temporary
    function a claim within limits is one call of: it claims in steps, held to the same."""
    if request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "queue.db", durability="normal")
    else:
        url = request.getfixturevalue("pg_url")
        if request.param == "postgres in steps":
            PostgresStore(url, durability="normal").close()  # migrated by its owner
            url = request.getfixturevalue("pg_server").url_without_temporary(url)
        opened = PostgresStore(url, durability="normal")
    yield opened
    opened.close()


@pytest.fixture
def other(reopen):
    second = reopen()
    yield second
    second.close()


def claim(store, node, limits, roles, now=NOW, refusals=None):
    """The claim a node makes of `roles` within `limits`; why it passed others by, by role,
    into `refusals`."""
    attempt = store.attempt_claim(ClaimRequest(node, now, LEASE, roles=roles, limits=limits,
                                               runtime_of={role: "command" for role in roles}))
    if refusals is not None:
        refusals.update((refusal.role, refusal) for refusal in attempt.refused)
    return attempt.claim


def add(store, role, title, pool=None, now=NOW):
    return store.enqueue(NewTask(role=role, title=title, pool=pool), now).task


def test_a_role_at_max_concurrent_on_one_node_has_no_room_on_another(store, other):
    limits = ClaimLimits({"deployer": RoleLimit(max_concurrent=1)})
    first, second = add(store, "deployer", "deploy 1"), add(store, "deployer", "deploy 2")
    held = claim(store, "node-a", limits, ["deployer"])
    assert held.task.id == first.id
    refusals = {}
    assert claim(other, "node-b", limits, ["deployer"], refusals=refusals) is None
    assert "role deployer is at max_concurrent 1 (1 running)" in refusals["deployer"].reason
    store.finish_run(held.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), NOW + 1)
    assert claim(other, "node-b", limits, ["deployer"], now=NOW + 1).task.id == second.id


def test_a_role_of_scope_node_is_counted_on_each_node_alone(store, other):
    limits = ClaimLimits({"gpu": RoleLimit(max_concurrent=1, scope="node")})
    for i in range(3):
        add(store, "gpu", f"train {i}")
    assert claim(store, "node-a", limits, ["gpu"]) is not None
    assert claim(other, "node-b", limits, ["gpu"]) is not None
    refusals = {}
    assert claim(store, "node-a", limits, ["gpu"], refusals=refusals) is None
    assert "max_concurrent 1 on this node" in refusals["gpu"].reason


def test_a_full_role_is_passed_by_for_the_next_task_that_fits(store, other):
    limits = ClaimLimits({"deployer": RoleLimit(max_concurrent=1), "coder": RoleLimit()})
    add(store, "deployer", "deploy 1")
    add(store, "deployer", "deploy 2")
    code = add(store, "coder", "code")
    claim(store, "node-a", limits, ["deployer", "coder"])
    refusals = {}
    got = claim(other, "node-b", limits, ["deployer", "coder"], refusals=refusals)
    assert got.task.id == code.id and list(refusals) == ["deployer"]


def test_a_pool_holds_its_capacity_across_nodes_by_role_and_by_task(store, other):
    # The role's pool, and a task's own pool: a run holds a place in both.
    limits = ClaimLimits({"trainer": RoleLimit(pool="gpu"), "coder": RoleLimit()},
                         {"gpu": PoolLimit(2)})
    add(store, "trainer", "train")
    add(store, "coder", "render", pool="gpu")
    add(store, "trainer", "train more")
    plain = add(store, "coder", "plain code")
    first = claim(store, "node-a", limits, ["trainer", "coder"])
    second = claim(other, "node-b", limits, ["trainer", "coder"])
    assert (first.run.pool, second.task.pool) == ("gpu", "gpu")
    refusals = {}
    third = claim(other, "node-b", limits, ["trainer", "coder"], refusals=refusals)
    assert third.task.id == plain.id  # the gpu is full; work outside it goes on
    assert refusals["trainer"].reason == "pool gpu is full (2)"


def test_a_run_in_its_roles_pool_and_its_tasks_pool_fits_both(store, other):
    # Two pools counted for one candidate: the coder's own (cpu, room left) and the task's
    # (gpu, full): its task waits and the role's next task, outside the gpu, goes instead.
    limits = ClaimLimits({"coder": RoleLimit(pool="cpu"), "trainer": RoleLimit()},
                         {"cpu": PoolLimit(5), "gpu": PoolLimit(1)})
    add(store, "trainer", "train", pool="gpu")
    render = add(store, "coder", "render", pool="gpu")
    plain = add(store, "coder", "plain code")
    claim(store, "node-a", limits, ["trainer"])
    refusals = {}
    got = claim(other, "node-b", limits, ["coder"], refusals=refusals)
    assert got.task.id == plain.id and got.run.pool == "cpu"
    assert refusals["coder"].reason == "pool gpu is full (1)" and refusals["coder"].pool == "gpu"
    assert store.get_task(render.id).state is TaskState.READY


def test_a_stagger_counts_the_latest_claim_on_any_node(store, other):
    limits = ClaimLimits({"coder": RoleLimit(stagger=30.0)})
    add(store, "coder", "one")
    add(store, "coder", "two")
    claim(store, "node-a", limits, ["coder"])
    refusals = {}
    assert claim(other, "node-b", limits, ["coder"], now=NOW + 10, refusals=refusals) is None
    assert refusals["coder"].retry_at == NOW + 30
    assert claim(other, "node-b", limits, ["coder"], now=NOW + 30) is not None


def test_a_cooldown_set_by_one_node_holds_the_claims_of_another(store, other):
    limits = ClaimLimits({"coder": RoleLimit(runtime="claude")})
    add(store, "coder", "write")
    store.set_cooldown("claude", NOW + 600, "429", NOW)
    refusals = {}
    assert claim(other, "node-b", limits, ["coder"], refusals=refusals) is None
    assert "runtime claude is rate-limited" in refusals["coder"].reason
    assert claim(other, "node-b", limits, ["coder"], now=NOW + 601) is not None


def test_a_claim_within_limits_is_the_task_and_run_the_store_holds(store):
    # PostgreSQL counts, claims and records the run in one statement: what it hands back is
    # what the database keeps, column for column, and nothing of the count besides.
    limits = ClaimLimits({"coder": RoleLimit(max_concurrent=2, stagger=5.0, pool="cpu",
                                             runtime="claude")}, {"cpu": PoolLimit(3)})
    task = add(store, "coder", "write", pool="cpu")
    got = store.claim(ClaimRequest("node-a", NOW, LEASE, roles=["coder"], limits=limits,
                                   runtime="claude"))
    assert got.task == store.get_task(task.id) and got.task.state is TaskState.CLAIMED
    assert got.run == store.get_run(got.run.id)
    assert got.run.to_dict() == store.get_run(got.run.id).to_dict()
    assert (got.run.role, got.run.runtime, got.run.pool, got.run.attempt) == \
        ("coder", "claude", "cpu", 1)


def test_the_inbox_goes_to_a_claim_within_limits_and_waits_through_a_refusal(store, other):
    limits = ClaimLimits({"coder": RoleLimit(max_concurrent=1)})
    first, second = add(store, "coder", "one"), add(store, "coder", "two")
    held = claim(store, "node-a", limits, ["coder"])
    note = store.send_messages([NewMessage("@person", "coder", "use the staging db")],
                               NOW)[0]
    mine = store.send_messages([NewMessage("@person", f"task:{second.id}", "for two")],
                               NOW)[0]
    refused = other.attempt_claim(ClaimRequest("node-b", NOW, LEASE, roles=["coder"],
                                               limits=limits, inbox=InboxLimit()))
    assert refused.claim is None and "max_concurrent 1" in refused.refused[0].reason
    store.finish_run(held.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), NOW + 1)
    got = other.claim(ClaimRequest("node-b", NOW + 1, LEASE, roles=["coder"], limits=limits,
                      inbox=InboxLimit()))
    assert (held.task.id, got.task.id) == (first.id, second.id)
    assert [m.id for m in got.inbox] == [note.id, mine.id]  # none was taken by the refusal
    assert all(m.delivered_run_id == got.run.id for m in got.inbox)


def test_a_claim_within_limits_gets_its_inbox_urgent_first_within_its_size(store):
    # What a daemon's claim delivers: as many messages as fit, urgent first, then oldest;
    # the first always fits, the rest wait for the next run of the role.
    limits = ClaimLimits({"coder": RoleLimit(max_concurrent=3)})
    task = add(store, "coder", "one")
    add(store, "coder", "two")

    def send(recipient, body, at, priority=0):
        return store.send_messages([NewMessage("@person", recipient, body, priority=priority)],
                                   at)[0]

    big = send("coder", "b" * 700, NOW - 40)
    urgent = send("coder", "u" * 500, NOW - 10, priority=2)
    mine = send(f"task:{task.id}", "for one", NOW - 30)
    later = send("coder", "later", NOW - 20)
    first = store.claim(ClaimRequest("node-a", NOW, LEASE, roles=["coder"], limits=limits,
                        inbox=InboxLimit(messages=10, bytes=1000)))
    assert first.task.id == task.id
    assert [m.id for m in first.inbox] == [urgent.id]  # urgent alone: the oldest would pass
    assert first.inbox[0].delivered_run_id == first.run.id
    second = store.claim(ClaimRequest("node-a", NOW + 1, LEASE, roles=["coder"], limits=limits,
                         inbox=InboxLimit(messages=2, bytes=100)))
    assert [m.id for m in second.inbox] == [big.id]  # alone over the size: it still goes
    third_task = add(store, "coder", "three")
    third = store.claim(ClaimRequest("node-a", NOW + 2, LEASE, roles=["coder"], limits=limits,
                        inbox=InboxLimit(messages=5, bytes=1000)))
    assert third.task.id == third_task.id
    assert [m.id for m in third.inbox] == [later.id]
    # Task one's own message did not fit its run, and no run of another task takes it.
    assert store.get_message(mine.id).delivered_at is None
    assert all(store.get_message(m.id).delivered_run_id == run.run.id
               for run in (first, second, third) for m in run.inbox)


def test_a_silent_node_is_declared_down_and_its_runs_rescued_without_a_strike(store, other):
    store.node_up("node-a", host="a", pid=1, version="1", lease=LEASE, roles=["coder"],
                  now=NOW, timeout=15.0, tags=["gpu"])
    other.node_up("node-b", host="b", pid=2, version="1", lease=LEASE, roles=["coder"], now=NOW)
    task = add(store, "coder", "outlives its node")
    held = store.claim(ClaimRequest("node-a", NOW, LEASE))
    store.mark_spawned(held.run.id, NOW, LEASE, pid=4242, pid_started_at=NOW, log_path="x.log")
    assert other.rescue_down_nodes("node-b", NOW + 15, RetryPolicy) == []  # not yet silent
    other.node_seen("node-b", NOW + 16, running=0, roles=["coder"])
    [down] = other.rescue_down_nodes("node-b", NOW + 16, lambda role: RetryPolicy())
    assert (down.node.name, down.node.down_by) == ("node-a", "node-b")
    [rescued] = down.rescued
    assert rescued.run.outcome is Outcome.LOST and "node node-a went silent" in rescued.run.error
    back = store.get_task(task.id)
    assert back.state is TaskState.READY and (back.attempts, back.rescues) == (0, 1)
    nodes = {node.name: node for node in other.list_nodes()}
    assert nodes["node-a"].status(NOW + 16) == "down" and nodes["node-a"].tags == ("gpu",)
    assert other.rescue_down_nodes("node-b", NOW + 17, lambda role: RetryPolicy()) == []
    # The node comes back: it learns it was declared down, and which of its runs were taken.
    again = store.node_up("node-a", host="a", pid=3, version="1", lease=LEASE, roles=[],
                          now=NOW + 20, timeout=15.0)
    assert again.was_down_at == NOW + 16 and again.status(NOW + 20) == "up"
    assert [run.id for run in store.lost_runs_of_node("node-a", since=NOW + 16)] == [held.run.id]


def test_a_task_for_any_role_is_counted_as_the_role_that_claims_it(store, other):
    limits = ClaimLimits({"coder": RoleLimit(max_concurrent=1)})
    first, second = add(store, "any", "anyone 1"), add(store, "any", "anyone 2")
    roles = ["coder", "qa"]
    got = store.claim(ClaimRequest("node-a", NOW, LEASE, roles=roles, as_role="coder",
                                   limits=limits))
    assert (got.task.id, got.run.role) == (first.id, "coder")
    refused = other.attempt_claim(ClaimRequest("node-b", NOW, LEASE, roles=["coder"],
                                               as_role="coder", limits=limits))
    assert refused.claim is None
    assert "role coder is at max_concurrent 1" in refused.refused[0].reason
    # The coder is full, so the next task for anyone goes to the role that still has room.
    got = other.claim(ClaimRequest("node-b", NOW, LEASE, roles=roles, as_role="coder",
                                   limits=limits))
    assert (got.task.id, got.run.role) == (second.id, "qa")


def test_a_pool_of_scope_node_is_counted_on_each_node_beside_a_pool_of_the_fleet(store, other):
    # The role's pool is the fleet's; the task's pool is one per machine (a GPU each).
    limits = ClaimLimits({"coder": RoleLimit(pool="cpu")},
                         {"cpu": PoolLimit(2), "gpu": PoolLimit(1, scope="node")})
    first, second = add(store, "coder", "train 1", pool="gpu"), add(store, "coder", "train 2",
                                                                    pool="gpu")
    assert claim(store, "node-a", limits, ["coder"]).task.id == first.id
    refusals = {}
    assert claim(store, "node-a", limits, ["coder"], refusals=refusals) is None
    assert refusals["coder"].reason == "pool gpu is full (1 on this node)"
    assert refusals["coder"].pool == "gpu"  # the task's pool: tasks outside it may still go
    assert claim(other, "node-b", limits, ["coder"]).task.id == second.id
    add(store, "coder", "lint")  # no task pool: only the role's pool counts, and it is full
    refusals = {}
    assert claim(other, "node-b", limits, ["coder"], refusals=refusals) is None
    assert refusals["coder"].reason == "pool cpu is full (2)"
