"""The supervisor: watches the agent processes of claimed tasks and settles each run when its
process ends. Starting them, and re-adopting live agents by pid + start time after a restart,
is `services/starts.py`, which hands each started agent to `Supervisor.watch`.

Death is noticed by a pidfd (at once); the rest by `run_once(now)`. Its cost grows with what
changes, not with how many agents run: each run has its own next look in a heap, the moment
it could next cross a threshold: each round while it writes (its output read as it comes),
else its idle or input threshold (and SAMPLE_AHEAD before it, for a CPU baseline), the
moment it reads as quiet, its hard timeout, and the longest its log may go unread (a
question is timed from the log's mtime, so a late read still ends the run on time). A pass
takes only what is due and stops after a couple of milliseconds, leaving the rest for the
next pass: the event loop is never held for long. CPU time is read (one /proc walk per round
at most) only for runs near a threshold or busy, and heartbeats come from one query of the
runs that called in. A look tails the log into the runtime's reader, which catches rate
limits and loops (`services/run_output.py`); the facts a look gathers (output written, CPU
used, heartbeats, its question, a loop) are judged by one pure function,
`policy/liveness.judge`, which says what ends the run and when to look next. Verdicts are
written to the store when they change. Cancels and runs ended elsewhere are
found by a sweep of the node's open runs, at once when an event tells of one, else every
SWEEP_EVERY. Other services see the live runs only through `LiveRuns`, a read-only view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from taskherd.config import make_private_dir
from taskherd.host import activity, procs
from taskherd.model import (
    LEASED_STATES,
    Claim,
    Event,
    EventKind,
    Fault,
    Liveness,
    Outcome,
    Run,
    RunResult,
    Task,
)
from taskherd.model.settings import Config, Gate, RoleConfig
from taskherd.policy import faults, liveness
from taskherd.policy.admission import ClaimAttempt, ClaimRequest
from taskherd.policy.liveness import LOOK_GAP
from taskherd.runtimes.base import Execution, Runtime
from taskherd.runtimes.ratelimit import RateLimitSignal, known_reset
from taskherd.services import run_ends, run_output
from taskherd.services.disk_pause import DiskPause
from taskherd.services.gates import GateRunner
from taskherd.services.launch import Launch, agent_path
from taskherd.services.live_runs import GateLimits, LiveRun, LiveRuns, LookSchedule
from taskherd.services.pauses import RuntimePauses
from taskherd.services.preparations import Preparation, Preparations
from taskherd.services.settles import PendingSettles
from taskherd.services.starts import Starts
from taskherd.store import Store, StoreError
from taskherd.store.watch import VerdictChange

log = logging.getLogger("taskherd.supervisor")
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL of an agent's process group
# Seconds between two sweeps of every open run of this node (runs nobody watches, runs ended
# elsewhere, tasks cancelled under a working agent). Events make the sweep come at once; this
# is for the event a listener missed.
SWEEP_EVERY = 10.0
# The active/quiet verdicts (what `runs list` shows) are written at most this often, the changes
# of the runs looked at meanwhile in one transaction: a thousand agents turning quiet over a few
# seconds changed some verdict in nearly every pass, and each pass's write waited for the disk
# (a sync at durability full: 3-20 ms on a loaded machine) on the daemon's loop, which every
# claim and start in that time waited for. A question or a loop is written at once.
VERDICTS_KEPT = 2.0
HEARTBEAT_SLACK = 5.0  # heartbeats are stamped by another process's clock: look back this far


@dataclass(frozen=True)
class SupervisorSettings:
    interval: float = 1.0  # seconds between two rounds: heartbeats, logs that grow
    # One pass holds the event loop this long at most (time.perf_counter seconds); the looks
    # still due then are taken in the next pass, after whatever else waits for the loop.
    pass_budget: float = 0.002
    looks_per_pass: int = 200  # due runs taken from the heap at once (one CPU sampling round)


class NextClaims(Protocol):
    """What a run's end asks of the dispatcher (services/dispatcher.py) for the slot it frees."""

    def follow_on(self, now: float) -> ClaimRequest | None: ...

    def took(self, attempt: ClaimAttempt, now: float) -> None: ...


