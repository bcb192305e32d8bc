"""Run credentials over named SQL (`store/sql/common/credentials.sql`); mixed into `SQLStore`.

An agent gets a random token at spawn and acts on its own run with it. The store keeps only
the token's sha256: whoever reads the database (a backup, a dump) cannot act as an agent.

A token names its run, `<run_id>.<secret>`, and its secret's digest is kept on the run's
own row, written by the claim that inserts the run: a lookup reads that run by its key and
compares. The digest is the secret's, not the whole token's, so that PostgreSQL's claim
function, which alone knows the run's id, is given the digest and never the secret (a
server's statement log would keep it). Tokens issued before (no run named, or a run whose
row has no digest) are in run_credentials, by the whole token's digest.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.model import Run
from taskherd.store.base import StoreError

if TYPE_CHECKING:
    from taskherd.store.connection import Connection

SEPARATOR = "."  # never in a secrets.token_urlsafe secret, nor in a run's id
BIGINT_PAST = 2**63  # the first id past PostgreSQL's bigint (SQLite's INTEGER key alike)


def token_digest(token: str) -> str:
    import hashlib  # here: every store loads this module, a command that checks no token too

    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def run_token(run_id: int, secret: str) -> str:
    """The credential of run `run_id` whose secret part is `secret` (its digest is kept)."""
    return f"{run_id}{SEPARATOR}{secret}"


def run_named(token: str) -> tuple[int, str] | None:
    """The run id a token names and its secret, or None: an old token, or anything that
    does not parse."""
    named, separator, secret = token.partition(SEPARATOR)
    # isascii: str.isdigit takes other scripts' digits, which int() would read as a number
    if not (separator and secret and named.isascii() and named.isdigit()):
        return None
    # A key PostgreSQL's bigint holds (a longer one is refused before int() reads it), and
    # one spelling of each run: the digest is the secret's, so "07.<secret>" would otherwise
    # pass for run 7's own token.
    run_id = int(named) if len(named) <= 19 else BIGINT_PAST
    if run_id >= BIGINT_PAST or named != str(run_id):
        return None
    return run_id, secret


class SQLCredentials:
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...

    def issue_run_credential(self, run_id: int, token: str, now: float) -> None:
        """A token that names `run_id` goes on the run's row; one that names no run (a
        caller's own form) into run_credentials, as every token did before."""
        named = run_named(token)
        if named is None:
            with self._write() as db:
                db.execute(self.q["issue_run_credential"], {
                    "token_sha256": token_digest(token), "run_id": run_id, "now": now})
            return
        if named[0] != run_id:
            raise ValueError(f"credential names run {named[0]}, not run {run_id}")
        params = {"token_sha256": token_digest(named[1]), "run_id": run_id}
        with self._write() as db:
            if db.execute(self.q["note_run_credential"], params).rowcount < 1:
                raise StoreError(f"no run {run_id}: its credential was not issued")

    def run_of_credential(self, token: str) -> Run | None:
        named = run_named(token)
        if named is not None:
            rows = self._all("open_run_named", {"run_id": named[0]})
            if not rows:
                return None
            run = Run.from_row(rows[0])
            if run.credential_sha256 is not None:
                import hmac  # here: a command that checks no credential does not load it

                kept, given = run.credential_sha256, token_digest(named[1])
                return run if hmac.compare_digest(kept, given) else None
        # An old token, or a run claimed before its credential went on its row.
        rows = self._all("open_run_of_credential", {"token_sha256": token_digest(token)})
        return Run.from_row(rows[0]) if rows else None

    def record_reported_usage(self, run_id: int, *, cost_usd: float | None,
                              input_tokens: int | None, output_tokens: int | None) -> None:
        params = {"run_id": run_id, "cost_usd": cost_usd, "input_tokens": input_tokens,
                  "output_tokens": output_tokens}
        with self._write() as db:
            if not db.execute(self.q["record_reported_usage"], params).fetchall():
                raise StoreError(f"run {run_id} already ended: its usage is settled")
