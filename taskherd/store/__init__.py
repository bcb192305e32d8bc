"""Durable storage of tasks and runs: one interface (`Store`), one implementation per dialect."""

from __future__ import annotations

from taskherd.store.base import (
    Enqueued,
    Finished,
    PolicyLookup,
    RunNotFound,
    StateCount,
    Store,
    StoreError,
    StoreUnavailable,
    TaskNotFound,
    TransitionRefused,
)
from taskherd.store.jobs import Job, JobDefinition, JobFire, JobNotFound, JobRefused, JobStore

__all__ = [
    "Enqueued",
    "Finished",
    "Job",
    "JobDefinition",
    "JobFire",
    "JobNotFound",
    "JobRefused",
    "JobStore",
    "PolicyLookup",
    "RunNotFound",
    "StateCount",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TaskNotFound",
    "TransitionRefused",
    "open_store",
    "shown",
]


def open_store(database: str, *, durability: str = "full", autocheckpoint: bool = True) -> Store:
    """Open the store a `[daemon] database` setting names: a file path (SQLite) or a URL."""
    from taskherd.store.postgres import PostgresStore, is_postgres_url
    from taskherd.store.sqlite import SQLiteStore

    if is_postgres_url(database):
        # The WAL is PostgreSQL's to checkpoint: `autocheckpoint` concerns SQLite only.
        return PostgresStore(database, durability=durability)

    return SQLiteStore(database, durability=durability, autocheckpoint=autocheckpoint)


def shown(database: str) -> str:
    """The `database` setting as logs and messages may show it: a URL loses its password."""
    from taskherd.store.postgres import is_postgres_url, redact

    return redact(database) if is_postgres_url(database) else database
