"""The operations: one function per action a person or an agent can take; every door calls them."""

from __future__ import annotations

from dataclasses import dataclass

from taskherd.config import Config
from taskherd.store import Store


class BadInput(ValueError):
    """A request that names a field with a value that is not accepted: nothing was changed."""


@dataclass(frozen=True)
class Queue:
    config: Config
    store: Store
