"""API tokens: make, list and revoke them, and the rules of what each scope may do.

A token is shown once, when made; the store keeps its sha256 only. Scopes, from least to
most: `intake` may only add tasks (for peers: optionally only for some roles, at a bounded
rate); `read` sees everything; `operator` also acts on tasks and fires jobs; `admin` also
manages jobs and tokens. Every door that takes tokens asks `authorize` here, so a scope
means the same at each of them.
"""

from __future__ import annotations

import re
import secrets
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from taskherd.durations import DurationError, parse_duration
from taskherd.ops import BadInput, Queue
from taskherd.store.sql_credentials import token_digest
from taskherd.store.tokens import ApiToken

SCOPES = ("admin", "operator", "read", "intake")
TOKEN_PREFIX = "thk_"  # recognisable in a leaked file or a secret scanner
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# What a request needs, and the scopes that have it.
READ = "read"  # see the queue, runs, logs, jobs, costs, metrics
ADD = "add"  # add or import tasks
ACT = "act"  # move tasks by hand (approve, reject, cancel, block, unblock, requeue), run a job
MANAGE = "manage"  # add, change, enable and disable jobs; make and revoke tokens
GRANTS = {
    "read": frozenset({READ}),
    "intake": frozenset({ADD}),
    "operator": frozenset({READ, ADD, ACT}),
    "admin": frozenset({READ, ADD, ACT, MANAGE}),
}


class Unauthenticated(Exception):
    """No token, or one that is unknown, revoked or expired."""


class Forbidden(Exception):
    """A valid token whose scope does not allow the request."""


@dataclass(frozen=True)
class NewToken:
    token: str  # the secret itself: shown once, never stored
    record: ApiToken


def create_token(queue: Queue, name: str, scope: str, now: float, *,
                 expires: str | float | None = None, roles: Sequence[str] = (),
                 rate_per_minute: int | None = None) -> NewToken:
    """Make a token; the returned `token` is the only time its text exists outside the
    holder's hands. `roles` and `rate_per_minute` bound an intake token only."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BadInput(f"name = {name!r}: expected 1-64 letters, digits, '.', '_' or '-', "
                       "starting with a letter or digit")
    if scope not in SCOPES:
        raise BadInput(f"scope = {scope!r}: expected one of {', '.join(SCOPES)}")
    if (roles or rate_per_minute is not None) and scope != "intake":
        raise BadInput(f"roles and rate limits bound intake tokens only, not scope {scope!r}")
    if rate_per_minute is not None and (isinstance(rate_per_minute, bool) or not isinstance(
            rate_per_minute, int) or rate_per_minute < 1):
        raise BadInput(f"rate = {rate_per_minute!r}: expected a whole number of requests a "
                       "minute, ≥ 1")
    for role in roles:
        if role != "any" and queue.config.roles and role not in queue.config.roles:
            known = ", ".join(sorted(queue.config.roles))
            raise BadInput(f"role = {role!r} is not defined in the config (defined: {known})")
    expires_at = None
    if expires is not None:
        try:
            span = parse_duration(expires, field="expires")
        except DurationError as error:
            raise BadInput(str(error)) from None
        if span <= 0:
            raise BadInput(f"expires = {expires!r}: expected a duration > 0, e.g. '30d'")
        expires_at = now + span
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    record = queue.store.add_api_token(name, scope, token_digest(token), now,
                                       expires_at=expires_at, roles=list(roles) or None,
                                       rate_per_minute=rate_per_minute)
    return NewToken(token, record)


def list_tokens(queue: Queue) -> list[ApiToken]:
    return queue.store.list_api_tokens()


def revoke_token(queue: Queue, name: str, now: float) -> ApiToken:
    """Revoke at once: the next request holding it is refused."""
    return queue.store.revoke_api_token(name, now)


def authenticate(queue: Queue, token: object, now: float) -> ApiToken:
    if not isinstance(token, str) or not token:
        raise Unauthenticated("no API token given (Authorization: Bearer TOKEN)")
    found = queue.store.live_api_token(token_digest(token), now)
    if found is None:
        raise Unauthenticated("the API token is not valid: unknown, revoked or expired")
    return found


def authorize(token: ApiToken, need: str) -> None:
    """Raise Forbidden unless `token`'s scope grants `need`. (Which roles an intake token
    may add tasks for is checked where tasks are added: `ops.tasks`' allowed_roles.)"""
    if need not in GRANTS.get(token.scope, frozenset()):
        raise Forbidden(f"token {token.name!r} has scope {token.scope!r}, which may not "
                        f"{_DOING[need]} (scopes that may: {', '.join(_scopes_with(need))})")


_DOING = {READ: "read the queue", ADD: "add tasks", ACT: "act on tasks or fire jobs",
          MANAGE: "manage jobs or tokens"}


def _scopes_with(need: str) -> list[str]:
    return [scope for scope in SCOPES if need in GRANTS[scope]]


@dataclass
class RateLimit:
    """A sliding window of a minute per token: an intake token's `rate_per_minute`."""

    window: float = 60.0
    _seen: dict[int, deque[float]] = field(default_factory=dict)

    def allow(self, token: ApiToken, now: float) -> float:
        """0 if the request may go ahead (it is counted), else seconds until it may."""
        if token.rate_per_minute is None:
            return 0.0
        seen = self._seen.setdefault(token.id, deque())
        while seen and seen[0] <= now - self.window:
            seen.popleft()
        if len(seen) >= token.rate_per_minute:
            return max(seen[0] + self.window - now, 0.001)
        seen.append(now)
        return 0.0


@dataclass
class Throttle:
    """Guessing tokens is slowed down: an address that gave `limit` bad tokens within
    `window` seconds is refused (429) until the window has passed since its last failure.
    A good token clears its address's count."""

    limit: int = 20
    window: float = 60.0
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def wait(self, address: str, now: float) -> float:
        """Seconds `address` must wait before it may try a token again (0: it may now)."""
        failures = self._failures.get(address)
        if not failures:
            return 0.0
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if len(failures) < self.limit:
            return 0.0
        return max(failures[-1] + self.window - now, 0.001)

    def failed(self, address: str, now: float) -> None:
        failures = self._failures.setdefault(address, deque(maxlen=self.limit * 2))
        failures.append(now)
        if len(self._failures) > 10_000:  # many addresses: forget the oldest, bound memory
            self._failures.pop(next(iter(self._failures)))

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)
