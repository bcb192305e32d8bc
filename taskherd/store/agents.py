"""The agents registry's store interface: agents registered from outside (they work through
the API or MCP and are not spawned by taskherd), and each role's latest runs."""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from typing import Any

from taskherd.model import Run, row_fields
from taskherd.model.record import Record


class RegisteredAgent(Record):
    name: str
    runtime: str | None
    capabilities: tuple[str, ...]
    description: str | None
    registered_at: float
    last_seen_at: float

    @classmethod
    def from_row(cls, row: Any) -> RegisteredAgent:
        data = row_fields(row)
        data["capabilities"] = tuple(json.loads(data["capabilities"] or "[]"))
        return cls(**data)


class AgentStore(abc.ABC):
    @abc.abstractmethod
    def register_agent(self, name: str, now: float, *, runtime: str | None = None,
                       capabilities: Sequence[str] = (),
                       description: str | None = None) -> RegisteredAgent:
        """Record (or update, and mark seen) an agent taskherd does not spawn."""

    @abc.abstractmethod
    def list_agents(self) -> list[RegisteredAgent]: ...

    @abc.abstractmethod
    def latest_run_of_role(self, role: str, *, ended: bool = False) -> Run | None:
        """The role's newest run (`ended`: its newest ended run)."""
