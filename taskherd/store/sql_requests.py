"""Agent requests a daemon may be asked twice, over named SQL (`store/sql/common/requests.sql`);
mixed into `SQLStore`. Why: `store/requests.py`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskherd.store.requests import RequestKey, RequestStore

if TYPE_CHECKING:
    from taskherd.store.connection import Connection


class SQLRequests(RequestStore):
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...

    def request_made(self, key: RequestKey) -> dict[str, Any] | None:
        rows = self._all("request_made", {"run_id": key.run_id, "request_id": key.request_id})
        return json.loads(rows[0]["made"]) if rows else None

    def _note_request(self, db: Connection, key: RequestKey | None, made: dict[str, Any]) -> None:
        """Inside the transaction that made `made`: note it as the work of `key`'s request."""
        if key is not None:
            db.execute(self.q["note_request"], {"run_id": key.run_id,
                                                "request_id": key.request_id,
                                                "made": json.dumps(made)})