class Supervisor:
    def __init__(
        self,
        config: Config,
        store: Store,
        clock: Callable[[], float],
        on_change: Callable[[], None] = lambda: None,
        settings: SupervisorSettings = SupervisorSettings(),
        disk: DiskPause | None = None,
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
        self._looks = LookSchedule()  # when each watched run is looked at next
        self._behind = False  # the last pass left due looks for the next one
        self._heartbeats_read = float("-inf")
        self._run_of_task: dict[int, int] = {}  # task id → its watched run's id
        self._swept_open = self._swept_cancels = float("-inf")
        self._verdicts: dict[int, VerdictChange] = {}  # run id → its verdict not written yet
        self._verdicts_written = -math.inf  # when they were last written
        self._heard = False  # an event said a watched run may have ended or been cancelled
        make_private_dir(self.log_dir)
        self.launch = Launch(config, store, clock)
        self.gates = GateRunner(store, clock, self.log_dir, self.launch.confinement)
        self.preparations = Preparations(self.view)  # runs whose worktree is being made
        self.pauses = RuntimePauses(store, on_change, lambda: self.config)
        # A full disk is the machine's fault: the node pauses, the run costs no strike, and
        # a settle the database cannot take now is kept and written later.
        self.disk = disk or DiskPause(store, lambda: self.config)
        self.settles = PendingSettles(store, lambda role: self.config.policy_for(role),
                                      on_fault=self.store_fault)
        self.next_claims: NextClaims | None = None  # see hand_freed_slots_to
        self.starts = Starts(config, store, clock, self, self.launch, self.preparations,
                             self.disk, self.last_spawn, on_change)

    # -- starting (services/starts.py) ----------------------------------------------------

    def start(self, claim: Claim, now: float,
              probe: bool = False) -> LiveRun | Preparation | None:
        """Spawn the agent for a fresh claim, or begin making its worktree first."""
        return self.starts.start(claim, now, probe)

    def adopt(self, run: Run, task: Task, now: float, at_start: bool = False) -> LiveRun | None:
        """Re-attach to an agent an earlier daemon started; settle it if it already ended."""
        return self.starts.adopt(run, task, now, at_start)

    # -- watching ------------------------------------------------------------------------

    def watch(self, run: Run, task: Task, role: RoleConfig, runtime: Runtime,
              handle: Execution, spawned_at: float, active_at: float | None = None) -> LiveRun:
        """Watch a started agent until it ends: looked at in rounds, settled when it exits."""
        pools = frozenset(p for p in (role.pool, task.pool) if p)
        live = LiveRun(run, task, role, runtime, handle, runtime.reader(role), spawned_at,
                       pools, last_activity=active_at or spawned_at, looked_at=spawned_at)
        live.sample_from = liveness.sample_from(self._facts(live, spawned_at))
        self._forget(run.id)  # watched again (a restart's adoption): counted once
        self.live[run.id] = live
        self.view.watched(live)
        self._run_of_task[task.id] = run.id
        self._looks.schedule(live, 0.0)  # the first look: at the next round
        live.watcher = asyncio.get_running_loop().create_task(self._await_exit(live))
        return live

    def _forget(self, run_id: int) -> None:
        """The run is no longer watched here (settled, or settled elsewhere)."""
        live = self.live.pop(run_id, None)
        if live is not None:
            self.view.unwatched(live)
            if self._run_of_task.get(live.task.id) == run_id:
                del self._run_of_task[live.task.id]

    async def _await_exit(self, live: LiveRun) -> None:
        status = await live.handle.wait_exit()
        try:
            await self._settle_exit(live, status)
        except Exception:
            # A task's exception is only printed when it is collected; say it now. The
            # monitor adopts the run again, as it adopts every unwatched open run.
            log.exception("run %s: settling its exit failed", live.run.id)
            self._forget(live.run.id)
        await self._reap_leftovers(live)
        # Its cgroups go once its gates have run in them too; what escaped its process group
        # (a daemonized child) is still in them, and stopped.
        await asyncio.to_thread(self.launch.release_caps, live.run.id)

    async def _reap_leftovers(self, live: LiveRun) -> None:
        """Stop what the agent left running in its process group once it has exited.

        A dev server or a watcher started in the background would otherwise outlive its run
        and pile up run after run, as service managers' control-group kill prevents.
        """
        if not isinstance(live.handle, procs.ProcessHandle):
            return  # an in-process call: no process group
        if not live.handle.started_at:
            # Adopted with no start time (a shim known only from its log's header, gone when
            # found): its pid may lead another process group by now, which must not be stopped.
            return
        await live.handle.wait_reaped()  # a zombie shim keeps its empty group in existence
        leftovers = procs.live_group_members(live.handle.pid)
        if leftovers:
            log.warning("run %s: the agent left %d process(es) running; stopping them",
                        live.run.id, len(leftovers))
            await live.handle.terminate(KILL_GRACE)

    def next_wake(self, now: float) -> float:
        """The next round: when the earliest look falls (rounds LOOK_GAP apart at least), at
        once when the last pass left looks due, and every interval for heartbeats."""
        if self._behind:
            return now
        wake = now + self.settings.interval
        earliest = self._looks.earliest()
        if earliest is not None:
            wake = min(wake, max(earliest, now + LOOK_GAP))
        return wake

    def hear(self, event: Event) -> None:
        """A committed change, anyone's: a watched task that left its run (cancelled, taken
        by a newer run) or a watched run ended by someone else is looked for in the next pass
        rather than at the next sweep."""
        if event.task_id is None:
            return
        run_id = self._run_of_task.get(event.task_id)
        if run_id is None:
            run_id = self.preparations.run_of_task(event.task_id)  # cancelled while prepared?
        if run_id is None:
            return
        if event.kind is EventKind.RUN_ENDED or (
                event.kind is EventKind.TASK_CHANGED
                and (event.state not in LEASED_STATES or event.run_id not in (None, run_id))):
            self._heard = True

    def reload(self, config: Config) -> None:
        """The daemon's reloaded config: the next pass reads it."""
        self.config = config
        self.starts.reload(config)
        # A changed box: a new spare (for the roles this node runs).
        runnable = [config.roles[name] for name in config.runnable_roles]
        self.launch.warm_box_spares(runnable)
        self.launch.warm_caps(runnable)

    def run_once(self, now: float) -> dict[str, int]:
        """One pass: watch what runs, stop what a person cancelled, adopt what is unwatched."""
        counts = self.check(now)
        if self.settles:
            counts["settled_late"] = self.settles.retry()
        heard, self._heard = self._heard, False
        # The two sweeps read every open run of the node: taken half a period apart, so that
        # no pass holds the loop for both, unless an event asks for them now.
        if heard or now - self._swept_cancels >= SWEEP_EVERY:
            counts["cancelled"] += self._stop_cancelled()
            self._swept_cancels = now
            if not heard and self._swept_open == float("-inf"):
                self._swept_open = now - SWEEP_EVERY / 2
        counts["adopted"] = self.starts.look_at_unstarted(now) if self.starts.unstarted else 0
        counts["run_files_made"] = self.starts.make_files_ahead()
        if heard or now - self._swept_open >= SWEEP_EVERY:
            counts["adopted"] += self._sweep_open_runs(now)
            self._swept_open = now
        return counts

    def _stop_cancelled(self) -> int:
        """Kill agents whose task a person cancelled while they worked."""
        stopped = 0
        for run in self.store.open_runs_of_final_tasks(self.config.daemon.node):
            if run.id in self.preparations:
                self.preparations.stop(run.id)  # its git: the run then ends cancelled
                stopped += 1
                continue
            live = self.live.get(run.id)
            if live is not None and live.kill_reason is None:
                self.kill(live, Outcome.CANCELLED, "the task was cancelled")
                stopped += 1
        return stopped

    def _sweep_open_runs(self, now: float) -> int:
        """The node's open runs against the watched ones. A watched run that is no longer
        open was ended elsewhere: its agent stops. A spawned run of this node nobody watches
        (its watcher died on an error) is adopted again: otherwise the node renews its lease
        forever and the task stays `running` for an agent nobody will ever settle."""
        open_runs = self.store.open_run_ids(self.config.daemon.node)
        for live in list(self.live.values()):
            if live.run.id not in open_runs and live.kill_reason is None:
                self._rescued_elsewhere(live)
        adopted = 0
        for run_id, spawned_at in open_runs.items():
            if run_id in self.live or spawned_at is None or run_id in self.settles:
                continue
            log.warning("run %s is open but unwatched: adopting it again", run_id)
            try:
                run = self.store.get_run(run_id)
                task = self.store.get_task(run.task_id)
            except StoreError:
                continue
            self.adopt(run, task, now)
            adopted += 1
        return adopted

    def check(self, now: float) -> dict[str, int]:
        """Look at the runs that are due: tail their logs, sample CPU where a threshold is
        near, and end the stalled, the overdue, the looping and those waiting for input.
        The looks are taken from a heap, so a pass costs what is due, not what runs; a pass
        stops after `pass_budget` and leaves the rest due for the next."""
        counts = {"checked": 0, "stalled": 0, "timed_out": 0, "cancelled": 0}
        self._behind = False
        if not self.live:
            return counts
        if now - self._heartbeats_read >= self.settings.interval:
            self._note_heartbeats(now)
        due = self._looks.due(now, self.live, self.settings.looks_per_pass)
        began = time.perf_counter()
        # CPU time matters only where it could keep a run from a threshold: sampled while
        # the run is busy, or from SAMPLE_AHEAD before its input or idle threshold.
        sampled = {pid for live in due if (pid := live.handle.pid)
                   and (live.cpu_busy or now >= live.sample_from)}
        cpu = activity.tree_cpu_seconds(sampled) if sampled else {}
        changes = []
        for index, live in enumerate(due):
            if index and time.perf_counter() - began > self.settings.pass_budget:
                for left in due[index:]:
                    self._looks.schedule(left, now)  # still due
                self._behind = True
                break
            if not live.handle.is_alive():
                # Its watcher settles it; looked at again should that take a while.
                self._looks.schedule(live, now + self.settings.interval)
                continue
            counts["checked"] += 1
            pid = live.handle.pid
            verdict = self._look(live, now, cpu.get(pid) if pid else None)
            if verdict.end is not None:
                counts[verdict.end[0].value] = counts.get(verdict.end[0].value, 0) + 1
                self.kill(live, *verdict.end)
                continue
            self._looks.schedule(live, verdict.next_look, force=True)
            live.sample_from = verdict.sample_from
            if verdict.shown is not None and verdict.shown != live.verdict:
                live.verdict = verdict.shown
                changes.append(VerdictChange(live.run.id, *verdict.shown))
        earliest = self._looks.earliest()
        if len(due) == self.settings.looks_per_pass and earliest is not None and earliest <= now:
            self._behind = True  # more were due than one pass takes
        self._verdicts.update((change.run_id, change) for change in changes)
        if self._verdicts and now - self._verdicts_written >= VERDICTS_KEPT:
            self._write_verdicts(now)
        return counts

    def _write_verdicts(self, now: float) -> None:
        """The verdicts changed since the last write, in one transaction (see VERDICTS_KEPT)."""
        changes, self._verdicts = list(self._verdicts.values()), {}
        self._verdicts_written = now
        try:
            self.store.set_liveness(changes)
        except StoreError as error:
            log.warning("liveness verdicts not recorded: %s", error)
            for change in changes:
                if change.run_id in self.live:
                    self.live[change.run_id].verdict = None  # written again next time

    def _note_heartbeats(self, now: float) -> None:
        """A heartbeat is a sign of life: one query for the runs that called in lately."""
        since = max(self._heartbeats_read, now - self.settings.interval) - HEARTBEAT_SLACK
        self._heartbeats_read = now
        for run_id, beat in self.store.heartbeats_since(self.config.daemon.node, since).items():
            live = self.live.get(run_id)
            if live is not None and beat != live.heartbeat_at:
                live.heartbeat_at = beat
                self._active(live, min(beat, now), now)  # a sign of life when it was stamped

    def _active(self, live: LiveRun, at: float, now: float) -> None:
        """A sign of work at `at`: its idle clock starts over, and it is looked at soon."""
        live.last_activity = max(live.last_activity, at)
        live.waiting = None  # it moved: answered, or it found its own way on
        if live.next_look != math.inf:  # (inf: being looked at now, or ended)
            self._looks.schedule(live, now + self.settings.interval)

    def _rescued_elsewhere(self, live: LiveRun) -> bool:
        """A watched agent whose run another node ended (this node was declared down while it
        was only slow, or cut off from the database): its task may already run elsewhere, so
        the agent stops; one task, one agent."""
        try:
            run = self.store.get_run(live.run.id)
        except StoreError:
            return False
        if run.ended_at is None:
            return False  # opened or settled in between: the next sweep looks again
        self.kill(live, run.outcome or Outcome.LOST, f"its run was ended elsewhere: {run.error}")
        return True

    def _watch_gate(self, live: LiveRun, gate: Gate, handle: procs.ProcessHandle,
                    started_at: float) -> Callable[[], tuple[Outcome, str] | None]:
        """Watch a quality gate of `live`'s run in place of its (exited) agent: the same
        rounds read its log and sample its CPU, and its verdict ends it when it is idle
        past its window. Returns the function that stops watching and says why the
        supervisor ended it (stalled, or the run's cancel or shutdown), if it did."""
        agent_handle = live.handle
        live.handle = handle
        live.gate = GateLimits(gate.name, gate.idle_timeout or live.role.idle_timeout)
        live.log_offset, live.recent = 0, b""
        live.cpu_seconds = live.cpu_sampled_at = 0.0
        live.cpu_busy = False
        live.last_activity = max(started_at, live.last_activity)
        live.looked_at = started_at
        live.sample_from = liveness.sample_from(self._facts(live, started_at))
        self._looks.schedule(live, 0.0, force=True)  # looked at in the next round

        def done() -> tuple[Outcome, str] | None:
            live.gate = None
            live.handle = agent_handle  # its leftovers are reaped as the agent's
            stopped, live.kill_reason = live.kill_reason, None
            return stopped

        return done

    def _look(self, live: LiveRun, now: float, cpu_seconds: float | None) -> liveness.Verdict:
        """Gather what the run did since its last look (output written, CPU used) into its
        facts, and judge them (policy/liveness.py). A running gate is judged as its agent
        would be; it has no reader (no rate limits, no loops, no questions: no input)."""
        written_at, signal = run_output.read_new_output(live, now)
        if signal is not None:
            self._rate_limited(live, signal, now)
        if written_at is not None:
            self._active(live, written_at, now)
        if (live.gate is None and live.probe and live.reader.progressed
                and live.reader.looping is None):  # a loop is no sign the limit lifted
            self.pauses.probe_passed(live, now)
        self._note_cpu(live, now, cpu_seconds)
        verdict = liveness.judge(self._facts(live, now), now, interval=self.settings.interval,
                                 spread=random.uniform(0.8, 1.0))
        if verdict.asked is not None:
            self._asked(live, verdict.asked, now)
        return verdict

    def _facts(self, live: LiveRun, now: float) -> liveness.RunFacts:
        return liveness.RunFacts(
            live.role, live.spawned_at, live.last_activity, writing=live.output_at >= now,
            question=lambda: run_output.question_of(live), looping=live.reader.looping,
            waiting=live.waiting, gate_idle=live.gate.idle_timeout if live.gate else None,
            shown=live.verdict)

    def _note_cpu(self, live: LiveRun, now: float, cpu_seconds: float | None) -> None:
        """A CPU sample: work since the last one is a sign of life; the first sets the
        baseline."""
        if cpu_seconds is not None:
            live.cpu_busy = live.cpu_sampled_at > 0 and liveness.cpu_busy(
                cpu_seconds - live.cpu_seconds, now - live.cpu_sampled_at)
            if live.cpu_busy:
                self._active(live, now, now)
            live.cpu_seconds, live.cpu_sampled_at = cpu_seconds, now

    def _asked(self, live: LiveRun, question: str, now: float) -> None:
        """An agent idle at a question: ended as needs_input (no strike), or with
        on_input = wait kept alive for `taskherd task answer`. Listeners hear of it either way."""
        self._verdicts.pop(live.run.id, None)  # older than this one: never written after it
        try:
            self.store.note_input_needed(live.run.id, live.task.id, question, now)
        except StoreError as error:
            log.warning("run %s: could not record its question: %s", live.run.id, error)
        live.verdict = (Liveness.WAITING_INPUT, now, question)  # as the store now has it
        log.warning("run %s: the agent waits for input: %s", live.run.id, question)
        if live.role.on_input == "wait":
            live.waiting = question

    def _rate_limited(self, live: LiveRun, signal: RateLimitSignal, now: float) -> None:
        """Pause every spawn of the runtime, and end this run without a strike, unless its
        work is already done: that run ends by itself and is a success (partial success)."""
        live.paused_for = signal
        until = self.pauses.pause(live.role, known_reset(signal, now),
                                  signal.excerpt or signal.source, now, probe=live.probe)
        log.warning("runtime %s rate-limited (run %s): paused until %s", live.role.runtime,
                    live.run.id, _utc(until).isoformat())
        if live.reader.summary is None:
            self.kill(live, Outcome.RATE_LIMITED, signal.excerpt or "rate limited")
        self.on_change()

    # -- ending --------------------------------------------------------------------------

    def kill(self, live: LiveRun, outcome: Outcome, reason: str) -> None:
        """Terminate the agent's process group; its watcher settles the run as `outcome`."""
        if live.kill_reason is not None:
            return
        live.kill_reason = (outcome, reason)
        if outcome is Outcome.LOOPING:
            self._verdicts.pop(live.run.id, None)
            with contextlib.suppress(StoreError):
                self.store.set_liveness([VerdictChange(live.run.id, Liveness.LOOPING,
                                                       self.clock(), reason)])
        log.warning("run %s: killing pid %s: %s", live.run.id, live.handle.pid, reason)
        asyncio.get_running_loop().create_task(live.handle.terminate(KILL_GRACE))

    async def _settle_exit(self, live: LiveRun, status: procs.ExitStatus) -> None:
        now = self.clock()
        # The shim's exit file knows when the agent really ended: a run re-adopted after a
        # restart ended while no daemon watched, not when this one noticed.
        ended_at = status.ended_at if status.ended_at and status.ended_at <= now else now
        _, signal = run_output.read_new_output(live, now, final=True)
        if signal is not None:
            self._rate_limited(live, signal, now)
        live.reader.finish(now)
        live.handle.close()
        if live.role.on_input == "wait" and live.handle.pid is not None:
            procs.input_path_for(live.handle.log_path).unlink(missing_ok=True)
        try:
            run = self.store.get_run(live.run.id)  # the agent's report arrives in the store
        except StoreError:
            run = live.run
        if run.ended_at is not None:
            self._forget(live.run.id)
            return  # settled elsewhere (e.g. a rescue while this daemon was away)
        result = self.launch.judge_caps(live.role, run.id,
                                        run_ends.result_of(live, run, status, now))
        if live.role.git is not None:
            # In a thread: git runs the repository's hooks, which may take minutes, and the
            # loop dispatches and watches every other run meanwhile.
            await asyncio.to_thread(self.launch.keep_worktree_work, live.role, live.task,
                                    live.run)
        if (limit := run_ends.limit_left(live, result, status, now)) is not None:
            # Limits found only at the end (an HTTP 429, a result event, a usage limit after
            # TASK_COMPLETE) pause the runtime too, whatever the run's outcome.
            self.pauses.pause(live.role, *limit, now, probe=live.probe and not live.paused_for)
        elif result.fault is Fault.ENDPOINT:
            # Its endpoint is down (a gateway restarting): the runtime waits for a probe, the
            # task goes back as it was; a probe that met it still down waits longer.
            self.pauses.endpoint_down(live.role, result.error or "endpoint down", now,
                                      probe=live.probe)
            live.probe = False
        elif live.probe:
            self.pauses.probe_ended(live, result, now)
        if result.outcome is Outcome.SUCCEEDED and live.role.gates and live.kill_reason is None:
            # The agent's word is not a check: the run stays open (and watched, holding its
            # slot) while the role's gates run; a restart resumes them on adoption.
            result = await self.gates.check(run, live.role, agent_path(self.config, live.role),
                                            result, lambda *gate: self._watch_gate(live, *gate))
            ended_at = self.clock()
        if live.role.memory:
            # Before the settle: once the task is settled the role's next run may start,
            # and it must read the file within its cap.
            self.launch.keep_memory(live.role, now)
        # As it ends: a crash or a failure while the disk is short (its gates' too) is the
        # machine's fault, not a strike.
        result = self.disk.judge_end(result, run.report, self.clock())
        self._forget(live.run.id)
        with self.store.events_held():  # told once the next agent is on its way, as a pass's
            attempt = self._settle_freeing_slot(run, result, ended_at)
            log.info("run %s: task %s %s%s", run.id, run.task_id, result.outcome.value,
                     f" ({result.error})" if result.error else "")
            if attempt is not None and self.next_claims is not None:
                self.next_claims.took(attempt, self.clock())
        self.on_change()

    def hand_freed_slots_to(self, claims: NextClaims) -> None:
        """From now on a run's end that frees a slot takes the node's next claim, asked of
        `claims` (the dispatcher), in the store's transaction that settles the run."""
        self.next_claims = claims

    def _settle_freeing_slot(self, run: Run, result: RunResult,
                             ended_at: float) -> ClaimAttempt | None:
        """Settle `run`, whose slot is free, with the next claim in the same transaction
        when the dispatcher would claim now: one commit where there were two, and the next
        agent starts without waiting for a dispatch pass. The claim, if one was asked."""
        request = self.next_claims.follow_on(self.clock()) if self.next_claims else None
        if request is None:
            self.settle_now(run, result, ended_at)
            return None
        return self.settles.settle_and_claim(run, result, ended_at, request)

    def settle_now(self, run: Run, result: RunResult, ended_at: float | None = None) -> None:
        self.settles.settle(run, result, self.clock() if ended_at is None else ended_at)

    def store_fault(self, error: StoreError) -> None:
        if faults.fault_of(error) is not None:
            self.disk.met(error, self.clock())

    async def shutdown(self, mode: str, grace: float) -> None:
        """On daemon stop: leave agents running (detach), wait for them, or kill them. Runs
        whose worktree was being made are given up (their git stopped) and released: lost,
        no strike; their next run makes the worktree again, or finds it made."""
        self.next_claims = None  # nothing new starts: a run's end claims nothing more
        for preparation in await self.preparations.stop_all():
            self.settle_now(preparation.claim.run, RunResult(
                Outcome.LOST, error="the daemon stopped while its worktree was being made"))
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

def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)
