"""Durable storage of tasks and runs: one interface (`Store`), one implementation per dialect."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from taskherd.model import Event, EventKind, Finished
from taskherd.store.base import (
    Enqueued,
    PolicyLookup,
    RunNotFound,
    StateCount,
    Store,
    StoreError,
    StoreUnavailable,
    TaskNotFound,
    TransitionRefused,
)
from taskherd.store.errors import StoreDiskFull

if TYPE_CHECKING:
    from taskherd.policy.chains import Workflow
from taskherd.model.jobs import Job, JobDefinition, JobFire
from taskherd.store.jobs import JobNotFound, JobRefused, JobStore

__all__ = [
    "Enqueued",
    "Event",
    "EventKind",
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
    "StoreDiskFull",
    "StoreError",
    "StoreUnavailable",
    "TaskNotFound",
    "TransitionRefused",
    "advice",
    "node_lock_path",
    "open_store",
    "shown",
]


def open_store(database: str, *, durability: str = "full", autocheckpoint: bool = True,
               workflow: Workflow | None = None, busy_timeout: float | None = None) -> Store:
    """Open the store a `[daemon] database` setting names: a file path (SQLite) or a URL.

    `workflow` is the config's (`policy.chains.workflow_of`): the roles' default chains,
    reviewers and depth limit, which the store applies when a task settles. Without it, only
    the chains tasks declared themselves are followed. `busy_timeout`: how long a SQLite call
    waits for another process's write lock (the store's default unless given).
    """
    from taskherd.store.urls import is_postgres_url

    if is_postgres_url(database):
        from taskherd.store.postgres import PostgresStore

        # The WAL is PostgreSQL's to checkpoint: `autocheckpoint` concerns SQLite only.
        store: Store = PostgresStore(database, durability=durability)
    else:
        from taskherd.store.sqlite import SQLiteStore

        waits = {} if busy_timeout is None else {"busy_timeout": busy_timeout}
        store = SQLiteStore(database, durability=durability, autocheckpoint=autocheckpoint,
                            **waits)
    if workflow is not None:
        store.workflow = workflow  # type: ignore[attr-defined]
    return store


def advice(database: str) -> tuple[str, str]:
    """What to check when the database named cannot be opened, and when it cannot be written."""
    from taskherd.store.urls import is_postgres_url

    if is_postgres_url(database):
        return ("check the URL, that the server runs, and that it lets this host and role in",
                "grant the role SELECT, INSERT, UPDATE and DELETE on taskherd's tables")
    return ("check the folder's owner and permissions, or set daemon.database",
            "check the file's owner and permissions")


def node_lock_path(database: str, data_dir: Path, node: str) -> Path:
    """The file whose lock makes a daemon the only one of `node` for `database` on this host:
    beside a SQLite file (one per database and node, whatever the data dir); in the data dir
    for a PostgreSQL URL, where the store's `hold_node` also keeps out other hosts."""
    from taskherd.store.urls import is_postgres_url

    if is_postgres_url(database):
        return data_dir / f"node-{node}.lock"
    return Path(f"{database}.{node}.lock")


def shown(database: str) -> str:
    """The `database` setting as logs and messages may show it: a URL loses its password."""
    from taskherd.store.urls import is_postgres_url, redact

    return redact(database) if is_postgres_url(database) else database
