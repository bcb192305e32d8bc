"""The supervisor: starts agent processes for claimed tasks, watches them, and settles each run
when its process ends. Restarted daemons re-adopt live agents by pid + start time.

Death is noticed by a pidfd (at once); stalls and timeouts by `run_once(now)`, about once a
second: it tails each log into the runtime's reader, samples activity, stops what a person
cancelled and adopts again any run of this node left unwatched. Other services see the live
runs only through `LiveRuns`, a read-only view.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from taskherd import procs
from taskherd.config import Config, RoleConfig, make_private_dir
from taskherd.model import Claim, Outcome, Run, RunResult, Task
from taskherd.runtimes.base import AgentEnv, Execution, OutputReader, RunFiles, Runtime
from taskherd.runtimes.ratelimit import RateLimitSignal, guessed_cooldown, known_reset
from taskherd.runtimes.registry import runtime_for
from taskherd.store import Store, StoreError, TransitionRefused

log = logging.getLogger("taskherd.supervisor")
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL of an agent's process group
CPU_BUSY_SHARE = 0.05  # share of one core, between two samples, that counts as working
# Bytes of new log read per check: enough for a Claude Code run streaming 10,000 events a
# second, small enough that one runaway agent cannot hold the loop for long.
READ_LIMIT = 32 << 20


@dataclass
class LiveRun:
    """An agent this daemon is watching."""

    run: Run
    task: Task
    role: RoleConfig
    runtime: Runtime
    handle: Execution
    reader: OutputReader
    spawned_at: float
    pools: frozenset[str]
    last_activity: float
    log_offset: int = 0
    cpu_seconds: float = 0.0
    cpu_sampled_at: float = 0.0
    heartbeat_at: float | None = None
    kill_reason: tuple[Outcome, str] | None = None  # why the supervisor is ending it
    watcher: asyncio.Task | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SupervisorSettings:
    interval: float = 1.0  # seconds between two checks: stalls, timeouts, log tailing


class LiveRuns(Mapping[int, Run]):
    """What other services may know of the runs this node watches, read-only: the run of
    each watched id, running counts per role, pools in use and the last spawn per role."""

    def __init__(self, live: dict[int, LiveRun], last_spawns: dict[str, float]):
        self._live = live
        self._last_spawns = last_spawns

    def __getitem__(self, run_id: int) -> Run:
        return self._live[run_id].run

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._live))

    def __len__(self) -> int:
        return len(self._live)

    def running_per_role(self) -> Counter[str]:
        return Counter(live.role.name for live in self._live.values())

    def pools_in_use(self) -> Counter[str]:
        return Counter(pool for live in self._live.values() for pool in live.pools)

    def last_spawn(self, role: str) -> float | None:
        return self._last_spawns.get(role)


class Supervisor:
    def __init__(
        self,
        config: Config,
        store: Store,
        clock: Callable[[], float],
        on_change: Callable[[], None] = lambda: None,
        settings: SupervisorSettings = SupervisorSettings(),
    ):
        self.config = config
        self.store = store
        self.clock = clock
        self.on_change = on_change  # wakes the dispatcher when a slot frees or a limit starts
        self.live: dict[int, LiveRun] = {}
        self.last_spawn: dict[str, float] = {}  # role → time of its latest spawn (stagger)
        self.view = LiveRuns(self.live, self.last_spawn)
        self.settings = settings
        self.log_dir = config.daemon.log_dir
        make_private_dir(self.log_dir)

    # -- starting ------------------------------------------------------------------------

    def start(self, claim: Claim, now: float) -> LiveRun | None:
        """Spawn the agent for a fresh claim and record it; a failure to start settles the run."""
        role = self.config.role(claim.run.role)
        self.last_spawn[role.name] = now
        files = RunFiles(self.log_dir / f"run-{claim.run.id}.log",
                         self.log_dir / f"run-{claim.run.id}.prompt")
        try:
            runtime = runtime_for(role.runtime)
            _create_private(files.prompt)
            handle = self._begin(runtime, role, claim, files)
        except (OSError, ValueError, StoreError) as error:
            log.error("run %s of task %s could not start: %s", claim.run.id, claim.task.id, error)
            self._settle_now(claim.run, RunResult(Outcome.FAILED, error=f"could not start: {error}"))
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
            live = self._watch(claim.run, claim.task, role, runtime, handle, now)
            self.kill(live, Outcome.CANCELLED, "cancelled before start")
            return None
        except StoreError as error:
            # The spawn is not on record (the database is away): an agent left running would
            # be unwatched, and its task rescued and run a second time. Stop it now; its run
            # ends `lost` (no strike) once the store answers, or the never-spawned rescue
            # releases the claim later.
            log.error("run %s: could not record the spawn of pid %s (%s); stopping it",
                      claim.run.id, handle.pid, error)
            live = self._watch(claim.run, claim.task, role, runtime, handle, now)
            self.kill(live, Outcome.LOST, f"its spawn could not be recorded: {error}")
            return None
        live = self._watch(claim.run, claim.task, role, runtime, handle, now)
        log.info("run %s: task %s (%s) started%s", claim.run.id, claim.task.id, role.name,
                 f" as pid {handle.pid}" if handle.pid else "")
        return live

    def _begin(self, runtime: Runtime, role: RoleConfig, claim: Claim,
               files: RunFiles) -> Execution:
        """Start the run however its runtime starts one (a process, or an in-process call)."""
        agent = AgentEnv(self._agent_path(role), self._agent_vars(claim),
                         self._previous_session(role, claim.task))
        return runtime.start(role, claim.task, claim.run, files, agent)

    def _previous_session(self, role: RoleConfig, task: Task) -> str | None:
        """The latest session an earlier run of `task` recorded, when the role resumes."""
        if not role.resume:
            return None
        sessions = [run.session_id for run in self.store.runs_of_task(task.id) if run.session_id]
        return sessions[-1] if sessions else None

    def adopt(self, run: Run, task: Task, now: float) -> LiveRun | None:
        """Re-attach to an agent an earlier daemon started; settle it if it already ended."""
        role = self.config.role(run.role)
        if run.pid is None or run.log_path is None:
            error = "no process to re-adopt after a restart (never spawned, or a chat call)"
            self._settle_now(run, RunResult(Outcome.LOST, error=error))
            return None
        handle = procs.adopt(run.pid, run.pid_started_at or 0.0, Path(run.log_path))
        if handle is None:
            self._settle_now(run, RunResult(Outcome.CRASHED, error="process and log are gone"))
            return None
        try:
            runtime = runtime_for(role.runtime)
        except ValueError as error:
            self._settle_now(run, RunResult(Outcome.FAILED, error=str(error)))
            return None
        live = self._watch(run, task, role, runtime, handle, run.spawned_at or now)
        live.last_activity = now
        log.info("run %s: re-adopted pid %s (%s)", run.id, run.pid,
                 "alive" if handle.is_alive() else "already ended")
        return live

    def _watch(self, run: Run, task: Task, role: RoleConfig, runtime: Runtime,
               handle: Execution, spawned_at: float) -> LiveRun:
        pools = frozenset(p for p in (role.pool, task.pool) if p)
        live = LiveRun(run, task, role, runtime, handle, runtime.reader(role), spawned_at,
                       pools, last_activity=spawned_at)
        self.live[run.id] = live
        live.watcher = asyncio.get_running_loop().create_task(self._await_exit(live))
        return live

    async def _await_exit(self, live: LiveRun) -> None:
        status = await live.handle.wait_exit()
        try:
            self._settle_exit(live, status)
        except Exception:
            # A task's exception is only printed when it is collected; say it now. The
            # monitor adopts the run again, as it adopts every unwatched open run.
            log.exception("run %s: settling its exit failed", live.run.id)
            self.live.pop(live.run.id, None)
        await self._reap_leftovers(live)

    async def _reap_leftovers(self, live: LiveRun) -> None:
        """Stop what the agent left running in its process group once it has exited.

        A dev server or a watcher started in the background would otherwise outlive its run
        and pile up run after run, as service managers' control-group kill prevents.
        """
        if live.handle.pid is None:
            return  # an in-process call: no process group
        leftovers = procs.live_group_members(live.handle.pid)
        if leftovers:
            log.warning("run %s: the agent left %d process(es) running; stopping them",
                        live.run.id, len(leftovers))
            await live.handle.terminate(KILL_GRACE)

    # -- watching ------------------------------------------------------------------------

    def next_wake(self, now: float) -> float:
        return now + self.settings.interval

    def run_once(self, now: float) -> dict[str, int]:
        """One pass: watch what runs, stop what a person cancelled, adopt what is unwatched."""
        counts = self.check(now)
        counts["cancelled"] += self._stop_cancelled()
        counts["adopted"] = self._adopt_unwatched(now)
        return counts

    def _stop_cancelled(self) -> int:
        """Kill agents whose task a person cancelled while they worked."""
        stopped = 0
        for run in self.store.open_runs_of_final_tasks(self.config.daemon.node):
            live = self.live.get(run.id)
            if live is not None and live.kill_reason is None:
                self.kill(live, Outcome.CANCELLED, "the task was cancelled")
                stopped += 1
        return stopped

    def _adopt_unwatched(self, now: float) -> int:
        """A spawned run of this node nobody watches (its watcher died on an error) is adopted
        again: otherwise the node renews its lease forever and the task stays `running` for
        an agent nobody will ever settle."""
        adopted = 0
        for run in self.store.open_runs(self.config.daemon.node):
            if run.id in self.live or run.spawned_at is None:
                continue
            log.warning("run %s is open but unwatched: adopting it again", run.id)
            try:
                task = self.store.get_task(run.task_id)
            except StoreError:
                continue
            self.adopt(run, task, now)
            adopted += 1
        return adopted

    def check(self, now: float) -> dict[str, int]:
        """Tail logs, look for rate limits, and kill the stalled and the overdue."""
        counts = {"checked": 0, "stalled": 0, "timed_out": 0, "cancelled": 0}
        if not self.live:
            return counts
        heartbeats = {run.id: run for run in self.store.open_runs(self.config.daemon.node)}
        cpu = procs.tree_cpu_seconds({live.handle.pid for live in self.live.values() if live.handle.pid})
        for live in list(self.live.values()):
            if live.kill_reason is not None or not live.handle.is_alive():
                continue
            if live.run.id not in heartbeats and self._rescued_elsewhere(live):
                continue
            counts["checked"] += 1
            verdict = self._judge(live, now, heartbeats.get(live.run.id), cpu.get(live.handle.pid))
            if verdict is not None:
                counts[verdict[0].value] = counts.get(verdict[0].value, 0) + 1
                self.kill(live, *verdict)
        return counts

    def _rescued_elsewhere(self, live: LiveRun) -> bool:
        """A watched agent whose run another node ended (this node was declared down while it
        was only slow, or cut off from the database): its task may already run elsewhere, so
        the agent stops; one task, one agent."""
        try:
            run = self.store.get_run(live.run.id)
        except StoreError:
            return False
        if run.ended_at is None:
            return False  # opened or settled in between: the next pass looks again
        self.kill(live, run.outcome or Outcome.LOST, f"its run was ended elsewhere: {run.error}")
        return True

    def _judge(self, live: LiveRun, now: float, stored: Run | None,
               cpu_seconds: float | None) -> tuple[Outcome, str] | None:
        if self._read_new_output(live, now):
            live.last_activity = now
        if stored is not None and stored.heartbeat_at != live.heartbeat_at:
            live.heartbeat_at = stored.heartbeat_at
            live.last_activity = now
        if cpu_seconds is not None:
            # A rate, not any growth: an idle Node.js or Python process still ticks a few
            # milliseconds a second, and summed over minutes that would look like work.
            elapsed = max(now - live.cpu_sampled_at, 1e-3)
            if cpu_seconds - live.cpu_seconds >= CPU_BUSY_SHARE * elapsed:
                live.last_activity = now
            live.cpu_seconds, live.cpu_sampled_at = cpu_seconds, now
        if now - live.spawned_at > live.role.timeout:
            return Outcome.TIMED_OUT, f"ran longer than timeout ({live.role.timeout:g}s)"
        if now - live.last_activity > live.role.idle_timeout:
            return Outcome.STALLED, (f"no output, heartbeat or CPU for "
                                     f"{now - live.last_activity:.0f}s (idle_timeout "
                                     f"{live.role.idle_timeout:g}s)")
        return None

    def _read_new_output(self, live: LiveRun, now: float) -> bool:
        try:
            with open(live.handle.log_path, "rb") as log_file:
                log_file.seek(live.log_offset)
                chunk = log_file.read(READ_LIMIT)
        except FileNotFoundError:
            return False
        if not chunk:
            return False
        live.log_offset += len(chunk)
        signal = live.reader.feed(chunk, now)
        if signal is not None:
            self._rate_limited(live, signal, now)
        return True

    def _rate_limited(self, live: LiveRun, signal: RateLimitSignal, now: float) -> None:
        """Pause every spawn of the runtime, and end this run without a strike."""
        until = self._pause_runtime(live.role, known_reset(signal, now),
                                    signal.excerpt or signal.source, now)
        log.warning("runtime %s rate-limited (run %s): paused until %s", live.role.runtime,
                    live.run.id, _utc(until).isoformat())
        self.kill(live, Outcome.RATE_LIMITED, signal.excerpt or "rate limited")
        self.on_change()

    def _pause_runtime(self, role: RoleConfig, reset_at: float | None, reason: str,
                       now: float) -> float:
        """Pause every spawn of the role's runtime until the limit lifts: when its text said,
        else a guess that starts short and doubles while limits repeat."""
        span = None
        if reset_at is None:
            previous = self.store.cooldown_of(role.runtime)
            span = guessed_cooldown(previous and previous.until, previous and previous.span,
                                    now, role.rate_limit_cooldown)
            reset_at = max(now + span, previous.until if previous else now)
        self.store.set_cooldown(role.runtime, reset_at, reason, now, span)
        return reset_at

    # -- ending --------------------------------------------------------------------------

    def kill(self, live: LiveRun, outcome: Outcome, reason: str) -> None:
        """Terminate the agent's process group; its watcher settles the run as `outcome`."""
        if live.kill_reason is not None:
            return
        live.kill_reason = (outcome, reason)
        log.warning("run %s: killing pid %s: %s", live.run.id, live.handle.pid, reason)
        asyncio.get_running_loop().create_task(live.handle.terminate(KILL_GRACE))

    def _settle_exit(self, live: LiveRun, status: procs.ExitStatus) -> None:
        now = self.clock()
        # The shim's exit file knows when the agent really ended: a run re-adopted after a
        # restart ended while no daemon watched, not when this one noticed.
        ended_at = status.ended_at if status.ended_at and status.ended_at <= now else now
        self._read_new_output(live, now)
        live.reader.finish(now)
        self.live.pop(live.run.id, None)
        live.handle.close()
        try:
            run = self.store.get_run(live.run.id)  # the agent's report arrives in the store
        except StoreError:
            run = live.run
        if run.ended_at is not None:
            return  # settled elsewhere (e.g. a rescue while this daemon was away)
        result = self._result(live, run, status, now)
        if result.outcome is Outcome.RATE_LIMITED and live.kill_reason is None:
            # Limits found only at the end (an HTTP 429, a result event) pause the runtime too.
            self._pause_runtime(live.role, result.retry_at, result.error or "rate limited", now)
        self._settle_now(run, result, ended_at)
        log.info("run %s: task %s %s%s", run.id, run.task_id, result.outcome.value,
                 f" ({result.error})" if result.error else "")
        self.on_change()

    def _result(self, live: LiveRun, run: Run, status: procs.ExitStatus, now: float) -> RunResult:
        result = live.runtime.result(live.role, live.reader, status, run, now, live.handle)
        if live.kill_reason is None or result.outcome is Outcome.SUCCEEDED and (
                run.report == "done" or live.reader.summary is not None):
            return result  # work that was completed before the kill counts (partial success)
        outcome, reason = live.kill_reason
        retry_at = result.retry_at if outcome is Outcome.RATE_LIMITED else None
        return RunResult(outcome, status.code, error=reason, error_tail=live.reader.error_tail,
                         retry_at=retry_at)

    def _settle_now(self, run: Run, result: RunResult, ended_at: float | None = None) -> None:
        policy = self.config.policy_for(run.role)
        try:
            self.store.finish_run(run.id, result, policy,
                                  self.clock() if ended_at is None else ended_at)
        except StoreError as error:
            log.warning("run %s could not be settled: %s", run.id, error)

    async def shutdown(self, mode: str, grace: float) -> None:
        """On daemon stop: leave agents running (detach), wait for them, or kill them."""
        if mode == "detach" or not self.live:
            for live in self.live.values():
                if live.watcher:
                    live.watcher.cancel()
            return
        if mode == "wait":
            pending = [live.watcher for live in self.live.values() if live.watcher]
            await asyncio.wait(pending, timeout=grace)
        for live in list(self.live.values()):
            self.kill(live, Outcome.LOST, "the daemon is shutting down")
        remaining = [live.watcher for live in self.live.values() if live.watcher]
        if remaining:
            await asyncio.wait(remaining, timeout=KILL_GRACE + 10)

    # -- the agent's environment ---------------------------------------------------------

    def _agent_path(self, role: RoleConfig) -> str:
        path = role.path or self.config.daemon.path
        # Agents call `taskherd heartbeat|done`: make this installation's command reachable
        # even when the configured PATH (rightly minimal under a service manager) lacks it.
        own_bin = os.path.dirname(sys.executable)
        return path if own_bin in path.split(os.pathsep) else f"{path}{os.pathsep}{own_bin}"

    def _agent_vars(self, claim: Claim) -> dict[str, str]:
        agent_vars = {
            "TASKHERD_TASK_ID": str(claim.task.id),
            "TASKHERD_RUN_ID": str(claim.run.id),
            "TASKHERD_ROLE": claim.run.role,
            "TASKHERD_HOME": str(self.config.daemon.data_dir),  # where agent.sock is
            # The agent's only key: its own run, while the run is open. Never the database.
            "TASKHERD_RUN_TOKEN": self._issue_credential(claim.run.id),
        }
        return agent_vars

    def _issue_credential(self, run_id: int) -> str:
        token = secrets.token_urlsafe(32)
        self.store.issue_run_credential(run_id, token, self.clock())
        return token


def _create_private(path: Path) -> None:
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600))


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)
