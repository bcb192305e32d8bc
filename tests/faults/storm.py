"""A kill storm: one real daemon, a batch of tasks of a command role whose agents do a little
work and report through the agent door, and the daemon `kill -9`'d and started again, again
and again, while they report. Shared by tests/faults/test_kill_storm.py (scaled down) and
bench/kill_storm.py (300 tasks).

Each agent notes its start, heartbeats, adds a child task (pending: it never runs), sends a
message, says `taskherd done`, and notes its end. A command that fails makes the agent exit 1,
as a real agent's script under `set -e` would: a report lost to the restart is a strike.
Only the daemon is killed; its agents (detached under their shims) run on, as they would
when a service manager restarts it.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from taskherd.model import FINAL_STATES, STRIKE_OUTCOMES, Outcome, Run, TaskState
from tests.fleet import PYTHON, Fleet, agent

AGENT = """
    import json, os, random, subprocess, sys, time

    records, python, work = sys.argv[1], sys.argv[2], float(sys.argv[3])
    task = os.environ["TASKHERD_TASK_ID"]

    def note(event, **more):
        line = json.dumps({"event": event, "task": int(task),
                           "run": int(os.environ["TASKHERD_RUN_ID"]), "at": time.time(), **more})
        fd = os.open(records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, (line + "\\n").encode())  # one write: lines of agents never interleave
        os.close(fd)

    def say(*args):
        said = subprocess.run([python, "-m", "taskherd", *args], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
        if "waiting up to" in said.stderr:  # the daemon was away: the command waited
            note("waited", command=args[0])
        if said.returncode != 0:  # as `set -e` would: the agent gives up
            note("refused", command=args[0], stderr=said.stderr[-500:])
            sys.exit(1)

    note("start")
    time.sleep(random.uniform(0.5, 1.5) * work)  # the work
    say("heartbeat", "--progress", "half way")
    say("task", "add", f"child of {task}", "--role", "worker", "--pending")
    say("msg", "send", "worker", f"hello from task {task}")
    time.sleep(random.uniform(0.5, 1.5) * work)
    say("done", "--summary", f"task {task} done")
    note("end")
"""


@dataclass
class StormResult:
    tasks: list[int]
    starts: int  # agent processes started (by the agents' own notes)
    reruns: int  # starts beyond one per task
    strikes: int  # runs that ended with an outcome that is a strike
    outcomes: Counter  # runs by outcome
    kills: int
    states: Counter  # tasks by state
    # Per task: how many runs succeeded, children it has, messages its runs sent.
    succeeded: dict[int, int] = field(default_factory=dict)
    children: dict[int, int] = field(default_factory=dict)
    messages: dict[int, int] = field(default_factory=dict)
    unrecorded: list[int] = field(default_factory=list)  # runs an agent started with, missing
    open_runs: list[int] = field(default_factory=list)
    odd_runs: list[str] = field(default_factory=list)  # every run that did not succeed, why
    refusals: list[str] = field(default_factory=list)  # what the agents were told, if refused
    waits: int = 0  # agent commands that found no daemon and waited for one
    lost_with_agent: list[int] = field(default_factory=list)  # runs `lost` whose agent started

    def summary(self) -> str:
        return (f"{len(self.tasks)} tasks, {self.kills} kills: {self.starts} starts, "
                f"{self.reruns} re-runs, {self.strikes} strikes, {self.waits} agent commands "
                f"waited for the daemon; runs {dict(self.outcomes)}; tasks {dict(self.states)}")


def config(root: Path, program: str, records: Path, concurrency: int, work: float,
           database: str = "q.db") -> str:
    return f"""
        [daemon]
        database = "{database}"
        data_dir = "data"
        timezone = "UTC"
        node = "n1"
        max_concurrent = {concurrency}
        path = "/usr/bin:/bin"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "{records}", "{PYTHON}", "{work}"]
        workdir = "{root}"
        max_attempts = 10
        backoff = "0.2s"
        backoff_cap = "0.2s"
        idle_timeout = "1h"
    """


class Storm:
    """The fleet, its tasks and the kills. `every`: seconds between kills (jittered);
    `database`: SQLite's file, or a PostgreSQL URL."""

    def __init__(self, root: Path, tasks: int, kills: int, every: float,
                 concurrency: int = 10, work: float = 0.5, database: str = "q.db",
                 seed: int = 0):
        self.root = root
        self.records = root / "records.jsonl"
        program = agent(root, "agent", AGENT)
        self.fleet = Fleet(root, config(root, program, self.records, concurrency, work,
                                        database))
        self.count, self.kills, self.every = tasks, kills, every
        self.rng = random.Random(seed)
        self.tasks: list[int] = []
        self.killed = 0

    def _daemons_up(self) -> int:
        """How many daemons of the storm said they are up (and so handle SIGTERM)."""
        return self.fleet.daemon_log.read_text(errors="replace").count("taskherd up: node")

    def run(self, finish_within: float = 120.0) -> StormResult:
        self.fleet.up()
        self.tasks = [self.fleet.add(f"storm {index}").id for index in range(self.count)]
        self.fleet.wait_until(lambda: self.records.exists(), timeout=30,
                              what="the first agent to start")
        while self.killed < self.kills:
            # The driver's pace: it kills on a timeline, whatever the daemon is doing.
            time.sleep(self.every * self.rng.uniform(0.7, 1.3))
            self.fleet.stop(signal.SIGKILL)
            self.killed += 1
            self.fleet.up()
        self.fleet.wait_until(self._all_final, timeout=finish_within,
                              what="every task of the storm to finish")
        self.fleet.wait_until(lambda: not self.fleet.store.open_runs(), timeout=30,
                              what="every run to end")
        # The last daemon may have been started after every task had finished: it is asked
        # to stop once it is up (its signals handled), not in the middle of its start.
        self.fleet.wait_until(lambda: self._daemons_up() > self.killed, timeout=30,
                              what="the last daemon to be up")
        assert self.fleet.stop() == 0
        return self.result()

    def _all_final(self) -> bool:
        store = self.fleet.store
        return all(store.get_task(t).state in FINAL_STATES for t in self.tasks)

    def result(self) -> StormResult:
        store = self.fleet.store
        notes = [json.loads(line) for line in self.records.read_text().splitlines()]
        started = [n for n in notes if n["event"] == "start" and n["task"] in self.tasks]
        runs: dict[int, Run] = {}
        for task_id in self.tasks:
            runs |= {run.id: run for run in store.runs_of_task(task_id)}
        ended = [run for run in runs.values() if run.ended_at is not None]
        result = StormResult(
            tasks=self.tasks, starts=len(started), reruns=len(started) - len(self.tasks),
            strikes=sum(run.outcome in STRIKE_OUTCOMES for run in ended),
            outcomes=Counter(run.outcome.value for run in ended), kills=self.killed,
            states=Counter(store.get_task(t).state.value for t in self.tasks))
        for task_id in self.tasks:
            result.succeeded[task_id] = sum(run.outcome is Outcome.SUCCEEDED
                                            for run in store.runs_of_task(task_id))
            result.children[task_id] = len(store.children_of(task_id))
        sent: dict[int, int] = defaultdict(int)
        for message in store.sent_messages("worker", limit=100_000):
            if message.sender_run_id in runs:
                sent[runs[message.sender_run_id].task_id] += 1
        result.messages = {task_id: sent[task_id] for task_id in self.tasks}
        result.unrecorded = sorted({n["run"] for n in started} - set(runs))
        result.open_runs = sorted(run.id for run in runs.values() if run.ended_at is None)
        result.odd_runs = [f"run {run.id} (task {run.task_id}): {run.outcome.value}: "
                           f"{run.error}" for run in ended if run.outcome is not Outcome.SUCCEEDED]
        result.refusals = [f"run {n['run']}: {n['command']}: {n['stderr'].strip()}"
                           for n in notes if n["event"] == "refused"]
        result.waits = sum(n["event"] == "waited" for n in notes)
        # A claim the daemon died holding, before any agent started, ends `lost` (no strike)
        # and the task is claimed again: one agent all the same. One whose agent started
        # would be work run twice.
        result.lost_with_agent = sorted({n["run"] for n in started} & {
            run.id for run in ended if run.outcome is Outcome.LOST})
        return result


def completed_once(result: StormResult) -> bool:
    return (set(result.states) == {TaskState.COMPLETED.value}
            and set(result.succeeded.values()) == {1})
