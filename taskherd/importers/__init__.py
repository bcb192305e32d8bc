"""Schedules people already run, read into taskherd jobs and roles: one module per source
(openclaw, launchd, crontab, systemd), each a pure parse of the file's bytes into
`model.Imported`. Nothing here reads the clock, the store, or runs what it reads."""

from __future__ import annotations

from taskherd.importers.model import Dropped, Imported, ImportedJob, ImportedRole, ImportError_

SOURCES = ("openclaw", "launchd", "crontab", "systemd")

__all__ = ["SOURCES", "Dropped", "ImportError_", "Imported", "ImportedJob", "ImportedRole"]
