"""One backup: snapshot, compress, upload. The daemon runs it in a process of its own
(`python -m taskherd.backups.worker`, JSON in on stdin, JSON out on stdout), at a lower CPU
priority: compressing and uploading a large database then never competes with the daemon's
event loop for its interpreter lock, and the scheduler gives agents and dispatching the CPU
first on a busy machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from taskherd.backups.archive import backup_key, make_archive
from taskherd.backups.targets import BackupError, Progress, open_target
from taskherd.model.settings import BackupConfig

NICENESS = 10


def snapshot_and_store(database: str, settings: BackupConfig, kinds: list[str], now: float,
                       workdir: Path, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Snapshot the database into `workdir` and store it once for each of `kinds`; what was
    stored (key, sizes, checksum, seconds spent)."""
    target = open_target(settings)
    started = time.monotonic()
    archive = make_archive(database, workdir, settings.compression_level)
    packed = time.monotonic()
    stored = []
    for kind in kinds:
        key = backup_key(kind, now, archive.suffix)
        target.put(key, archive.path, archive.sha256, progress)
        stored.append({"kind": kind, "key": key, "taken_at": now, "bytes": archive.size,
                       "database_bytes": archive.database_size, "sha256": archive.sha256,
                       "target": target.name,
                       "seconds": {"snapshot": round(packed - started, 3),
                                   "upload": round(time.monotonic() - packed, 3)}})
    return stored


def run_worker(database: str, settings: BackupConfig, kinds: list[str], now: float,
               workdir: Path, started: Callable[[subprocess.Popen], None] | None = None
               ) -> list[dict[str, Any]]:
    """`snapshot_and_store` in a process of its own; its failure as a BackupError."""
    request = {"database": database, "backup": asdict(settings), "kinds": kinds, "now": now,
               "workdir": str(workdir)}
    worker = subprocess.Popen([sys.executable, "-m", "taskherd.backups.worker"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, errors="replace")
    if started is not None:
        started(worker)
    out, err = worker.communicate(json.dumps(request))
    try:
        answer = json.loads(out)
    except ValueError:
        raise BackupError(f"the backup worker ended ({worker.returncode}) without an answer: "
                          f"{err.strip()[-500:]}") from None
    if "error" in answer:
        raise BackupError(answer["error"])
    return answer["stored"]


def main() -> int:
    os.nice(NICENESS)
    request = json.load(sys.stdin)
    try:
        stored = snapshot_and_store(request["database"], BackupConfig(**request["backup"]),
                                    request["kinds"], request["now"], Path(request["workdir"]))
    except (BackupError, OSError) as error:
        json.dump({"error": str(error)}, sys.stdout)
        return 1
    json.dump({"stored": stored}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
