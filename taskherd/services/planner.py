"""The planner: the queue that runs itself. When fewer than [monitor] low_water tasks are
ready, no planner task is open and the planner role has not had a task within planner_every,
it adds one planner task (P0) whose prompt carries a snapshot of the queue; the planner agent
adds the next work with `taskherd task add` (at most max_spawn a run).

The seeds' fleet did this with an hourly script and a CEO agent: "who spawns the CEO?" A
dedup key makes the planner's task one at a time even with several nodes asking at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from taskherd.model import NewTask, Priority
from taskherd.model.settings import Config
from taskherd.policy.prompt import planner_prompt
from taskherd.store import Store

log = logging.getLogger("taskherd.planner")
DEDUP_KEY = "taskherd:planner"  # one open planner task, whichever node adds it
FAILURE_WINDOW = 24 * 3600.0  # dead tasks younger than this are shown to the planner


@dataclass(frozen=True)
class PlannerSettings:
    interval: float = 2.0  # seconds between two looks at the queue's depth


class Planner:
    def __init__(self, config: Config, store: Store,
                 settings: PlannerSettings = PlannerSettings()):
        self.config = config
        self.store = store
        self.settings = settings

    def next_wake(self, now: float) -> float:
        return now + self.settings.interval

    def run_once(self, now: float) -> dict[str, int]:
        monitor = self.config.monitor
        role = monitor.planner
        if role is None:
            return {}
        ready = self.store.ready_count()
        if ready >= monitor.low_water or self.store.has_open_task_of_role(role):
            return {"planned": 0}
        last = self.store.last_task_of_role(role)
        if last is not None and now - last < monitor.planner_every:
            return {"planned": 0}
        counts = {(c.role, c.state.value): c.count for c in self.store.counts()
                  if c.state.value not in ("completed", "cancelled")}
        prompt = planner_prompt(monitor.prompt, counts,
                                self.store.recent_dead(now - FAILURE_WINDOW))
        new = NewTask(role=role, title=f"Plan the next work ({ready} task(s) ready)",
                      prompt=prompt, priority=Priority.P0, dedup_key=DEDUP_KEY,
                      max_attempts=self.config.role(role).max_attempts)
        enqueued = self.store.enqueue(new, now)
        if enqueued.created:
            log.info("queue low (%s ready, low_water %s): planner task %s added", ready,
                     monitor.low_water, enqueued.task.id)
        return {"planned": int(enqueued.created)}
