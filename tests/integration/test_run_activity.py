"""A run's last activity includes its output: an agent that writes to its log but never
calls `taskherd heartbeat` is neither shown idle since its spawn nor called stale."""

from __future__ import annotations

import os
from pathlib import Path

from taskherd import open_queue
from taskherd.model import NewTask
from taskherd.ops import runs as run_ops
from taskherd.policy.admission import ClaimRequest

NOW = 1_800_000_000.0


def test_output_written_is_activity_and_keeps_a_run_from_reading_stale(tmp_path: Path):
    config = tmp_path / "taskherd.toml"
    config.write_text(f'[daemon]\ndatabase = "{tmp_path / "q.db"}"\n'
                      f'data_dir = "{tmp_path / "data"}"\n'
                      '[roles.coder]\ncommand = ["true"]\nidle_timeout = "10m"\n')
    log = tmp_path / "run.log"
    log.write_text("working\n")
    with open_queue(config) as queue:
        store = queue.store
        store.enqueue(NewTask(role="coder", title="t"), NOW)
        claim = store.claim(ClaimRequest("n1", NOW, 3600.0))
        store.mark_spawned(claim.run.id, NOW, 3600.0, pid=os.getpid(),
                           pid_started_at=None, log_path=str(log))
        os.utime(log, (NOW + 1500, NOW + 1500))  # its output, 25 min after the spawn
        [run] = store.open_runs()

        assert run_ops.last_activity(run) == NOW + 1500
        assert run_ops.stale_runs(queue, NOW + 1600) == []
        [(stale, why)] = run_ops.stale_runs(queue, NOW + 1500 + 601)
        assert stale.id == run.id and why == "no heartbeat or progress for 601s"

        log.unlink()  # on another node's disk: only what the store recorded
        assert run_ops.last_activity(run) == NOW
