"""API tokens: make, list and revoke them, and the rules of what each scope may do.

A token is shown once, when made; the store keeps its sha256 only. Scopes, from least to
most: `intake` may only add tasks (for peers: optionally only for some roles, at a bounded
rate); `read` sees everything; `operator` also acts on tasks and fires jobs; `admin` also
manages jobs and tokens. Every door that takes tokens asks `authorize` here, so a scope
means the same at each of them.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from taskherd.model import Run
from taskherd.model.record import Record
from taskherd.ops import BadInput, Queue
from taskherd.ops import agent as agent_ops
from taskherd.policy.durations import DurationError, parse_duration
from taskherd.store.sql_credentials import token_digest as token_digest  # for the dashboard
from taskherd.store.tokens import ApiToken

log = logging.getLogger("taskherd.api")

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


class WrongKind(Unauthenticated):
    """A valid credential of the other kind than the route takes: an API token at the agent
    route, a run credential at the API's. Refused, but not a guess: its holder knows it."""


class Forbidden(Exception):
    """A valid token whose scope does not allow the request."""


class NewToken(Record):
    token: str  # the secret itself: shown once, never stored
    record: ApiToken


def create_token(queue: Queue, name: object, scope: object, now: float, *,
                 expires: str | float | None = None, roles: Sequence[str] = (),
                 rate_per_minute: int | None = None) -> NewToken:
    """Make a token; the returned `token` is the only time its text exists outside the
    holder's hands. `roles` and `rate_per_minute` bound an intake token only. `name` and
    `scope` are checked here, whatever a door was given (a JSON body's may be any value)."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BadInput(f"name = {name!r}: expected 1-64 letters, digits, '.', '_' or '-', "
                       "starting with a letter or digit")
    if not isinstance(scope, str) or scope not in SCOPES:
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


def revoke_token(queue: Queue, name: str, now: float, *, even_last_admin: bool = False
                 ) -> ApiToken:
    """Revoke at once: the next request holding it is refused. The last live admin token is
    kept (LastAdminToken, a TokenRefused) unless `even_last_admin`: a token revoking itself
    by accident (a script, a fuzzer) would leave nobody able to manage the API. Only the
    database's holder may say so (`taskherd token revoke --even-last-admin`): they can make
    another token."""
    return queue.store.revoke_api_token(name, now, keep_an_admin=not even_last_admin)


def authenticate(queue: Queue, token: object, now: float) -> ApiToken:
    if not isinstance(token, str) or not token:
        raise Unauthenticated("no API token given (Authorization: Bearer TOKEN)")
    found = queue.store.live_api_token(token_digest(token), now)
    if found is None:
        if queue.store.run_of_credential(token) is not None:
            raise WrongKind("this is a run credential: it serves /v1/agent/ only, and the "
                            "API needs an API token (taskherd token create)")
        raise Unauthenticated("the API token is not valid: unknown, revoked or expired")
    return found


def session_token(queue: Queue, digest: str, now: float) -> ApiToken | None:
    """The live token behind a dashboard session, which keeps the token's digest (never the
    token): None once it is revoked or expired."""
    return queue.store.live_api_token(digest, now)


def authenticate_run(queue: Queue, token: object, now: float) -> Run:
    """The open run of an agent's credential (the HTTP agent route); an API token sent there
    is refused as WrongKind, not counted as a guess."""
    try:
        return agent_ops.authenticate(queue, token)
    except agent_ops.Unauthorized:
        if isinstance(token, str) and queue.store.live_api_token(token_digest(token), now):
            raise WrongKind("this is an API token: /v1/agent/ takes the run credential an "
                            "agent is given (TASKHERD_RUN_TOKEN)") from None
        raise


def is_guess(error: Exception) -> bool:
    """Whether a refused credential counts as a guess (see `Throttle`)."""
    return isinstance(error, Unauthenticated | agent_ops.Unauthorized) and \
        not isinstance(error, WrongKind)


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
    """Guessing tokens is slowed down, and nobody holding a valid credential is refused: a
    valid one is served from any address, so a mistyped token on a host whose agents and
    processes all share 127.0.0.1 (or behind a proxy every client shares) locks out no one.
    Only wrong credentials are counted, per address: past `limit` within `window` seconds,
    the next wrong ones are answered 429 until `window` has passed since the last. A right
    credential does not clear the count, or a guesser holding one valid token could
    interleave it and guess for ever."""

    limit: int = 20
    window: float = 60.0
    # per guesser: its latest wrong credentials, and until when the next wrong one is 429
    _guesses: dict[str, tuple[deque[float], list[float]]] = field(default_factory=dict)

    def guessed(self, address: str, now: float) -> float:
        """Count a wrong credential from `address`; the seconds it must wait before a wrong
        one is answered 401 again (0: this one is answered 401)."""
        key = _guesser(address)
        times, until = self._guesses.setdefault(key, (deque(maxlen=self.limit), [0.0]))
        throttled = now < until[0]
        while times and times[0] <= now - self.window:
            times.popleft()
        times.append(now)
        if len(times) >= self.limit:  # refused until a window passes without a wrong one
            if not throttled:
                log.warning("%s gave %d wrong tokens within %gs: its wrong ones are answered "
                            "429 until %gs pass without one (valid tokens are served)", key,
                            self.limit, self.window, self.window)
            until[0] = now + self.window
        if len(self._guesses) > 10_000:  # many addresses: forget the oldest, bound memory
            self._guesses.pop(next(iter(self._guesses)))
        return until[0] - now if throttled else 0.0


def _guesser(address: str) -> str:
    """Who is guessing: an IPv6 address by its /64, which one host holds whole."""
    import ipaddress

    try:
        found = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(found, ipaddress.IPv6Address):
        if found.ipv4_mapped is not None:
            return str(found.ipv4_mapped)
        return str(ipaddress.ip_network(f"{found}/64", strict=False))
    return str(found)
