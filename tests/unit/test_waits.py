"""One statement of why a ready task is not running (taskherd/policy/waits.py), from counts."""

from __future__ import annotations

from pathlib import Path

from taskherd.config import parse_config
from taskherd.model import Cooldown, Priority, Task, TaskState
from taskherd.policy.budgets import Pause
from taskherd.policy.limits import ClaimLimits
from taskherd.policy.waits import Counts, NodeRoom, cooldown_wait, task_wait

NOW = 1_800_000_000.0
CONFIG = parse_config({"daemon": {"database": "q.db", "max_concurrent": 3},
                       "pools": {"gpu": 1},
                       "roles": {"slow": {"command": ["true"], "max_concurrent": 2},
                                 "fast": {"command": ["true"], "pool": "gpu"}}},
                      base_dir=Path("/tmp"))
LIMITS = ClaimLimits.from_config(CONFIG)


def ready(role: str = "slow", state: str = "ready", run_after: float = NOW - 1) -> Task:
    return Task(id=11, role=role, title="t", prompt="", priority=Priority.P0,
                state=TaskState(state), pool=None, dedup_key=None, review=False, attempts=0,
                max_attempts=3, rescues=0, rate_limits=0, run_after=run_after, lease_node=None,
                lease_expires_at=None, last_error=None, error_tail=None, summary=None,
                reason=None, parent_id=None, meta={}, created_at=NOW - 1, updated_at=NOW - 1,
                finished_at=None)


def node(running: int, paused: str | None = None, roles=("slow", "fast")) -> NodeRoom:
    return NodeRoom("n1", frozenset(roles), running, 3, paused)


def test_a_role_at_its_max_concurrent_on_a_node_with_a_free_slot():
    counts = Counts(running={"slow": 2}, nodes=(node(2),))
    assert task_wait(ready(), LIMITS, counts, NOW) == (
        "role slow is at max_concurrent 2 (2 running)")


def test_each_reason_in_turn():
    free = (node(1),)
    assert task_wait(ready(state="pending"), LIMITS, Counts(nodes=free), NOW) == (
        "it waits for approval (pending)")
    assert task_wait(ready(run_after=NOW + 30), LIMITS, Counts(nodes=free), NOW).startswith(
        "not before ")
    assert task_wait(ready("ghost"), LIMITS, Counts(nodes=free), NOW) == (
        "role ghost is not configured")
    spent = Counts(over_budget={"slow": Pause("slow", NOW + 60, "spent")}, nodes=free)
    assert task_wait(ready(), LIMITS, spent, NOW).startswith("role slow is over budget until ")
    cooling = Cooldown(runtime="command", until=NOW + 60, reason="429", created_at=NOW)
    paused = {"command": cooldown_wait(cooling, NOW)}
    assert task_wait(ready(), LIMITS, Counts(paused_runtimes=paused, nodes=free), NOW).startswith(
        "runtime command is rate-limited until ")
    assert task_wait(ready("fast"), LIMITS, Counts(full_pools=frozenset({"gpu"}), nodes=free),
                     NOW) == "pool gpu is full (1)"
    assert task_wait(ready(), LIMITS, Counts(nodes=()), NOW) == "no node that is up runs role slow"
    assert task_wait(ready(), LIMITS, Counts(nodes=(node(0, "disk full"),)), NOW) == (
        "node n1 starts nothing new: disk full")
    assert task_wait(ready(), LIMITS, Counts(nodes=(node(3),)), NOW) == (
        "node n1 is at max_concurrent 3")
    assert task_wait(ready(), LIMITS, Counts(nodes=free), NOW) is None
    assert task_wait(ready(state="running"), LIMITS, Counts(nodes=()), NOW) is None


def test_a_node_without_the_tags_a_role_needs_says_which_it_lacks():
    config = parse_config({"daemon": {"database": "q.db", "tags": ["cpu"]},
                           "roles": {"trainer": {"command": ["true"], "nodes": ["gpu"]}}},
                          base_dir=Path("/tmp"))
    here = NodeRoom("n1", frozenset(config.runnable_roles), 0, 3, tags=("cpu",))
    assert task_wait(ready("trainer"), ClaimLimits.from_config(config), Counts(nodes=(here,)),
                     NOW) == "role trainer runs on nodes tagged gpu; node n1 has cpu"
