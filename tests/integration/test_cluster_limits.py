"""Four real processes (four nodes) claim from one database with a role limited to one run
at a time and a pool of two: at no instant may the database hold more open runs than that.

Each worker records, for every run it held, the moment its claim had committed and the moment
before it asked to finish it: that span lies inside the time the run was open in the database,
so two spans that overlap are two runs that were open together. A check made before the
claim (counting, then claiming) lets two nodes both see one place left; only a check inside
the claim's transaction, ordered against the other nodes' claims, passes this.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits, PoolLimit, RoleLimit
from taskherd.store import open_store

WORKERS = 4
PER_ROLE = 60
ROLES = ["deployer", "trainer", "builder", "coder"]
LIMITS = ClaimLimits(
    {"deployer": RoleLimit(max_concurrent=1), "trainer": RoleLimit(pool="gpu"),
     "builder": RoleLimit(pool="gpu"), "coder": RoleLimit()},
    {"gpu": PoolLimit(2)},
)


def worker(database: str, node: str, start, out, first_claims, side_by_side) -> None:
    """Claim within the limits and finish until every task is done; send back the spans.

    Each worker holds its first run open until a second worker has one open too (or 10 s
    pass): on two cores the processes could otherwise take turns, and the limits would be
    tested without contention."""
    spans: list[tuple[str, int, float, float]] = []
    try:
        store = open_store(database, durability="normal")
        policy, success = RetryPolicy(), RunResult(Outcome.SUCCEEDED)
        start.wait(60)
        while True:
            claim = store.claim(ClaimRequest(node, time.time(), 600.0, roles=ROLES, limits=LIMITS))
            if claim is None:
                if not store.list_tasks(state=TaskState.READY, limit=1):
                    break
                continue
            opened = time.time()
            if not spans:
                with first_claims.get_lock():
                    first_claims.value += 1
                    if first_claims.value >= 2:
                        side_by_side.set()
                side_by_side.wait(10)
            store.heartbeat(claim.run.id, time.time(), 600.0)  # some work, in the database
            spans.append((claim.run.role, claim.task.id, opened, time.time()))
            store.finish_run(claim.run.id, success, policy, time.time())
        store.close()
        out.put((node, spans, None))
    except BaseException:  # noqa: BLE001 - every failure goes back to the test, named
        out.put((node, spans, traceback.format_exc()))


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans],
                   key=lambda edge: (edge[0], edge[1]))  # an end before a start at one instant
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most


def test_four_nodes_never_hold_more_than_the_limits_together(database: str) -> None:
    with open_store(database, durability="normal") as store:
        store.enqueue_many([NewTask(role=role, title=f"{role} {i}")
                            for i in range(PER_ROLE) for role in ROLES], time.time())
    context = multiprocessing.get_context("spawn")
    start, out = context.Event(), context.Queue()
    first_claims, side_by_side = context.Value("i", 0), context.Event()
    processes = [context.Process(target=worker, args=(database, f"node-{i}", start, out,
                                                      first_claims, side_by_side))
                 for i in range(WORKERS)]
    for process in processes:
        process.start()
    start.set()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    errors = [f"{node}:\n{error}" for node, _, error in results if error]
    assert not errors, "\n".join(errors)

    spans = [span for _, node_spans, _ in results for span in node_spans]
    assert sorted(task_id for _, task_id, _, _ in spans) == list(range(1, 1 + PER_ROLE * 4))
    by_role = {role: [(s, e) for r, _, s, e in spans if r == role] for role in ROLES}
    assert most_at_once(by_role["deployer"]) == 1
    assert most_at_once(by_role["trainer"] + by_role["builder"]) <= 2
    # Runs were open side by side, on several nodes: the limits above were tested under
    # contention, not by processes that happened to take turns.
    assert most_at_once([(start, end) for _, _, start, end in spans]) > 1
    assert len({node for node, node_spans, _ in results if node_spans}) > 1
