"""The operations: one function per action a person (or a program) can take on the queue.

Every door (the CLI, the Python API, later the HTTP API and the MCP server) calls these and
nothing else, so a rule written here holds at every door. Each takes an open `Queue` and the
moment `now` (the door reads the clock), validates its input (`BadInput` names the field, the
value and what would be accepted), and calls the store. The store's own refusals pass through:
`TransitionRefused`/`StoreError` (the queue says no) and `TaskNotFound` (no such task).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Self

from taskherd.model.record import Record

if TYPE_CHECKING:
    from taskherd.model.settings import Config
    from taskherd.store import Store


class BadInput(ValueError):
    """Input an operation refuses: the message names the field, the value and what is
    accepted. Nothing was changed."""


class Queue(Record):
    """A config and the store it names, open together. Close it (or use `with`) when done."""

    config: Config
    store: Store

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_queue(config: Config | str | os.PathLike[str] | None = None) -> Queue:
    """Open the queue a config names: a loaded `Config`, a path to a taskherd.toml, or None
    to find one as the CLI does ($TASKHERD_CONFIG, else the nearest taskherd.toml, else
    defaults). A config that does not load raises `BadInput`; a database that cannot be
    opened raises `StoreError`."""
    from taskherd.config import load_config
    from taskherd.model.settings import Config, ConfigError
    from taskherd.policy.chains import workflow_of
    from taskherd.store import open_store

    if not isinstance(config, Config):
        try:
            config = load_config(config)
        except ConfigError as error:
            raise BadInput(str(error)) from error
    store = open_store(config.daemon.database, durability=config.daemon.durability,
                       workflow=workflow_of(config))
    return Queue(config, store)
