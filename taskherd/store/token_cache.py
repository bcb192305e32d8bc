"""What the SQLite store keeps of the credentials it has checked, by digest: the live API
tokens and the open runs of run credentials. The API checks one at every request, and
reading it (the query, its row made a record) was the largest part of adding a task after
the insert itself, and a third of a heartbeat's work in the store.

A revocation, or a run's end, still counts at the very next request. What is kept is
dropped whenever another connection has committed anything (`PRAGMA data_version`, a tenth
of the query's cost: a `taskherd token revoke`, the daemon ending a run, are other
connections' commits), and when this connection revokes a token or ends a run itself; a
token's expiry is checked against the request's `now`, kept or not. A credential refused is
never kept: a guess reads the database each time, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from taskherd.model import Run
from taskherd.store.tokens import ApiToken

MOST = 1024  # credentials kept at the most, each kind: an API's callers hold a few hundred

Kept = TypeVar("Kept")


class _Cache(Generic[Kept]):
    def __init__(self, version: Callable[[], int]) -> None:
        self._version = version  # PRAGMA data_version, read under the store's lock
        self._seen = -1
        self._kept: dict[str, Kept] = {}

    def get(self, digest: str, read: Callable[[], Kept | None]) -> Kept | None:
        """What `digest` stands for, kept or by `read` (the query). The caller holds the
        store's lock: nothing of this connection commits meanwhile."""
        version = self._version()  # before the read: a commit after it empties us next time
        if version != self._seen:
            self._kept.clear()
            self._seen = version
        found = self._kept.get(digest)
        if found is None:
            found = read()
            if found is None:
                return None
            if len(self._kept) >= MOST:
                self._kept.clear()
            self._kept[digest] = found
        return found

    def forget(self) -> None:
        """This connection changed what is kept (its commits leave data_version as it was)."""
        self._kept.clear()


class TokenCache(_Cache[ApiToken]):
    def live(self, digest: str, now: float,
             read: Callable[[str, float], ApiToken | None]) -> ApiToken | None:
        """The live token of `digest` at `now`."""
        token = self.get(digest, lambda: read(digest, now))
        if token is None or (token.expires_at is not None and token.expires_at <= now):
            return None
        return token


class RunCache(_Cache[Run]):
    """The open run of each credential. A run kept is as it was read: its identity (id,
    task, role, node) is what an agent's request reads of it; what changes (its heartbeat,
    its report) the store reads and guards itself."""
