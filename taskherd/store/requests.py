"""Agent requests a daemon may be asked twice.

An agent's command tries again while no daemon answers (`agent_door.call`), with the same
request id each try; the daemon that applied the first try may have died before it could
answer. A request that makes something (a child task, messages, a memory entry, a review's
verdict) passes its `RequestKey` to the store method that makes it, which notes what it made
in the same transaction (`agent_requests`); a second try finds the note (`request_made`) and
answers from it, making nothing again. Requests that only set something (a heartbeat, a
report) are the same whether applied once or twice, and need no note.
"""

from __future__ import annotations

import abc
from typing import Any

from taskherd.model.record import Record


class RequestKey(Record):
    """One request of a run's agent, however many times it is tried."""

    run_id: int
    request_id: str


class RequestStore(abc.ABC):
    @abc.abstractmethod
    def request_made(self, key: RequestKey) -> dict[str, Any] | None:
        """The ids of what the request of `key` made, as its transaction noted them (e.g.
        {"task": 7, "created": true}); None when no try of it has made anything."""
