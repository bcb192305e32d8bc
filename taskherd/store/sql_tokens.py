"""API tokens over named SQL (`store/sql/common/tokens.sql`); mixed into `SQLStore`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.store.tokens import (
    ApiToken,
    LastAdminToken,
    TokenNotFound,
    TokenRefused,
    TokenStore,
)

if TYPE_CHECKING:
    from taskherd.store.connection import Connection


class SQLTokens(TokenStore):
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _is_unique_error(self, error: Exception) -> bool: ...

    def add_api_token(self, name: str, scope: str, token_sha256: str, now: float, *,
                      expires_at: float | None = None, roles: list[str] | None = None,
                      rate_per_minute: int | None = None) -> ApiToken:
        params = {"name": name, "scope": scope, "token_sha256": token_sha256, "now": now,
                  "expires_at": expires_at, "rate_per_minute": rate_per_minute,
                  "roles": json.dumps(sorted(roles)) if roles is not None else None}
        try:
            with self._write() as db:
                row = db.execute(self.q["insert_api_token"], params).fetchall()[0]
        except Exception as error:
            if self._is_unique_error(error):
                raise TokenRefused(f"an API token named {name!r} already exists (names are "
                                   "never reused, even once revoked)") from None
            raise
        return ApiToken.from_row(row)

    def list_api_tokens(self) -> list[ApiToken]:
        return [ApiToken.from_row(row) for row in self._all("list_api_tokens")]

    def live_api_token(self, token_sha256: str, now: float) -> ApiToken | None:
        rows = self._all("live_api_token", {"token_sha256": token_sha256, "now": now})
        return ApiToken.from_row(rows[0]) if rows else None

    def revoke_api_token(self, name: str, now: float, *,
                         keep_an_admin: bool = True) -> ApiToken:
        with self._write() as db:
            if keep_an_admin:
                admins = [row["name"] for row in db.execute(
                    self.q["live_admin_tokens"], {"now": now}).fetchall()]
                if admins == [name]:
                    raise LastAdminToken(name)
            rows = db.execute(self.q["revoke_api_token"], {"name": name, "now": now}).fetchall()
            if not rows:
                if not db.execute(self.q["api_token_by_name"], {"name": name}).fetchall():
                    raise TokenNotFound(name)
                raise TokenRefused(f"the API token {name!r} is already revoked")
        return ApiToken.from_row(rows[0])
