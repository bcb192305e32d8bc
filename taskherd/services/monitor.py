"""The monitor: leases, the node's heartbeat, rescues, the board's counters and pruning. WAL
checkpoints are their own service (`services.checkpoints`), run in a worker thread since they
wait on the disk.

Every node watches every other: one silent for its node_timeout is declared down here and its
runs rescued at once (`lost`, no strike), so its tasks move to a live node within seconds.

Each `run_once(now)` does what is due and returns counts; the daemon's loop is thin.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from taskherd.model import Outcome, RunResult
from taskherd.model.settings import Config
from taskherd.services.live_runs import LiveRuns
from taskherd.store import Store

log = logging.getLogger("taskherd.monitor")
HEARTBEATS_PER_TIMEOUT = 5
# Leases renewed in one write at most: a pass that renews a full batch is followed by another
# at once, so any number of leases is renewed in time without one long write.
RENEW_BATCH = 100


@dataclass(frozen=True)
class MonitorSettings:
    interval: float = 1.0  # seconds between two passes
    prune_every: float = 3600.0
    # The board reads what finished since the last roll-up row by row: a few seconds' worth.
    roll_up_every: float = 10.0


class Monitor:
    def __init__(self, config: Config, store: Store, live: LiveRuns,
                 settings: MonitorSettings = MonitorSettings()):
        self.config = config
        self.store = store
        self.live = live
        self.settings = settings
        self._renewing = False  # the last pass renewed a full batch: more may be due
        self._last_heartbeat = float("-inf")
        self._last_prune = float("-inf")
        self._last_roll_up = float("-inf")

    def next_wake(self, now: float) -> float:
        return now if self._renewing else now + self.settings.interval

    def run_once(self, now: float) -> dict[str, int]:
        daemon = self.config.daemon
        counts = {"renewed": 0, "rescued": 0, "never_spawned": 0, "pruned": 0,
                  "nodes_down": 0}
        # Renew well before expiry (each lease a third of the way through): a lease that
        # lapses while its agent works invites a rescue and a second run of the same task.
        counts["renewed"] = self.store.renew_due_leases(daemon.node, now, daemon.lease,
                                                        RENEW_BATCH)
        self._renewing = counts["renewed"] >= RENEW_BATCH
        # The node's own heartbeat, several within its node_timeout: a late one or two must
        # not get a live node declared down by the others.
        if now - self._last_heartbeat >= daemon.node_timeout / HEARTBEATS_PER_TIMEOUT:
            self._heartbeat(now)
        counts["nodes_down"] = self._rescue_down_nodes(now)
        counts["never_spawned"] = self._rescue_never_spawned(now)
        rescued = self.store.rescue_expired(now, self.config.policy_for)
        for finished in rescued:
            log.warning("task %s: lease of node %s expired; back to %s", finished.task.id,
                        finished.run.node, finished.task.state.value)
        counts["rescued"] = len(rescued)
        if now - self._last_roll_up >= self.settings.roll_up_every:
            counts["rolled_up"] = self.store.roll_up(now)
            self._last_roll_up = now
        if now - self._last_prune >= self.settings.prune_every:
            counts["pruned"] = self.store.prune(before=now - daemon.retention)
            counts["logs_pruned"] = self._prune_logs(before=now - daemon.retention)
            self._last_prune = now
        return counts

    def _heartbeat(self, now: float) -> None:
        daemon = self.config.daemon
        before = self.store.node_seen(daemon.node, now, running=len(self.live),
                                      roles=self.config.runnable_roles, tags=daemon.tags)
        self._last_heartbeat = now
        if before is not None and before.down_at is not None:
            log.warning("this node was declared down by %s (silent for more than %gs): its "
                        "runs were rescued, and their agents here are being stopped",
                        before.down_by, daemon.node_timeout)

    def _rescue_down_nodes(self, now: float) -> int:
        declared = self.store.rescue_down_nodes(self.config.daemon.node, now,
                                                self.config.policy_for)
        for down in declared:
            log.warning("node %s silent since %.1fs: declared down, %s task(s) rescued (%s)",
                        down.node.name, now - down.node.last_seen, len(down.rescued),
                        ", ".join(str(f.task.id) for f in down.rescued) or "none")
        return len(declared)

    def _prune_logs(self, before: float) -> int:
        """Delete run files (log, exit status, prompt) untouched since `before`.

        A live agent keeps writing its log, and the open runs are skipped by name, so only
        the files of long-finished runs go, as their rows do.
        """
        open_runs = {f"run-{run_id}" for run_id in self.store.open_run_ids(self.config.daemon.node)}
        removed = 0
        for path in self.config.daemon.log_dir.glob("run-*"):
            if path.name.split(".")[0] in open_runs:
                continue
            try:
                if path.stat().st_mtime < before:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed

    def _rescue_never_spawned(self, now: float) -> int:
        """Claimed on this node but no process recorded, and nobody is starting one.
        (A spawned run nobody watches is the supervisor's: it adopts it again.)"""
        rescued = 0
        # Ids of the unspawned only (an index's few rows), whole runs only for those: a
        # thousand running agents must not cost a thousand rows a second.
        unspawned = [run_id for run_id in self.store.unspawned_run_ids(self.config.daemon.node)
                     if run_id not in self.live]
        for run_id in unspawned:
            run = self.store.get_run(run_id)
            if run.ended_at is not None or run.spawned_at is not None:
                continue
            if now - run.claimed_at < self.config.role(run.role).spawn_timeout:
                continue
            result = RunResult(Outcome.LOST, error="claimed but never spawned")
            self.store.finish_run(run.id, result, self.config.policy_for(run.role), now)
            rescued += 1
        return rescued
