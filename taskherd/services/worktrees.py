"""The worktree services: the merger, which merges the branches of `merging` tasks into their
base off the daemon's loop, and the janitor, which removes the worktrees no run will use again.

The merger. A settle that completes a task with a worktree leaves it `merging` (in the settle's
own transaction, with no git in it); each pass of the merger starts, for each merging task
whose pool is free, a thread of its own that takes the pool (`merge_pools`: one merge at a
time into one base, across nodes), commits what the worktree holds uncommitted, merges the
branch under the role's `merge_timeout` (a git or hook that outlives it is killed with its
process group), and then completes the task or blocks it with the reason, in one short
transaction. A hung hook costs its own task only: no store transaction waits on git, the loop
never does, and merges through other pools go on. A daemon restarted mid-merge finds the task
still `merging` and merges again; a merge that had already landed is found merged (its branch
is in the base) and the task completes.

The janitor. A merged task's worktree goes at once (its branch too, being merged); a dead or
cancelled task's worktree after its role's `git.keep` (its branch stays, for a person to look
at). A worktree already gone is marked removed all the same.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from taskherd.model import Task
from taskherd.model.settings import Config, GitSettings
from taskherd.store import Store, StoreError
from taskherd.store.worktrees import WorktreeRecord

log = logging.getLogger("taskherd.worktrees")


@dataclass(frozen=True)
class MergerSettings:
    interval: float = 30.0  # a fallback poll: a task entering `merging` wakes the merger
    # While a merge waits for a pool another node holds (its end wakes nobody here).
    waiting_interval: float = 2.0
    # A pool held this long past its merge's timeout has lost its holder (its node died
    # mid-merge, its git killed or long finished): another merge may take it.
    stale_margin: float = 60.0


class Merger:
    def __init__(self, config: Config, store: Store, clock: Callable[[], float] = time.time,
                 settings: MergerSettings = MergerSettings(),
                 on_ended: Callable[[], None] = lambda: None):
        self.config = config
        self.store = store
        self.clock = clock
        self.settings = settings
        self.on_ended = on_ended  # called from a merge's thread as it ends: wakes the merger
        self._waiting = False  # the last pass left a merge waiting for its pool
        self._lock = threading.Lock()
        self._running: dict[int, threading.Thread] = {}  # task id → the thread merging it
        self._pools: set[str] = set()  # pools this daemon is merging through
        self._ended: Counter[str] = Counter()  # merges ended since the last pass, by outcome

    def next_wake(self, now: float) -> float:
        return now + (self.settings.waiting_interval if self._waiting
                      else self.settings.interval)

    def run_once(self, now: float) -> dict[str, int]:
        with self._lock:
            counts = Counter({"started": 0, "merged": 0, "blocked": 0, "waiting": 0,
                              **self._ended})
            self._ended.clear()
        for record in self.store.merges_due():
            counts[self._start(record, now)] += 1
        counts.pop("", None)
        self._waiting = counts["waiting"] > 0
        return dict(counts)

    def join(self, timeout: float) -> bool:
        """Wait for the merges under way (tests, shutdown); False if one still runs."""
        deadline = time.monotonic() + timeout
        for thread in list(self._running.values()):
            thread.join(max(deadline - time.monotonic(), 0.0))
        return not self._running

    def _start(self, record: WorktreeRecord, now: float) -> str:
        """Start this merge if its pool is free; what happened, as a count's name ("" when it
        is already under way here, or its repository is on another node)."""
        if record.task_id in self._running or not Path(record.repo).is_dir():
            return ""
        if record.pool in self._pools:
            return "waiting"
        git = self._git_of(record)
        stale_before = now - git.merge_timeout - self.settings.stale_margin
        if not self.store.take_merge_pool(record.pool, record.task_id, self.config.daemon.node,
                                          now, stale_before):
            return "waiting"
        thread = threading.Thread(target=self._merge, args=(record, git), daemon=True,
                                  name=f"merge-task-{record.task_id}")
        # Only passes add (one at a time, from the service's loop); merges' threads remove.
        with self._lock:
            self._pools.add(record.pool)
            self._running[record.task_id] = thread
        # A daemon thread: a stopping daemon does not wait for a hung hook; its successor
        # merges again.
        thread.start()
        return "started"

    def _git_of(self, record: WorktreeRecord) -> GitSettings:
        """The settings of the role whose task this is (defaults if it has none any more)."""
        try:
            role = self.config.roles.get(self.store.get_task(record.task_id).role)
        except StoreError:
            role = None
        return role.git if role is not None and role.git is not None else GitSettings(
            Path(record.repo))

    def _merge(self, record: WorktreeRecord, git: GitSettings) -> None:
        outcome = "failed"
        try:
            outcome = self._merge_and_record(record, git)
        except Exception:  # a thread's error would be lost: its task stays merging, retried
            log.exception("task %s: merging %s", record.task_id, record.branch)
        finally:
            with self._lock:
                self._running.pop(record.task_id, None)
                self._pools.discard(record.pool)
                self._ended[outcome] += 1
            self.on_ended()  # a merge of its pool may be waiting

    def _merge_and_record(self, record: WorktreeRecord, git: GitSettings) -> str:
        task = self.store.get_task(record.task_id)
        commit, conflicts, reason = self._git_merge(record, task, git)
        settled = self.store.finish_merge(record, self.clock(), commit=commit, blocked=reason,
                                          conflicts=conflicts)
        if settled is None:
            log.warning("task %s left `merging` while its branch merged (cancelled?)%s",
                        task.id, "" if reason else f": {record.branch} is in {record.base}")
        elif reason is None:
            log.info("task %s: %s merged into %s%s", task.id, record.branch, record.base,
                     f" at {commit[:12]}" if commit else " (nothing new)")
        return "blocked" if reason else "merged"

    def _git_merge(self, record: WorktreeRecord, task: Task,
                   git: GitSettings) -> tuple[str | None, tuple[str, ...], str | None]:
        """Commit the worktree's leftovers and merge the branch, within the role's limit:
        the base's new commit, the conflicting files, and why the task must be blocked."""
        from taskherd.host import worktrees

        running = worktrees.running_record(self.config.daemon.data_dir / "worktrees", task.id)
        if worktrees.stop_left_running(running):
            log.warning("task %s: stopped the git an earlier daemon left working on %s",
                        task.id, record.branch)
        try:
            with worktrees.time_limit(git.merge_timeout, record=running):
                worktrees.commit_leftovers(
                    Path(record.path), f"Uncommitted work of task {task.id}: {task.title}"[:500],
                    hooks=git.hooks, repo=Path(record.repo))
                result = worktrees.merge_branch(
                    Path(record.repo), record.base, record.branch, record.merge_mode,
                    f"Merge {record.branch}: {task.title}"[:500])
        except worktrees.GitError as error:
            log.warning("task %s: merging %s failed: %s", task.id, record.branch, error)
            limit = (f" within merge_timeout {git.merge_timeout:g}s"
                     if isinstance(error, worktrees.GitTimeout) else "")
            return None, (), (f"merging {record.branch} into {record.base} failed{limit}: "
                              f"{error}; the branch is kept: unblock the task to run it again")
        reason = None if result.merged else result.reason(record.branch, record.base)
        return result.commit, result.conflicts, reason


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
        from taskherd.host import worktrees

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
