"""The worktree janitor: removes the worktrees no run will use again.

A merged task's worktree goes at once (its branch too, being merged); a dead or cancelled
task's worktree after its role's `git.keep` (its branch stays, for a person to look at).
A worktree already gone is marked removed all the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from taskherd.config import Config
from taskherd.store import Store

log = logging.getLogger("taskherd.worktrees")


@dataclass(frozen=True)
class JanitorSettings:
    interval: float = 5.0  # seconds between two passes


class WorktreeJanitor:
    def __init__(self, config: Config, store: Store,
                 settings: JanitorSettings = JanitorSettings()):
        self.config = config
        self.store = store
        self.settings = settings

    def next_wake(self, now: float) -> float:
        return now + self.settings.interval

    def run_once(self, now: float) -> dict[str, int]:
        counts = {"removed": 0, "failed": 0}
        if not any(role.git for role in self.config.roles.values()):
            return counts
        from taskherd import worktrees

        keep = min(role.git.keep for role in self.config.roles.values() if role.git)
        for record in self.store.worktrees_to_remove(now - keep):
            branch = record.branch if record.state == "merged" else None
            try:
                worktrees.remove_worktree(Path(record.repo), Path(record.path), branch,
                                          record.base)
            except worktrees.GitError as error:
                log.warning("task %s: removing worktree %s failed: %s", record.task_id,
                            record.path, error)
                counts["failed"] += 1
                continue
            self.store.mark_worktree_removed(record, now)
            counts["removed"] += 1
        return counts
