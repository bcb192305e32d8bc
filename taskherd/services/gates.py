"""Quality gates at work: after an agent reports success, its role's gates run one after the
other as supervised processes (own session, own log, a timeout), and only if all pass does
the run succeed. The first to fail makes the run `failed`, naming the gate, with the gate's
output tail kept for the next attempt's prompt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from taskherd import procs
from taskherd.config import RoleConfig
from taskherd.gates import Gate, failure_text
from taskherd.model import Outcome, Run, RunResult
from taskherd.store import Store, StoreError

log = logging.getLogger("taskherd.gates")
KILL_GRACE = 5.0
TAIL_LINES = 40
TAIL_BYTES = 64 * 1024


class GateRunner:
    def __init__(self, store: Store, clock: Callable[[], float], log_dir: Path):
        self.store = store
        self.clock = clock
        self.log_dir = log_dir

    async def check(self, run: Run, role: RoleConfig, path: str,
                    result: RunResult) -> RunResult:
        """`result` (a success) if every gate of `role` passes, else the failure of the first
        gate that did not."""
        for gate in role.gates:
            failed = await self._run_gate(gate, run, role, path)
            if failed is not None:
                return dataclasses.replace(
                    result, outcome=Outcome.FAILED, summary=None, error=failed[0],
                    error_tail=failed[1], exit_code=failed[2])
        return result

    async def _run_gate(self, gate: Gate, run: Run, role: RoleConfig,
                        path: str) -> tuple[str, str, int | None] | None:
        log_path = self.log_dir / f"run-{run.id}.gate-{gate.name}.log"
        gate_id = self._record(lambda: self.store.gate_started(run.id, gate.name, str(log_path),
                                                                self.clock()))
        env = procs.agent_env(path, role.env, {"TASKHERD_TASK_ID": str(run.task_id),
                                               "TASKHERD_RUN_ID": str(run.id),
                                               "TASKHERD_ROLE": role.name})
        try:
            spawned = procs.spawn(list(gate.argv), env=env, cwd=gate.workdir or role.workdir,
                                  log_path=log_path,
                                  header={"run": run.id, "task": run.task_id, "gate": gate.name})
        except (OSError, ValueError) as error:
            error_text = f"{failure_text(gate, None, False)}: {error}"
            self._ended(gate_id, None, False, error_text)
            return error_text, str(error), None
        log.info("run %s: gate %r started as pid %s", run.id, gate.name, spawned.pid)
        timed_out = False
        try:
            async with asyncio.timeout(gate.timeout):  # not wait_for: see services/runner.py
                status = await spawned.handle.wait_exit()
        except TimeoutError:
            timed_out = True
            status = await spawned.handle.terminate(KILL_GRACE)
        passed = not timed_out and status.code == 0
        error_text = None if passed else failure_text(gate, status.code, timed_out)
        self._ended(gate_id, status.code, passed, error_text)
        log.info("run %s: gate %r %s", run.id, gate.name, "passed" if passed else error_text)
        if passed:
            return None
        return error_text, log_tail(log_path), status.code  # type: ignore[return-value]

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
