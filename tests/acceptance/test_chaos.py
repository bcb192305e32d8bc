"""Chaos: three real daemons on one real PostgreSQL database, 300 tasks of agents that take
0.2–2 s, a role allowed one run at a time, a pool of two, and a job firing every second; for
90 s a driver kills a random node every 5–15 s (the machine dies: SIGKILL to the daemon and
to every agent it started) and starts it again.

Afterwards, by the agents' own records (each writes its start and its end to a shared file)
and by the database: every task was completed exactly once; the deployer never ran twice at
once and the pool never held more than two, at any instant; every second of the job fired
exactly once; and no task of a dead node waited more than node_timeout + 5 s to start again.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import psutil
import pytest

from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent, kill_machine

CHAOS_SECONDS = 90.0
KILL_EVERY = (5.0, 15.0)
NODES = ("n1", "n2", "n3")
NODE_TIMEOUT = 15.0  # the default
TASKS = {"deployer": 40, "trainer": 30, "renderer": 30, "worker": 200}
ADD_OVER = 60.0  # the 300 tasks arrive over this many seconds, so the kills meet work

AGENT = """
    import json, os, random, signal, sys, time

    records, role = sys.argv[1], os.environ["TASKHERD_ROLE"]

    def note(event):
        line = json.dumps({"event": event, "task": int(os.environ["TASKHERD_TASK_ID"]),
                           "run": int(os.environ["TASKHERD_RUN_ID"]), "role": role,
                           "at": time.time()})
        fd = os.open(records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, (line + "\\n").encode())  # one write: lines of agents never interleave
        os.close(fd)

    def stopped(*_):
        note("killed")
        os._exit(143)

    signal.signal(signal.SIGTERM, stopped)
    note("start")
    time.sleep(random.uniform(0.2, 2.0))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the end is said, then done
    note("end")
    print("TASK_COMPLETE: done", flush=True)
