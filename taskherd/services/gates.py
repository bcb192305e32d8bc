"""Quality gates at work: after an agent reports success, its role's gates run one after the
other as supervised processes (own session, own log, a timeout), and only if all pass does
the run succeed. The first to fail makes the run `failed`, naming the gate, with the gate's
output tail kept for the next attempt's prompt.

While a gate runs, the supervisor watches it as it watches agents (`GateWatch`): output and
CPU time are signs of life, and a gate silent and idle for its idle window is ended as
stalled; a compile that prints nothing but burns CPU is left to work. Each check is recorded
with its process as it starts, so a daemon restarted while gates run skips the gates the run
already passed, re-adopts the one still running (by pid and start time) or, if it is gone,
runs only that one again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from taskherd.host import procs
from taskherd.host.sandbox import Confinement, SandboxUnavailable
from taskherd.model import GateCheck, Outcome, Run, RunResult
from taskherd.model.settings import Gate, RoleConfig
from taskherd.policy.gates import failure_text
from taskherd.store import Store, StoreError

log = logging.getLogger("taskherd.gates")
KILL_GRACE = 5.0
TAIL_LINES = 40
TAIL_BYTES = 64 * 1024
INTERRUPTED = "interrupted: its process was gone after a daemon restart; it runs again"

# A gate's failure: the run's error, the gate's output tail, its exit code; and, when the
# supervisor stopped it for another reason than its liveness (a cancel, a shutdown), the
# outcome that reason calls for.
Failure = tuple[str, str, int | None, Outcome]


class GateWatch(Protocol):
    """How the supervisor watches a gate's process while it runs (see Supervisor.watch_gate)."""

    def __call__(self, gate: Gate, handle: procs.ProcessHandle,
                 started_at: float) -> Callable[[], tuple[Outcome, str] | None]:
        """Watch `handle` from now; the function returned stops watching and says why the
        supervisor ended the process, if it did."""
        ...


def unwatched(gate: Gate, handle: procs.ProcessHandle,
              started_at: float) -> Callable[[], tuple[Outcome, str] | None]:
    """Only the gate's timeout applies (no supervisor at hand)."""
    return lambda: None


