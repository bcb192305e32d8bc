"""Settles the store could not take when a run ended: kept, with the result judged then, and
written at the supervisor's next passes, so no run's end is lost nor judged a second time.

A settle fails for the machine's reasons: the database away, or its disk full ("database or
disk is full", which SQLite may answer even while the run's own files were written). The run
stays open meanwhile; a node that sweeps its open runs leaves these alone, since judging the
run again from its files after the fault is gone would blame the agent for it (a shim that
could not write its exit status on a full disk reads as a crash once space is back).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from taskherd.model import Run, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimAttempt, ClaimRequest
from taskherd.store import Store, StoreError, StoreUnavailable

log = logging.getLogger("taskherd.supervisor")


@dataclass(frozen=True)
class _Pending:
    run: Run
    result: RunResult
    ended_at: float


class PendingSettles:
    def __init__(self, store: Store, policy_for: Callable[[str], RetryPolicy],
                 on_fault: Callable[[StoreError], None] = lambda error: None):
        self.store = store
        self.policy_for = policy_for
        self.on_fault = on_fault  # told of each refusal that may pass (the disk pause)
        self._pending: dict[int, _Pending] = {}

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._pending

    def __len__(self) -> int:
        return len(self._pending)

    def settle(self, run: Run, result: RunResult, ended_at: float) -> bool:
        """End `run` with `result` now, or keep it for a later pass when the store cannot
        take it for now; False unless it was written."""
        return self._write(run, result, ended_at, None) is not None

    def settle_and_claim(self, run: Run, result: RunResult, ended_at: float,
                         request: ClaimRequest) -> ClaimAttempt | None:
        """`settle`, with the node's next claim (`request`) made in the same call
        (`Store.finish_run_and_claim`): what the claim came back with, or None when the end
        was not written (kept, or dropped, as `settle` does), and then nothing was claimed."""
        return self._write(run, result, ended_at, request)

    def _write(self, run: Run, result: RunResult, ended_at: float,
               request: ClaimRequest | None) -> ClaimAttempt | None:
        policy = self.policy_for(run.role)
        try:
            if request is None:
                self.store.finish_run(run.id, result, policy, ended_at)
                attempt = ClaimAttempt(None)
            else:
                _, attempt = self.store.finish_run_and_claim(run.id, result, policy, ended_at,
                                                             request)
        except StoreUnavailable as error:
            if run.id not in self._pending:
                log.warning("run %s could not be settled (%s): kept as %s, tried again each "
                            "pass", run.id, error, result.outcome.value)
            self._pending[run.id] = _Pending(run, result, ended_at)
            self.on_fault(error)
            return None
        except StoreError as error:  # ended meanwhile (a rescue), or gone: nothing to keep
            log.warning("run %s could not be settled: %s", run.id, error)
            self._pending.pop(run.id, None)
            return None
        if self._pending.pop(run.id, None) is not None:
            log.info("run %s settled as %s, late", run.id, result.outcome.value)
        return attempt

    def retry(self) -> int:
        """Try every kept settle again, oldest first; how many were written. The first that
        the store still refuses ends the pass: the rest would meet the same refusal."""
        settled = 0
        for pending in list(self._pending.values()):
            if self.settle(pending.run, pending.result, pending.ended_at):
                settled += 1
            elif pending.run.id in self._pending:
                break
        return settled
