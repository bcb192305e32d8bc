"""Starting runs: the agent for a fresh claim (in its worktree, made off the loop when it is
new), and re-adoption of an agent an earlier daemon started. A run that cannot start is
settled here as its cause says: the host's fault (no sandbox, a program not installed, a
post-checkout hook that hangs, a full disk) costs no strike; a started agent is handed to
the supervisor, which watches it until it ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from taskherd.host import procs
from taskherd.host.run_files import SpareFiles
from taskherd.host.sandbox import SandboxUnavailable
from taskherd.host.worktrees import GitTimeout
from taskherd.model import FINAL_STATES, Claim, Outcome, Run, RunResult, Task
from taskherd.model.settings import Config, RoleConfig
from taskherd.policy import faults
from taskherd.runtimes.base import Execution, RunFiles, Runtime
from taskherd.runtimes.registry import runtime_for
from taskherd.services.disk_pause import DiskPause
from taskherd.services.launch import Launch
from taskherd.services.live_runs import LiveRun
from taskherd.services.preparations import Preparation, Preparations
from taskherd.store import Store, StoreError, TransitionRefused

log = logging.getLogger("taskherd.supervisor")
# A run an earlier daemon claimed and left with no spawn on record and no shim header in its
# log: that daemon may have handed it to a shim just before it died, which writes its header
# as soon as it is scheduled. Looked at again for this long before it is taken as never
# started (`lost`, no strike): given up at once, a late shim would start its agent beside the
# task's next run.
SHIM_GRACE = 5.0
# Run files (a log and a prompt each) made ahead of the claims (host.run_files): enough for a
# dispatcher's pass of starts. Those taken are made again this long after a start, once its
# agent is running (a creation beside its exec would slow it), and at the supervisor's passes.
SPARE_RUN_FILES = 16
REMAKE_FILES_AFTER = 0.02


class Watcher(Protocol):
    """What starting needs of the supervisor: it watches a started agent, stops one that
    must not run, and settles a run."""

    def watch(self, run: Run, task: Task, role: RoleConfig, runtime: Runtime,
              handle: Execution, spawned_at: float,
              active_at: float | None = None) -> LiveRun: ...

    def kill(self, live: LiveRun, outcome: Outcome, reason: str) -> None: ...

    def settle_now(self, run: Run, result: RunResult,
                   ended_at: float | None = None) -> None: ...

    def store_fault(self, error: StoreError) -> None: ...


class Starts:
    def __init__(self, config: Config, store: Store, clock: Callable[[], float],
                 watcher: Watcher, launch: Launch, preparations: Preparations,
                 disk: DiskPause, last_spawn: dict[str, float],
                 on_change: Callable[[], None]):
        self.config = config
        self.store = store
        self.clock = clock
        self.watcher = watcher
        self.launch = launch
        self.preparations = preparations
        self.disk = disk
        self.last_spawn = last_spawn  # role → time of its latest spawn (stagger)
        self.on_change = on_change
        self.log_dir = config.daemon.log_dir
        self.unstarted: dict[int, float] = {}  # run id → when it is taken as never started
        self.spare_files = SpareFiles(self.log_dir, SPARE_RUN_FILES)
        self._remake: asyncio.TimerHandle | None = None  # the spare files' next making
        self._making = False  # a thread makes spare files now

    def reload(self, config: Config) -> None:
        self.config = config

    def start(self, claim: Claim, now: float,
              probe: bool = False) -> LiveRun | Preparation | None:
        """Spawn the agent for a fresh claim and record it; a failure to start settles the run.
        `probe`: the run tests whether its runtime's rate limit has lifted. A task's first run
        in a worktree is spawned later, once the worktree is made (the Preparation)."""
        role = self.config.role(claim.run.role)
        self.last_spawn[role.name] = now
        worktree = None
        if role.git is not None:
            worktree = self.launch.made_worktree(role, claim.task)
            if worktree is None:
                return self._prepare(claim, role, probe)
        return self._spawn(claim, role, now, probe, worktree)

    def _spawn(self, claim: Claim, role: RoleConfig, now: float, probe: bool,
               worktree: Path | None) -> LiveRun | None:
        files = RunFiles(self.log_dir / f"run-{claim.run.id}.log",
                         self.log_dir / f"run-{claim.run.id}.prompt")
        try:
            runtime = runtime_for(role.runtime)
            # Renamed from files made ahead, not created here, on the way to the exec.
            self.spare_files.take_private(files.prompt)
            self.spare_files.take(files.log)  # (else the spawn creates it)
            self._remake_files_later()
            if worktree is not None:
                role = self.launch.in_worktree(role, claim.task, worktree, now)
            handle, continued = self.launch.begin(runtime, role, claim, files)
        except SandboxUnavailable as error:
            # Fail closed: never a silent fallback to running it unconfined. The host's
            # fault, not the agent's: no strike; it waits for a person (doctor says what to
            # install or enable), who unblocks it.
            log.error("run %s of task %s: no sandbox: %s", claim.run.id, claim.task.id, error)
            self.watcher.settle_now(claim.run, RunResult(Outcome.BLOCKED, error=(
                f"its role's sandbox cannot be made: {error}; then unblock the task")))
            return None
        except procs.ProgramNotFound as error:
            # A configuration fault (the program is not installed, or not on the service's
            # PATH): every retry would fail alike, so no strike and no retry; the task waits
            # blocked for a person, and `doctor` names the role.
            log.error("run %s of task %s could not start: %s", claim.run.id, claim.task.id, error)
            self.watcher.settle_now(claim.run, RunResult(Outcome.BLOCKED, error=(
                f"could not start: {error}; install it or fix roles.{role.name} (taskherd "
                "doctor checks it), then unblock the task")))
            return None
        except (OSError, ValueError, StoreError) as error:
            log.error("run %s of task %s could not start: %s", claim.run.id, claim.task.id, error)
            self.watcher.settle_now(claim.run, self.not_started(error, now))
            return None
        spawned_now = self.clock()
        # Stagger counts from the recorded spawn time, the moment the agent really started.
        self.last_spawn[role.name] = spawned_now
        try:
            self.store.mark_spawned(claim.run.id, spawned_now, self.config.daemon.lease,
                                    pid=handle.pid, pid_started_at=handle.started_at,
                                    log_path=str(files.log))
        except TransitionRefused:
            # Cancelled between claim and spawn: the agent must not outlive the decision.
            live = self.watcher.watch(claim.run, claim.task, role, runtime, handle, now)
            self.watcher.kill(live, Outcome.CANCELLED, "cancelled before start")
            return None
        except StoreError as error:
            # The spawn is not on record (the database is away): an agent left running would
            # be unwatched, and its task rescued and run a second time. Stop it now; its run
            # ends `lost` (no strike) once the store answers, or the never-spawned rescue
            # releases the claim later.
            log.error("run %s: could not record the spawn of pid %s (%s); stopping it",
                      claim.run.id, handle.pid, error)
            self.watcher.store_fault(error)
            live = self.watcher.watch(claim.run, claim.task, role, runtime, handle, now)
            self.watcher.kill(live, Outcome.LOST, f"its spawn could not be recorded: {error}")
            return None
        # The role's next run's cgroups, made now that this one's agent is off: not on the
        # way from a claim to its exec.
        self.launch.warm_caps([role])
        live = self.watcher.watch(claim.run, claim.task, role, runtime, handle, now)
        live.probe = probe
        if continued:
            live.reader.continues(continued)
        log.info("run %s: task %s (%s) started%s%s", claim.run.id, claim.task.id, role.name,
                 f" as pid {handle.pid}" if handle.pid else "",
                 " to probe its runtime's rate limit" if probe else "")
        return live

    def make_files_ahead(self) -> int:
        """Make the run files the next claims take (between runs: off the way to an exec), in
        a thread when called on the daemon's loop: a creation waits for the disk's journal
        (milliseconds when another process syncs), and a claim must not wait for it. The
        number made here (0 when a thread makes them)."""
        if self._remake is not None:
            self._remake.cancel()
            self._remake = None
        if self._making:
            return 0
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self.spare_files.fill()
        self._making = True
        loop.run_in_executor(None, self._make_files)
        return 0

    def _make_files(self) -> None:
        try:
            self.spare_files.fill()
        finally:
            self._making = False

    def _remake_files_later(self) -> None:
        if self._remake is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # started outside the daemon's loop: the next pass makes them
            return
        self._remake = loop.call_later(REMAKE_FILES_AFTER, self.make_files_ahead)

    def _prepare(self, claim: Claim, role: RoleConfig, probe: bool) -> Preparation:
        """Make the task's worktree in a thread and spawn the run when it is ready: `git
        worktree add` runs the repository's post-checkout hook, which may take minutes (up to
        merge_timeout), while the loop goes on dispatching and watching every other run."""
        from taskherd.host import worktrees

        preparation = Preparation(
            claim, role, frozenset(p for p in (role.pool, claim.task.pool) if p), probe,
            worktrees.running_record(self.launch.worktree_root, claim.task.id))
        self.preparations.begin(preparation, lambda: self.launch.make_worktree(role, claim.task),
                                self._prepared)
        return preparation

    def _prepared(self, preparation: Preparation, worktree: object,
                  error: BaseException | None) -> None:
        """The preparation ended (on the loop): the run is spawned in its worktree, or settled
        as the failure to make it says, unless its task was cancelled or its run ended
        elsewhere meanwhile."""
        claim, now = preparation.claim, self.clock()
        if self._ended_while_prepared(claim, now):
            self.on_change()
            return
        if error is None:
            assert isinstance(worktree, Path)
            self._spawn(claim, preparation.role, now, preparation.probe, worktree)
        else:
            log.error("run %s of task %s could not start: %s", claim.run.id, claim.task.id,
                      error)
            self.watcher.settle_now(claim.run, self._unprepared(preparation.role, error, now))
        self.on_change()  # a slot freed, or a run started: the dispatcher looks again

    def _ended_while_prepared(self, claim: Claim, now: float) -> bool:
        """Whether the run must not start: ended elsewhere, or its task cancelled (then it
        ends cancelled here, no agent started)."""
        try:
            run, task = self.store.get_run(claim.run.id), self.store.get_task(claim.task.id)
        except StoreError:
            return False  # not known now: the spawn's record refuses if it was cancelled
        if run.ended_at is None and task.state in FINAL_STATES:
            self.watcher.settle_now(run, RunResult(Outcome.CANCELLED, error=(
                "the task was cancelled while its worktree was being made")), now)
        return run.ended_at is not None or task.state in FINAL_STATES

    def _unprepared(self, role: RoleConfig, error: BaseException, now: float) -> RunResult:
        """A run whose worktree could not be made. Past merge_timeout (a post-checkout hook
        that hangs) it is the repository's fault, not the agent's: no strike. Nor is it
        retried, since the next attempt would hang alike, holding a slot for merge_timeout
        each time: the task waits blocked with the reason for a person, as it does when its
        merge outlives the limit. Other failures are a failure to start, as they were."""
        if isinstance(error, GitTimeout):
            assert role.git is not None
            return RunResult(Outcome.BLOCKED, error=(
                f"making its worktree failed within merge_timeout {role.git.merge_timeout:g}s: "
                f"{error}; fix the repository's post-checkout hook (or raise merge_timeout), "
                f"then unblock the task"))
        if isinstance(error, (OSError, ValueError, StoreError)):
            return self.not_started(error, now)
        log.error("making a worktree: %r", error)  # a bug: the task is not charged for it
        return RunResult(Outcome.LOST, error=f"could not start: {error!r}")

    def adopt(self, run: Run, task: Task, now: float, at_start: bool = False) -> LiveRun | None:
        """Re-attach to an agent an earlier daemon started; settle it if it already ended.
        `at_start`: adopted as this daemon starts, after a time when none ran on the node."""
        role = self.config.role(run.role)
        if run.pid is None and run.log_path is None:
            run = self._spawn_left_on_disk(run, now)
            if run.pid is None and at_start:
                log.info("run %s: no agent started yet; its shim has %gs to show", run.id,
                         SHIM_GRACE)
                self.unstarted[run.id] = now + SHIM_GRACE
                return None
        if run.pid is None or run.log_path is None:
            error = "no process to re-adopt after a restart (never spawned, or a chat call)"
            self.watcher.settle_now(run, RunResult(Outcome.LOST, error=error))
            return None
        handle = procs.adopt(run.pid, run.pid_started_at or 0.0, Path(run.log_path))
        if handle is None:
            self.watcher.settle_now(run, RunResult(Outcome.CRASHED,
                                                   error="process and log are gone"))
            return None
        try:
            runtime = runtime_for(role.runtime)
        except ValueError as error:
            self.watcher.settle_now(run, RunResult(Outcome.FAILED, error=str(error)))
            return None
        live = self.watcher.watch(run, task, role, runtime, handle, run.spawned_at or now, now)
        live.ended_unwatched = at_start and not handle.is_alive()
        cooldown = self.store.cooldown_of(role.runtime)
        live.probe = cooldown is not None and cooldown.probe_run_id == run.id
        log.info("run %s: re-adopted pid %s (%s)", run.id, run.pid,
                 "alive" if handle.is_alive() else "already ended")
        return live

    def _spawn_left_on_disk(self, run: Run, now: float) -> Run:
        """A run of this node with no spawn on record: the earlier daemon died between
        starting its agent and recording it, or before starting one. The run's log says which:
        the shim writes its header there before the agent starts, and its exit file when the
        agent ends. A started agent is recorded now and adopted (or settled from its exit
        file) like any other, never started a second time; the run is returned unchanged
        when no agent ever started."""
        log_path = self.log_dir / f"run-{run.id}.log"
        found = procs.unrecorded_spawn(log_path)
        if found is None:
            return run
        pid, started_at = found
        log.warning("run %s: its agent (shim pid %s) started before the earlier daemon could "
                    "record it: recording it now", run.id, pid)
        recorded = dataclasses.replace(run, pid=pid, pid_started_at=started_at,
                                       log_path=str(log_path), spawned_at=now)
        try:
            self.store.mark_spawned(run.id, now, self.config.daemon.lease, pid=pid,
                                    pid_started_at=started_at, log_path=str(log_path))
        except TransitionRefused:
            pass  # cancelled meanwhile: watched all the same, so that its agent is stopped
        except StoreError as error:
            log.warning("run %s: could not record its spawn: %s", run.id, error)
        return recorded

    def look_at_unstarted(self, now: float) -> int:
        """The runs found unstarted at start-up (SHIM_GRACE): adopted once their shim's
        header shows, settled as never started when their time is up."""
        adopted = 0
        for run_id, deadline in list(self.unstarted.items()):
            if now < deadline and procs.unrecorded_spawn(
                    self.log_dir / f"run-{run_id}.log") is None:
                continue
            try:
                run = self.store.get_run(run_id)
                task = self.store.get_task(run.task_id)
            except StoreError:
                continue  # the database is away: looked at again in the next pass
            del self.unstarted[run_id]
            if run.ended_at is None and self.adopt(run, task, now) is not None:
                adopted += 1
        return adopted

    def not_started(self, error: Exception, now: float) -> RunResult:
        """A run whose agent could not start: a failure of the task (a strike), unless the
        machine is at fault (a full disk): then the claim is released as it was."""
        fault = faults.fault_of(error)
        if fault is None:
            return RunResult(Outcome.FAILED, error=f"could not start: {error}")
        reason = self.disk.met(error, now)
        return RunResult(Outcome.LOST, error=f"could not start: {reason}", fault=fault)
