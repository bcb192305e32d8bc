"""What the backup service last did, in a small file of the data dir: `status` and `doctor`
read it without a call to the target, and a restarted daemon keeps its schedule.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

STATE_FILE = "backup-state.json"


@dataclass
class BackupState:
    last_snapshot: dict[str, Any] | None = None  # key, taken_at, bytes, database_bytes
    last_rollup: dict[str, Any] | None = None
    last_failure: dict[str, Any] | None = None  # at, error
    failures_in_a_row: int = 0
    retry_at: float | None = None
    uploaded: int = 0  # backups stored since the file was started
    pruned: int = 0

    @property
    def failing(self) -> bool:
        return self.failures_in_a_row > 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def state_path(data_dir: Path) -> Path:
    return data_dir / STATE_FILE


def read_state(data_dir: Path) -> BackupState:
    try:
        raw = json.loads(state_path(data_dir).read_text())
        known = set(BackupState.__dataclass_fields__)
        return BackupState(**{key: value for key, value in raw.items() if key in known})
    except (OSError, ValueError, TypeError):
        return BackupState()  # none yet, or unreadable: the next backup writes it anew


def write_state(data_dir: Path, state: BackupState) -> None:
    """Replace the file whole (a reader never sees half of it), readable by its owner only."""
    path = state_path(data_dir)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(state.to_dict(), out)
    os.replace(partial, path)
