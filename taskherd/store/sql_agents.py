"""The agents registry over named SQL (`store/sql/common/agents.sql`); mixed into `SQLStore`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.model import Run
from taskherd.store.agents import AgentStore, RegisteredAgent

if TYPE_CHECKING:
    from taskherd.store.connection import Connection


class SQLAgents(AgentStore):
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...

    def register_agent(self, name: str, now: float, *, runtime: str | None = None,
                       capabilities: Sequence[str] = (),
                       description: str | None = None) -> RegisteredAgent:
        params = {"name": name, "runtime": runtime, "capabilities": json.dumps(list(capabilities)),
                  "description": description, "now": now}
        with self._write() as db:
            return RegisteredAgent.from_row(
                db.execute(self.q["register_agent"], params).fetchall()[0])

    def list_agents(self) -> list[RegisteredAgent]:
        return [RegisteredAgent.from_row(row) for row in self._all("list_agents")]

    def latest_run_of_role(self, role: str, *, ended: bool = False) -> Run | None:
        name = "latest_ended_run_of_role" if ended else "latest_run_of_role"
        rows = self._all(name, {"role": role})
        return Run.from_row(rows[0]) if rows else None
