"""API tokens: what people and peers hold to use the HTTP API, each with one scope.

The store keeps a token's sha256, never the token: it is shown once, when made. Which scope
may do what is `taskherd.ops.tokens`' rule; the store keeps the records.
"""

from __future__ import annotations

import abc
import json
from typing import Any

from taskherd.model import row_fields
from taskherd.model.record import Record
from taskherd.store.errors import StoreError


class TokenNotFound(StoreError):
    def __init__(self, name: str):
        super().__init__(f"no API token named {name!r}")
        self.name = name


class TokenRefused(StoreError):
    """A well-formed token request the records refuse (a name taken, a token revoked)."""


class LastAdminToken(TokenRefused):
    """Revoking this token would leave no live admin token: nobody could manage the API."""

    def __init__(self, name: str):
        super().__init__(f"the API token {name!r} is the last live admin token: revoked, it "
                         "would leave nobody able to manage tokens or jobs over the API; make "
                         "another first (taskherd token create --scope admin)")
        self.name = name


class ApiToken(Record):
    id: int
    name: str
    scope: str
    roles: tuple[str, ...] | None  # an intake token's allowed roles; None: every role
    rate_per_minute: int | None  # an intake token's request rate; None: unlimited
    created_at: float
    expires_at: float | None
    revoked_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> ApiToken:
        data = row_fields(row)
        data.pop("token_sha256", None)
        roles = data.get("roles")
        data["roles"] = tuple(json.loads(roles)) if roles is not None else None
        return cls(**data)

    def status(self, now: float) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "live"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"roles": list(self.roles) if self.roles else None}


class TokenStore(abc.ABC):
    @abc.abstractmethod
    def add_api_token(self, name: str, scope: str, token_sha256: str, now: float, *,
                      expires_at: float | None = None, roles: list[str] | None = None,
                      rate_per_minute: int | None = None) -> ApiToken:
        """Record a token by its digest; a name already used (even revoked) is refused."""

    @abc.abstractmethod
    def list_api_tokens(self) -> list[ApiToken]: ...

    @abc.abstractmethod
    def live_api_token(self, token_sha256: str, now: float) -> ApiToken | None:
        """The token with this digest, unless unknown, revoked or expired at `now`."""

    @abc.abstractmethod
    def revoke_api_token(self, name: str, now: float, *,
                         keep_an_admin: bool = True) -> ApiToken:
        """Revoke a token at once; TokenNotFound, or TokenRefused if it already was.
        `keep_an_admin`: LastAdminToken if it is the last live admin token (decided in the
        revoke's transaction, so two revokes at once cannot take the last two)."""
