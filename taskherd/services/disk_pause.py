"""This node's pause for its disk: a full disk is the machine's fault, not the agent's.

Below the free-space floor ([daemon] min_free_disk) on the data dir, the log dir or the SQLite
database's folder, or after a disk fault met while starting, watching or settling a run
(ENOSPC, EDQUOT, EROFS: `faults.py`), the node starts nothing new. The dispatcher asks
`check` at each pass, so the pause lifts by itself in the first pass that finds room again;
a pause begun by a fault lifts once a probe write goes through, and not before a hold that
doubles with each fault in a row, so a fault met where no probe reaches (an agent's workdir
on another disk) cannot make the node claim and release in a loop. A fault the free-space
readings explained (they found the disk short since) holds no longer than the shortage: once
they find room, the probe is tried at once.

The pause is on the node's record (`paused_at`, `paused_reason`), where `taskherd status`,
`doctor` and the board read it from any process, and its start and end tell every role's
delivery targets (`node_paused`, `node_resumed`), once each. Writing it may fail while the
database's own disk is full: it is tried again at the next pass, the pause holds meanwhile.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from taskherd.host.diskspace import READINGS_KEPT, FreeSpace, probe
from taskherd.model import RunResult
from taskherd.model.delivery import NODE_PAUSED, NODE_RESUMED
from taskherd.model.settings import FLEET, Config, DaemonConfig
from taskherd.policy import faults
from taskherd.store import Store, StoreError
from taskherd.store.urls import is_postgres_url

log = logging.getLogger("taskherd.dispatcher")
FAULT_HOLD = 1.0  # seconds the first pause a fault begins holds, before any probe
FAULT_HOLD_CAP = 60.0  # ...doubling with each fault in a row up to this
FAULTS_FORGOTTEN = 600.0  # a fault this long after the last one starts the doubling over


class DiskPause:
    """Whether this node may start runs as far as its disk goes, and why not; shared by the
    dispatcher (`check`, each pass) and the supervisor (`met`, `judge_end`)."""

    def __init__(self, store: Store, config_of: Callable[[], Config],
                 space: FreeSpace | None = None):
        self.store = store
        self.config_of = config_of  # the config as last reloaded
        self.space = space or FreeSpace()
        self.reason: str | None = None  # why nothing starts, as the last check found
        self._fault: str | None = None  # a fault met, not yet shown gone by a probe
        self._hold_until = -math.inf
        self._faults_in_row = 0
        self._last_fault_at = -math.inf
        self._fault_explained = False  # the readings found the disk short since the fault
        self._recorded: bool | None = None  # the store holds the pause (None: not known yet)
        self._unrecorded_said = False
        self._folders: tuple[DaemonConfig, list[Path]] | None = None

    @property
    def faulted(self) -> bool:
        """A disk fault was met and no probe has shown it gone yet."""
        return self._fault is not None

    def folders(self) -> list[Path]:
        daemon = self.config_of().daemon
        if self._folders is None or self._folders[0] is not daemon:  # (a reload)
            self._folders = (daemon, node_folders(daemon))
        return self._folders[1]

    def short(self, now: float, keep: float = 0.0) -> str | None:
        """Why the disk takes nothing more now: read-only, full or below the floor, or a
        fault met and not yet probed away. None when it has room. `keep`: readings this old
        will do."""
        floor = self.config_of().daemon.min_free_disk
        reason = faults.disk_short(self.space.readings(self.folders(), now, keep), floor)
        if reason is not None and self._fault is not None:
            self._fault_explained = True
        if reason is None and self._fault is not None:
            reason = self._probed(now)
        return reason

    def check(self, now: float) -> str | None:
        """Each dispatcher pass: why this node may start nothing now (None: it may), with
        the pause's start or end put on record and told, once. While the disk has room the
        readings of the last READINGS_KEPT serve (a pass after each event, several a task
        on a busy node); a paused node reads at every pass, to start again at the first
        that finds room."""
        reason = self.short(now, READINGS_KEPT if self.reason is None and self._fault is None
                            else 0.0)
        node = self.config_of().daemon.node
        if reason is not None and self.reason is None:
            log.warning("node %s starts nothing new: %s", node, reason)
        elif reason is None and self.reason is not None:
            log.info("node %s starts runs again: its disk has room (paused for: %s)",
                     node, self.reason)
        self.reason = reason
        self._record(reason, now)
        return reason

    def met(self, error: BaseException, now: float) -> str:
        """A disk fault met while starting, watching or settling a run: the node starts
        nothing new until a probe shows the disk taking writes again. Its text."""
        text = faults.fault_text(error)
        if now - self._last_fault_at > FAULTS_FORGOTTEN:
            self._faults_in_row = 0
        self._faults_in_row += 1
        self._last_fault_at = now
        hold = min(FAULT_HOLD * 2 ** (self._faults_in_row - 1), FAULT_HOLD_CAP)
        self._hold_until = now + hold
        self._fault_explained = False
        if self._fault is None:
            log.warning("node %s met a disk fault: %s; starting nothing new until a probe "
                        "write goes through", self.config_of().daemon.node, text)
        self._fault = text
        return text

    def judge_end(self, result: RunResult, report: str | None, now: float) -> RunResult:
        """A run's end as the machine's fault when its disk was full or below the floor as
        it ended and the agent did not say it failed (`faults.fault_at_end`): no strike."""
        if result.outcome not in faults.DISK_CAUSED or result.fault is not None:
            return result  # (no look at the disk for the many runs that succeed)
        short = self.short(now)
        fault = faults.fault_at_end(result.outcome, report, short)
        if fault is None:
            return result
        error = f"{result.error or result.outcome.value}; the disk was short as it ended " \
                f"({short}): not the agent's fault, no strike"
        return replace(result, error=error, fault=fault)

    def _probed(self, now: float) -> str | None:
        if now < self._hold_until and not self._fault_explained:
            return self._fault
        said = probe(self.folders())
        if said is None:
            log.info("node %s: a probe write went through after a disk fault (%s)",
                     self.config_of().daemon.node, self._fault)
        self._fault = said
        return said

    def _record(self, reason: str | None, now: float) -> None:
        """The pause on the node's record, begun or ended once; a write the store refuses
        (its own disk full) is tried again at the next pass."""
        if (reason is not None) == self._recorded:
            return
        config = self.config_of()
        node = config.daemon.node
        try:
            if reason is not None:
                self.store.pause_node(node, reason, _targets(config, NODE_PAUSED), now)
            else:
                self.store.resume_node(node, _targets(config, NODE_RESUMED), now)
        except StoreError as error:
            if not self._unrecorded_said:
                log.warning("node %s: its pause could not be %s on its record (tried again "
                            "each pass): %s", node, "put" if reason else "lifted", error)
                self._unrecorded_said = True
            return
        self._recorded, self._unrecorded_said = reason is not None, False


def node_folders(daemon: DaemonConfig) -> list[Path]:
    """Where the node writes: its data dir, its log dir and its SQLite database's folder."""
    folders = [daemon.data_dir, daemon.log_dir]
    if not is_postgres_url(daemon.database):
        folders.append(Path(daemon.database).parent)
    return list(dict.fromkeys(folders))


def _targets(config: Config, event: str) -> list[str]:
    """Every role's delivery aliases whose `on` names `event` (node_paused is among the
    defaults), each once: as for the fleet's budget, a node's pause holds back every role."""
    from taskherd.ops.budget import budget_targets

    return budget_targets(config, FLEET, event)