class GateRunner:
    def __init__(self, store: Store, clock: Callable[[], float], log_dir: Path,
                 confinement: Callable[[RoleConfig, int, tuple[Path, ...]], Confinement | None]
                 = lambda role, run_id, files: None):
        self.store = store
        self.clock = clock
        self.log_dir = log_dir
        # A gate runs the agent's code (its tests): in the agent's sandbox, or a conftest.py
        # the agent wrote would run outside it.
        self.confinement = confinement

    async def check(self, run: Run, role: RoleConfig, path: str, result: RunResult,
                    watch: GateWatch = unwatched) -> RunResult:
        """`result` (a success) if every gate of `role` passes, else the failure of the first
        gate that did not. Gates this run already passed (before a restart) are not run
        again."""
        recorded = self._recorded(run.id)
        for gate in role.gates:
            check = recorded.get(gate.name)
            if check is not None and check.passed:
                log.info("run %s: gate %r passed before a restart; not run again", run.id,
                         gate.name)
                continue
            if check is not None and check.passed is False:
                failed: Failure | None = (check.error or failure_text(gate, check.exit_code,
                                                                      False),
                                          log_tail(Path(check.log_path or "")),
                                          check.exit_code, Outcome.FAILED)
            elif check is not None:
                failed = await self._resume(gate, check, run, role, path, watch)
            else:
                failed = await self._run_gate(gate, run, role, path, watch)
            if failed is not None:
                error, tail, code, outcome = failed
                return dataclasses.replace(result, outcome=outcome, summary=None, error=error,
                                           error_tail=tail, exit_code=code)
        return result

    def _recorded(self, run_id: int) -> dict[str, GateCheck]:
        """The latest check of each gate of the run (none on its first pass)."""
        try:
            return {check.name: check for check in self.store.gates_of_run(run_id)}
        except StoreError as error:
            log.warning("run %s: could not read its gates' progress: %s", run_id, error)
            return {}

    async def _resume(self, gate: Gate, check: GateCheck, run: Run, role: RoleConfig,
                      path: str, watch: GateWatch) -> Failure | None:
        """A gate that was running when the daemon stopped: watched again if its process
        lives (or judged by its exit file if it ended meanwhile), else run again."""
        handle = None
        if check.pid is not None and check.log_path is not None:
            handle = procs.adopt(check.pid, check.pid_started_at or 0.0, Path(check.log_path))
        ended = handle.poll() if handle is not None else None  # None: it lives
        if handle is not None and (ended is None or ended.known):
            log.info("run %s: gate %r re-adopted (pid %s)", run.id, gate.name, check.pid)
            return await self._await_gate(gate, check.id, handle, run, check.started_at, watch)
        self._ended(check.id, None, False, INTERRUPTED)
        log.warning("run %s: gate %r was interrupted by a restart; running it again", run.id,
                    gate.name)
        return await self._run_gate(gate, run, role, path, watch)

    async def _run_gate(self, gate: Gate, run: Run, role: RoleConfig, path: str,
                        watch: GateWatch) -> Failure | None:
        log_path = self.log_dir / f"run-{run.id}.gate-{gate.name}.log"
        env = procs.agent_env(path, role.env, {"TASKHERD_TASK_ID": str(run.task_id),
                                               "TASKHERD_RUN_ID": str(run.id),
                                               "TASKHERD_ROLE": role.name})
        started_at = self.clock()
        argv, cwd = list(gate.argv), gate.workdir or role.workdir
        try:
            confined = self.confinement(role, run.id, (log_path,)) or Confinement()
            if confined.wrap is not None:
                procs.check_argv(argv, env, cwd)  # named now, not as the box's exit 1
            spawned = procs.spawn(confined.argv(argv, env), env=env, cwd=cwd, log_path=log_path,
                                  header={"run": run.id, "task": run.task_id, "gate": gate.name},
                                  max_log_bytes=role.max_log_bytes,
                                  open_files=confined.open_files, cgroups=confined.cgroups,
                                  copier_cgroups=confined.copier_cgroups)
        except SandboxUnavailable as error:
            error_text = f"gate {gate.name!r} not run: its role's sandbox cannot be made: {error}"
            gate_id = self._record(lambda: self.store.gate_started(
                run.id, gate.name, str(log_path), started_at))
            self._ended(gate_id, None, False, error_text)
            return error_text, str(error), None, Outcome.BLOCKED
        except (OSError, ValueError) as error:
            error_text = f"{failure_text(gate, None, False)}: {error}"
            gate_id = self._record(lambda: self.store.gate_started(
                run.id, gate.name, str(log_path), started_at))
            self._ended(gate_id, None, False, error_text)
            return error_text, str(error), None, Outcome.FAILED
        # Recorded with its process: a restart from here on finds it again.
        gate_id = self._record(lambda: self.store.gate_started(
            run.id, gate.name, str(log_path), started_at, pid=spawned.pid,
            pid_started_at=spawned.started_at))
        log.info("run %s: gate %r started as pid %s", run.id, gate.name, spawned.pid)
        return await self._await_gate(gate, gate_id, spawned.handle, run, started_at, watch)

    async def _await_gate(self, gate: Gate, gate_id: int | None,
                          handle: procs.ProcessHandle, run: Run, started_at: float,
                          watch: GateWatch) -> Failure | None:
        """Wait for the gate's process to end, within what is left of its timeout, while the
        supervisor watches it; then record and word how it ended."""
        stopped_by = watch(gate, handle, started_at)
        timed_out = False
        try:
            left = max(started_at + gate.timeout - self.clock(), 0.0)
            async with asyncio.timeout(left):  # not wait_for: see services/runner.py
                status = await handle.wait_exit()
        except TimeoutError:
            timed_out = True
            status = await handle.terminate(KILL_GRACE)
        finally:
            stopped = stopped_by()
        passed = not timed_out and stopped is None and status.code == 0
        outcome = Outcome.FAILED
        error_text = None
        if not passed:
            reason = None
            if stopped is not None:
                outcome = Outcome.FAILED if stopped[0] is Outcome.STALLED else stopped[0]
                reason = stopped[1]
            error_text = failure_text(gate, status.code, timed_out, reason)
        self._ended(gate_id, status.code, passed, error_text)
        log.info("run %s: gate %r %s", run.id, gate.name, "passed" if passed else error_text)
        if error_text is None:  # passed
            return None
        return error_text, log_tail(handle.log_path), status.code, outcome

    def _record(self, write: Callable[[], int]) -> int | None:
        try:
            return write()
        except StoreError as error:  # the check still decides; only its record is missing
            log.warning("could not record a gate check: %s", error)
            return None

    def _ended(self, gate_id: int | None, code: int | None, passed: bool,
               error: str | None) -> None:
        if gate_id is None:
            return
        try:
            self.store.gate_ended(gate_id, self.clock(), exit_code=code, passed=passed,
                                  error=error)
        except StoreError as error_:
            log.warning("could not record the end of gate check %s: %s", gate_id, error_)


def log_tail(path: Path) -> str:
    """The last lines a gate wrote (without the supervisor's header line)."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, 2)
            file.seek(max(size - TAIL_BYTES, 0))
            text = file.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if not line.startswith("# taskherd ")]
    return "\n".join(lines[-TAIL_LINES:])
