"""Run credentials over named SQL (`store/sql/common/credentials.sql`); mixed into `SQLStore`.

An agent gets a random token at spawn and acts on its own run with it. The store keeps only
the token's sha256: whoever reads the database (a backup, a dump) cannot act as an agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.model import Run
from taskherd.store.base import StoreError

if TYPE_CHECKING:
    from taskherd.store.connection import Connection


def token_digest(token: str) -> str:
    import hashlib  # here: every store loads this module, a command that checks no token too

    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class SQLCredentials:
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...

    def issue_run_credential(self, run_id: int, token: str, now: float) -> None:
        params = {"token_sha256": token_digest(token), "run_id": run_id, "now": now}
        with self._write() as db:
            db.execute(self.q["issue_run_credential"], params)

    def run_of_credential(self, token: str) -> Run | None:
        rows = self._all("open_run_of_credential", {"token_sha256": token_digest(token)})
        return Run.from_row(rows[0]) if rows else None

    def record_reported_usage(self, run_id: int, *, cost_usd: float | None,
                              input_tokens: int | None, output_tokens: int | None) -> None:
        params = {"run_id": run_id, "cost_usd": cost_usd, "input_tokens": input_tokens,
                  "output_tokens": output_tokens}
        with self._write() as db:
            if not db.execute(self.q["record_reported_usage"], params).fetchall():
                raise StoreError(f"run {run_id} already ended: its usage is settled")