"""


def config(database: str, node: str, program: str, records: Path) -> str:
    def role(name: str, extra: str = "") -> str:
        return f"""
        [roles.{name}]
        command = ["{PYTHON}", "-S", "{program}", "{records}"]
        max_attempts = 20
        backoff = "1s"
        backoff_cap = "1s"
        {extra}
        """

    return f"""
        [daemon]
        database = "{database}"
        data_dir = "data"
        timezone = "UTC"
        node = "{node}"
        max_concurrent = 4
        lease = "30s"

        [pools]
        gpu = 2
        {role("deployer", "max_concurrent = 1")}
        {role("trainer", 'pool = "gpu"')}
        {role("renderer", 'pool = "gpu"')}
        {role("worker")}
        {role("tick")}

        [[jobs]]
        name = "tick"
        role = "tick"
        every = "1s"
        overlap = "allow"
        missed_fire = "all"
    """


class Node:
    """One node of the fleet: its daemon, and what the driver did to it."""

    def __init__(self, fleet: Fleet):
        self.fleet = fleet
        self.kills: list[float] = []

    def kill_machine(self) -> None:
        self.kills.append(kill_machine(self.fleet.daemon))


@pytest.fixture
def fleet(tmp_path, pg_url):
    program = agent(tmp_path, "agent", AGENT)
    records = tmp_path / "records.jsonl"
    nodes = {}
    for name in NODES:
        root = tmp_path / name
        root.mkdir()
        nodes[name] = Node(Fleet(root, config(pg_url, name, program, records)))
    yield nodes, records
    for node in nodes.values():
        if node.fleet.daemon is not None and node.fleet.daemon.poll() is None:
            for process in psutil.Process(node.fleet.daemon.pid).children(recursive=True):
                process.kill()
        node.fleet.close()


@pytest.mark.timeout(300)  # 90 s of kills, then the last tasks finish and the checks run
def test_a_fleet_under_kills_keeps_its_limits_and_does_every_task_once(fleet):
    nodes, records = fleet
    rng = random.Random(os.getpid())
    for node in nodes.values():
        node.fleet.up()
    store = nodes["n1"].fleet.store
    plan = [role for role, count in TASKS.items() for _ in range(count)]
    rng.shuffle(plan)
    added: list[int] = []
    started = time.time()
    next_kill = started + rng.uniform(*KILL_EVERY)
    while (now := time.time()) < started + CHAOS_SECONDS:
        due = min(len(plan), int((now - started) / ADD_OVER * len(plan)) + 1)
        while len(added) < due:
            role = plan[len(added)]
            added.append(nodes["n1"].fleet.add(f"{role} {len(added)}", role=role).id)
        if now >= next_kill:
            victim = nodes[rng.choice(NODES)]
            victim.kill_machine()
            victim.fleet.up()
            next_kill += rng.uniform(*KILL_EVERY)
        time.sleep(0.05)  # the driver's pace: it adds tasks and kills on a timeline
    assert len(added) == len(plan) and sum(len(n.kills) for n in nodes.values()) >= 6

    nodes["n1"].fleet.wait_until(
        lambda: all(store.get_task(t).state in (TaskState.COMPLETED, TaskState.DEAD)
                    for t in added), timeout=60, what="every task to finish")
    for node in nodes.values():
        try:
            node.fleet.stop(timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{node.fleet.root.name} did not stop:\n"
                                 f"{node.fleet.daemon_log.read_text()[-3000:]}") from None

    notes = [json.loads(line) for line in records.read_text().splitlines()]
    run_nodes = {run.id: run.node for run in store.list_runs(limit=100_000)}  # jobs' too
    check_every_task_done_once(store, added, notes)
    check_limits_held(notes, run_nodes, nodes)
    check_each_second_fired_once(store, started)
    check_dead_nodes_work_moved_on(notes, run_nodes, nodes)


def check_every_task_done_once(store, added: list[int], notes: list[dict]) -> None:
    ends = Counter(note["task"] for note in notes if note["event"] == "end")
    assert [t for t in added if ends[t] != 1] == [], "tasks not ended exactly once by an agent"
    ended_run = {note["task"]: note["run"] for note in notes if note["event"] == "end"}
    for task_id in added:
        task = store.get_task(task_id)
        succeeded = [run for run in store.runs_of_task(task_id)
                     if run.outcome is Outcome.SUCCEEDED]
        assert task.state is TaskState.COMPLETED, (task_id, task.state, task.reason)
        assert [run.id for run in succeeded] == [ended_run[task_id]]
    ticks = Counter(note["task"] for note in notes
                    if note["event"] == "end" and note["role"] == "tick")
    assert ticks and max(ticks.values()) == 1, "a job's task done twice"


def spans(notes: list[dict], run_nodes: dict[int, str], nodes: dict[str, Node],
          roles: set[str]) -> list[tuple[float, float]]:
    """When each agent of `roles` was alive: from its start to its end, its SIGTERM, or the
    death of its machine (the first kill of its node after it started)."""
    started = {n["run"]: n["at"] for n in notes if n["event"] == "start" and n["role"] in roles}
    ended = {n["run"]: n["at"] for n in notes if n["event"] in ("end", "killed")}
    found = []
    for run, start in started.items():
        end = ended.get(run)
        if end is None:
            kills = [k for k in nodes[run_nodes[run]].kills if k >= start]
            assert kills, f"run {run} started and never ended, and its node was not killed"
            end = kills[0]
        found.append((start, end))
    return found


def most_at_once(found: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in found] + [(end, -1) for _, end in found])
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most


def check_limits_held(notes: list[dict], run_nodes: dict[int, str],
                      nodes: dict[str, Node]) -> None:
    deployer = spans(notes, run_nodes, nodes, {"deployer"})
    gpu = spans(notes, run_nodes, nodes, {"trainer", "renderer"})
    assert len(deployer) >= TASKS["deployer"] and most_at_once(deployer) == 1
    assert len(gpu) >= TASKS["trainer"] + TASKS["renderer"] and most_at_once(gpu) == 2
    workers = spans(notes, run_nodes, nodes, {"worker"})
    assert most_at_once(workers) > 4  # several nodes really worked side by side


def check_each_second_fired_once(store, started: float) -> None:
    fires = store.list_fires(job="tick", limit=10_000)
    seconds = sorted(fire.scheduled_for for fire in fires)
    assert len(seconds) == len(set(seconds)), "a second fired twice"
    # From soon after the first daemon was up until past the last kill, without a gap.
    assert seconds[0] <= started + 30 and seconds[-1] >= started + CHAOS_SECONDS - 5
    gaps = [(a, b) for a, b in itertools.pairwise(seconds) if b - a != 1.0]
    assert gaps == [], "seconds that never fired"


def check_dead_nodes_work_moved_on(notes: list[dict], run_nodes: dict[int, str],
                                   nodes: dict[str, Node]) -> None:
    starts = defaultdict(list)
    for note in notes:  # the 300 tasks: a job's task killed as the fleet stops never restarts
        if note["event"] == "start" and note["role"] != "tick":
            starts[note["task"]].append((note["at"], note["run"]))
    finished = {n["run"] for n in notes if n["event"] in ("end", "killed")}
    waits = []
    for attempts in starts.values():
        for at, run in attempts:
            if run in finished:
                continue
            killed = min(k for k in nodes[run_nodes[run]].kills if k >= at)
            again = min(start for start, _ in attempts if start > killed)
            waits.append(again - killed)
    assert waits, "no kill met a running agent: the chaos tested nothing"
    assert max(waits) <= NODE_TIMEOUT + 5, sorted(waits)[-5:]
