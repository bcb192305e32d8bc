"""Chaos: three real daemons on one real PostgreSQL database, 300 tasks of agents that take
0.2–2 s, a role allowed one run at a time, a pool of two, and a job firing every second; for
90 s a driver kills a random node every 5–15 s (the machine dies: SIGKILL to the daemon and
to every agent it started) and starts it again: at once, or, every other kill, only after it
stayed down longer than node_timeout, so that the other two declare it down and rescue its
work.

The node's machine dies, not only its daemon: agents are detached from their daemon (their
shims are session leaders, so that a restarted daemon adopts them), and an agent whose daemon
alone died would run on beside its task's next run once the node is declared down.

Each agent says it is done as a real one does, through its run's credential (`taskherd done`,
which reaches the store through its daemon at once), and only then notes its end. A node
that dies after that report and before settling the run leaves a run that is ended by the
report, whichever node ends it: the task is not run again. An agent completed its task when
its report is in the store: one that died while reporting (noted "reporting", then nothing)
completed it if the report had got there, and otherwise is run again like any other killed
agent.

Afterwards, by the agents' own records (each writes its start and its end to a shared file)
and by the database: every task was completed exactly once; the deployer never ran twice at
once and the pool never held more than two, at any instant; every second of the job fired
exactly once; and no task of a dead node waited more than node_timeout + 5 s to be claimed
again.
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

from taskherd.model import Outcome, Run, TaskState
from tests.fleet import PYTHON, Fleet, agent, kill_machine

CHAOS_SECONDS = 90.0
KILL_EVERY = (5.0, 15.0)
NODES = ("n1", "n2", "n3")
NODE_TIMEOUT = 5.0  # a third of the default: the nodes left down are rescued within the run
# A node left down stays down this long: declared down and rescued by the others, then back.
LONG_DOWN = NODE_TIMEOUT + 7.0
# The deployer's tasks run one after another, each some 1.5 s (3 s on a loaded machine) with
# its spawn, report and settle: few enough that they end soon after the kills stop.
TASKS = {"deployer": 30, "trainer": 30, "renderer": 30, "worker": 210}
ADD_OVER = 60.0  # the 300 tasks arrive over this many seconds, so the kills meet work

AGENT = """
    import json, os, random, signal, subprocess, sys, time

    records, python, role = sys.argv[1], sys.argv[2], os.environ["TASKHERD_ROLE"]

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
    # The work is done: said through the run's credential, then noted. Killed in between,
    # the agent's record ends at "reporting" and the store says whether the report took.
    note("reporting")
    said = subprocess.run([python, "-m", "taskherd", "done", "--summary", "done"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if said.returncode != 0:  # its run was ended elsewhere: the task is not this agent's
        note("refused")
        sys.exit(f"taskherd done: {said.stderr}")
    note("end")
    print("TASK_COMPLETE: done", flush=True)
"""


def config(database: str, node: str, program: str, records: Path) -> str:
    def role(name: str, extra: str = "") -> str:
        return f"""
        [roles.{name}]
        command = ["{PYTHON}", "-S", "{program}", "{records}", "{PYTHON}"]
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
        node_timeout = "{NODE_TIMEOUT:g}s"
        on_shutdown = "wait"  # the fleet's stop at the end leaves no agent behind it

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
        self.long_downs: list[tuple[float, float]] = []  # (killed, back up) of each long death
        self.back_at: float | None = None  # while it stays down: when to start it again

    @property
    def name(self) -> str:
        return self.fleet.root.name

    def kill_machine(self, stay_down: float = 0.0) -> None:
        self.kills.append(kill_machine(self.fleet.daemon))
        if stay_down:
            self.back_at = self.kills[-1] + stay_down
        else:
            self.fleet.up()

    def back_up_if_due(self, now: float) -> None:
        if self.back_at is not None and now >= self.back_at:
            self.fleet.up()
            self.long_downs.append((self.kills[-1], time.time()))
            self.back_at = None


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


# 90 s of kills (and a node left down at the end back up), then the last tasks finish (in
# seconds, or in minutes on a loaded machine) and the checks run.
@pytest.mark.timeout(360)
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
    kills, last_was_long = 0, False
    # The kills stop after CHAOS_SECONDS; a node still down stays down its full time.
    while ((now := time.time()) < started + CHAOS_SECONDS
           or any(node.back_at is not None for node in nodes.values())):
        due = min(len(plan), int((now - started) / ADD_OVER * len(plan)) + 1)
        while len(added) < due:
            role = plan[len(added)]
            # Added through a node that is up: the driver is a client of the fleet.
            adder = next(n for n in nodes.values() if n.back_at is None)
            added.append(adder.fleet.add(f"{role} {len(added)}", role=role).id)
        for node in nodes.values():
            node.back_up_if_due(now)
        if now >= next_kill and now < started + CHAOS_SECONDS:
            # A kill after a restart leaves its node down past node_timeout, one after that is
            # a restart again; never two nodes down at once, so two are there to rescue.
            up = [node for node in nodes.values() if node.back_at is None]
            last_was_long = len(up) == len(nodes) and not last_was_long
            rng.choice(up).kill_machine(stay_down=LONG_DOWN if last_was_long else 0.0)
            kills += 1
            next_kill += rng.uniform(*KILL_EVERY)
        time.sleep(0.05)  # the driver's pace: it adds tasks and kills on a timeline
    assert len(added) == len(plan) and kills >= 5
    assert sum(len(node.long_downs) for node in nodes.values()) >= 2

    nodes["n1"].fleet.wait_until(
        lambda: all(store.get_task(t).state in (TaskState.COMPLETED, TaskState.DEAD)
                    for t in added), timeout=150, what="every task to finish")
    for node in nodes.values():
        try:
            node.fleet.stop(timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{node.name} did not stop:\n"
                                 f"{node.fleet.daemon_log.read_text()[-3000:]}") from None

    notes = [json.loads(line) for line in records.read_text().splitlines()]
    runs = {run.id: run for run in store.list_runs(limit=100_000)}  # the jobs' runs too
    check_every_task_done_once(store, added, notes, runs)
    check_limits_held(notes, runs, nodes)
    check_each_second_fired_once(store, started)
    check_dead_nodes_work_moved_on(runs, nodes)
    check_nodes_left_down_were_rescued(runs, nodes)


def agents_runs(notes: list[dict]) -> dict[int, set[str]]:
    """What each run's agent noted of itself, by run."""
    events: dict[int, set[str]] = defaultdict(set)
    for note in notes:
        events[note["run"]].add(note["event"])
    return events


ENDED = ("end", "killed", "refused")  # an agent that noted one of these is gone


def completed_by_its_agent(events: set[str], run: Run) -> bool:
    """The agent said it was done and the store has it: it noted its end after its report
    was taken, or it died with its machine while reporting and the report had reached the
    store (the answer never reached the agent)."""
    if "end" in events:
        return True
    return "reporting" in events and not events & set(ENDED) and run.report == "done"


def check_every_task_done_once(store, added: list[int], notes: list[dict],
                               runs: dict[int, Run]) -> None:
    done: dict[int, list[int]] = defaultdict(list)
    for run_id, events in agents_runs(notes).items():
        if completed_by_its_agent(events, runs[run_id]):
            done[runs[run_id].task_id].append(run_id)
    assert {t: done[t] for t in added if len(done[t]) != 1} == {}, \
        "tasks not completed exactly once by an agent"
    for task_id in added:
        task = store.get_task(task_id)
        succeeded = [run for run in store.runs_of_task(task_id)
                     if run.outcome is Outcome.SUCCEEDED]
        assert task.state is TaskState.COMPLETED, (task_id, task.state, task.reason)
        assert [run.id for run in succeeded] == done[task_id]
    ticks = Counter(runs[run].task_id for runs_done in done.values() for run in runs_done
                    if runs[run].role == "tick")
    assert ticks and max(ticks.values()) == 1, "a job's task done twice"


def spans(notes: list[dict], runs: dict[int, Run], nodes: dict[str, Node],
          roles: set[str]) -> list[tuple[float, float]]:
    """When each agent of `roles` was alive: from its start to its end, its SIGTERM, its
    refused report, or the death of its machine (the first kill of its node after it
    started: the whole machine dies, its agents with it)."""
    started = {n["run"]: n["at"] for n in notes if n["event"] == "start" and n["role"] in roles}
    ended: dict[int, float] = {}
    for note in notes:
        if note["event"] in ENDED:
            ended.setdefault(note["run"], note["at"])
    found = []
    for run, start in started.items():
        end = ended.get(run)
        if end is None:
            kills = [k for k in nodes[runs[run].node].kills if k >= start]
            assert kills, f"run {run} started and never ended, and its node was not killed"
            end = kills[0]
        found.append((start, end))
    return found


def most_at_once(found: list[tuple[float, float]]) -> int:
    # At one instant an end comes before a start: a slot freed and taken again is not two.
    edges = sorted([(start, 1) for start, _ in found] + [(end, -1) for _, end in found])
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most


def check_limits_held(notes: list[dict], runs: dict[int, Run],
                      nodes: dict[str, Node]) -> None:
    deployer = spans(notes, runs, nodes, {"deployer"})
    gpu = spans(notes, runs, nodes, {"trainer", "renderer"})
    assert len(deployer) >= TASKS["deployer"] and most_at_once(deployer) == 1
    assert len(gpu) >= TASKS["trainer"] + TASKS["renderer"] and most_at_once(gpu) == 2
    workers = spans(notes, runs, nodes, {"worker"})
    assert most_at_once(workers) > 4  # several nodes really worked side by side


def check_each_second_fired_once(store, started: float) -> None:
    fires = store.list_fires(job="tick", limit=10_000)
    seconds = sorted(fire.scheduled_for for fire in fires)
    assert len(seconds) == len(set(seconds)), "a second fired twice"
    # From soon after the first daemon was up until past the last kill, without a gap.
    assert seconds[0] <= started + 30 and seconds[-1] >= started + CHAOS_SECONDS - 5
    gaps = [(a, b) for a, b in itertools.pairwise(seconds) if b - a != 1.0]
    assert gaps == [], "seconds that never fired"


def check_dead_nodes_work_moved_on(runs: dict[int, Run], nodes: dict[str, Node]) -> None:
    """Every task a node held when it died (its run claimed there and not yet ended), unless
    its agent had said it was done: claimed again within node_timeout + 5 s of the death,
    whether the node came back at once or stayed down and was rescued by another. A task
    claimed by a node that died in turn waits again from that death."""
    later_claims = defaultdict(list)
    for run in runs.values():
        later_claims[run.task_id].append((run.id, run.claimed_at))
    waits = []
    for node in nodes.values():
        for killed in node.kills:
            for run in runs.values():
                if (run.node != node.name or run.role == "tick" or run.claimed_at > killed
                        or run.ended_at is not None and run.ended_at <= killed
                        or run.outcome is Outcome.SUCCEEDED):  # settled by its agent's report
                    continue
                again = min(at for run_id, at in later_claims[run.task_id] if run_id > run.id)
                waits.append((again - killed, run.task_id, run.id, node.name, killed))
    assert waits, "no kill met a task being run: the chaos tested nothing"
    assert max(waits)[0] <= NODE_TIMEOUT + 5, sorted(waits)[-5:]


def check_nodes_left_down_were_rescued(runs: dict[int, Run], nodes: dict[str, Node]) -> None:
    """What a node held when it died and stayed down was ended by another node, which named
    it, before it came back: `lost` and run again elsewhere, or settled by its agent's report
    if that had reached the store (never run again)."""
    held = []
    for node in nodes.values():
        for killed, back in node.long_downs:
            held += [(node.name, killed, back, run) for run in runs.values()
                     if run.node == node.name and run.claimed_at <= killed
                     and (run.ended_at is None or run.ended_at > killed)]
    assert held, "no node left down held a run: the rescue tested nothing"
    for name, killed, back, run in held:
        assert f"node {name} went silent" in (run.error or ""), (run.id, run.outcome, run.error)
        assert "declared down by n" in run.error and f"declared down by {name}" not in run.error
        assert killed < run.ended_at < back, (run.id, run.ended_at - killed)
        if run.report == "done":
            assert run.outcome is Outcome.SUCCEEDED, (run.id, run.outcome, run.error)
            continue
        assert run.outcome is Outcome.LOST, (run.id, run.outcome, run.error)
        again = sorted((r for r in runs.values() if r.task_id == run.task_id and r.id > run.id),
                       key=lambda r: r.id)
        assert again and again[0].node != name and again[0].claimed_at < back, (run.id, again)
