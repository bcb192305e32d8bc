"""The SQLite store's live API tokens, kept by digest between requests: the API checks a
token at every request, and reading it (the query, its row made a record, the roles' JSON)
was the largest part of adding a task after the insert itself.

A revocation still counts at the very next request. The cache is emptied whenever another
connection has committed anything (`PRAGMA data_version`, a tenth of the query's cost: a
`taskherd token revoke` is another process's commit), and at this connection's own revoke;
a token's expiry is checked against the request's `now`, kept or not. A token refused is
never kept: a guess reads the database each time, as before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from taskherd.store.tokens import ApiToken

MOST = 1024  # tokens kept at the most: an API's callers hold a few


class TokenCache:
    def __init__(self, version: Callable[[], int]) -> None:
        self._version = version  # PRAGMA data_version, read under the store's lock
        self._seen = -1
        self._live: dict[str, ApiToken] = {}

    def live(self, digest: str, now: float,
             read: Callable[[str, float], ApiToken | None]) -> ApiToken | None:
        """The live token of `digest` at `now`, from the cache or by `read` (the query).
        The caller holds the store's lock: nothing of this connection commits meanwhile."""
        version = self._version()  # before the read: a commit after it empties us next time
        if version != self._seen:
            self._live.clear()
            self._seen = version
        token = self._live.get(digest)
        if token is None:
            token = read(digest, now)
            if token is None:
                return None
            if len(self._live) >= MOST:
                self._live.clear()
            self._live[digest] = token
        if token.expires_at is not None and token.expires_at <= now:
            return None
        return token

    def forget(self) -> None:
        """This connection changed the tokens (its commits leave data_version as it was)."""
        self._live.clear()


def data_version(conn: sqlite3.Connection, statement: str) -> Callable[[], int]:
    return lambda: int(conn.execute(statement).fetchone()[0])
