"""The API's core: who is calling (a token, a dashboard session or a run credential), what
they may do (asked of `ops.tokens`), reading a bounded JSON body, and errors as JSON.

Every route is declared with `route(...)`: its method, path, the scope it needs and the
schema of what it answers. The app, the OpenAPI document and its test all read that one
list, so the document cannot drift from the routes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from taskherd.api.store_thread import StoreThread
from taskherd.model import Run
from taskherd.model.settings import Config
from taskherd.ops import BadInput, Queue
from taskherd.ops import agent as agent_ops
from taskherd.ops import tokens as token_ops
from taskherd.policy.timefmt import with_iso
from taskherd.store import (
    JobNotFound,
    JobRefused,
    RunNotFound,
    Store,
    StoreError,
    TaskNotFound,
    TransitionRefused,
)
from taskherd.store.errors import environment_fault
from taskherd.store.tokens import ApiToken, TokenNotFound, TokenRefused

log = logging.getLogger("taskherd.api")

try:
    import orjson as _orjson
except ImportError:  # the `fast` extra is not installed
    _orjson = None  # type: ignore[assignment]

SESSION_COOKIE = "taskherd_session"
CSRF_HEADER = "x-csrf-token"
RETRY_AFTER_FAULT = 5  # seconds a client waits before trying a faulty database again
# Field named at the start of an operation's message: "priority = 'P9': expected …",
# "title is 300 characters …", "line 3: role is required …".
_FIELD = re.compile(
    r"^(?:(?:line|item) \d+: )?(?:unknown field )?'?([a-z_]+)'?(?: =| '|:| is| must| \()")


class ApiError(Exception):
    """A request refused: `status`, a message for people, the field at fault if one is."""

    def __init__(self, status: int, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.field, self.headers = status, field, headers or {}

    def response(self) -> JSONResponse:
        body: dict[str, Any] = {"error": str(self), "status": self.status}
        if self.field:
            body["field"] = self.field
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def answer_for(error: Exception, what: str) -> ApiError:
    """`refusal`, or a 500 (logged with its trace) for an error no operation meant."""
    try:
        return refusal(error)
    except Exception:
        log.exception("%s failed", what)
        return ApiError(500, "the request failed inside taskherd (see the daemon's log)")


def refusal(error: Exception) -> ApiError:
    """What an operation's refusal means in HTTP (other errors are raised again)."""
    message = str(error)
    if isinstance(error, ApiError):
        return error
    if isinstance(error, token_ops.Unauthenticated | agent_ops.Unauthorized):
        return ApiError(401, message, headers={"WWW-Authenticate": "Bearer"})
    if isinstance(error, token_ops.Forbidden):
        return ApiError(403, message)
    if isinstance(error, BadInput):
        found = _FIELD.match(message)
        return ApiError(422, message, found.group(1) if found else None)
    if isinstance(error, TaskNotFound | RunNotFound | JobNotFound | TokenNotFound):
        return ApiError(404, message)
    if (fault := environment_fault(error)) is not None:
        # The machine's fault (a locked, full or unreachable database), not the request's:
        # 503 tells a client to try again, where a 409 would say its request was wrong.
        return ApiError(503, fault, headers={"Retry-After": str(RETRY_AFTER_FAULT)})
    if isinstance(error, TransitionRefused | JobRefused | TokenRefused | StoreError):
        return ApiError(409, message)
    raise error


T = TypeVar("T")


@dataclass
class Caller:
    """Who sent a request: an API token (by header or dashboard session), or a run."""

    token: ApiToken | None = None
    run: Run | None = None
    session: Session | None = None


@dataclass
class Session:
    """A dashboard login: the token's digest (checked again at every request, so a revoked
    token logs its sessions out) and the CSRF secret its pages carry in their forms."""

    digest: str
    csrf: str
    expires_at: float


@dataclass
class Call:
    """What a route handler gets: the caller, path and query parameters, the JSON body, and
    the schemas its route declares for its query parameters (`RouteSpec.query`)."""

    api: Api
    caller: Caller
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    now: float
    declared: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def queue(self) -> Queue:
        return self.api.queue

    def int_query(self, name: str) -> int:
        """A whole number within the bounds its route declares (absent: its default)."""
        return _declared_default(name, self.optional_int_query(name))

    def optional_int_query(self, name: str) -> int | None:
        """A whole number within the bounds its route declares (absent: its default, or None)."""
        schema = self.declared[name]
        text = self.query.get(name)
        if text is None:
            return schema.get("default")
        low, high = schema["minimum"], schema["maximum"]
        if not re.fullmatch(r"\d{1,19}", text) or not low <= int(text) <= high:
            raise ApiError(400, f"{name} = {text!r}: expected a whole number from {low} to "
                           f"{high}", name)
        return int(text)

    def float_query(self, name: str) -> float | None:
        """A moment in unix seconds, within the range its route declares."""
        schema = self.declared[name]
        text = self.query.get(name)
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        low, high = schema["minimum"], schema["maximum"]
        if not low <= value <= high:  # NaN and infinities fail this too
            raise ApiError(400, f"{name} = {text!r}: expected unix seconds from {low} to "
                           f"{high}", name)
        return value

    def choice_query(self, name: str) -> str:
        """One of the values its route declares (absent: its default)."""
        return _declared_default(name, self.optional_choice_query(name))

    def optional_choice_query(self, name: str) -> str | None:
        """One of the values its route declares (absent: its default, or None)."""
        schema = self.declared[name]
        text = self.query.get(name)
        if text is None:
            return schema.get("default")
        if text not in schema["enum"]:  # 422, as the operations refuse a value they don't take
            raise ApiError(422, f"{name} = {text!r}: expected one of "
                           f"{', '.join(schema['enum'])}", name)
        return text

    def task_id(self) -> int:
        return path_int(self.params, "task_id")

    def body_object(self) -> dict[str, Any]:
        if not isinstance(self.body, dict):
            raise ApiError(422, "the body must be a JSON object", "body")
        return self.body


def _declared_default(name: str, value: T | None) -> T:
    if value is None:  # the route reads the parameter as always given, yet declares no default
        raise LookupError(f"query parameter {name!r}: its route declares no default")
    return value


def integer(low: int, high: int, default: int | None = None) -> dict[str, Any]:
    """The schema of a whole-number query parameter."""
    return {"type": "integer", "minimum": low, "maximum": high} | (
        {} if default is None else {"default": default})


def choice(values: Iterable[str], default: str | None = None) -> dict[str, Any]:
    """The schema of a query parameter that takes one of `values`."""
    return {"type": "string", "enum": list(values)} | (
        {} if default is None else {"default": default})


TEXT: dict[str, Any] = {"type": "string"}
# A moment in unix seconds, from 1970 to the end of year 9999 (what a date can show).
UNIX_SECONDS: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": 253402300799}


def path_int(params: dict[str, str], name: str) -> int:
    text = params.get(name, "")
    if not re.fullmatch(r"\d{1,18}", text):
        raise ApiError(404, f"{name} {text!r} is not an id: expected a whole number", name)
    return int(text)


@dataclass(frozen=True)
class RouteSpec:
    method: str
    path: str
    handler: Callable[[Call], Any]
    need: str | None  # a token's grant (ops.tokens READ, ADD…), "run" (a run credential)
    summary: str
    response: str  # the name of its schema in openapi.SCHEMAS
    status: int = 200
    body: str | None = None  # the schema of its body, if it takes one
    # Its query parameters' JSON schemas, {name: schema}: the document shows them, and
    # `Call.int_query` and `choice_query` (and their optional_ forms) hold a request to them.
    query: dict[str, dict[str, Any]] = field(default_factory=dict)


ROUTES: list[RouteSpec] = []
Handler = Callable[[Call], Any]


def route(method: str, path: str, need: str | None, summary: str, response: str, *,
          status: int = 200, body: str | None = None,
          query: dict[str, dict[str, Any]] | None = None) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        ROUTES.append(RouteSpec(method, path, handler, need, summary, response, status, body,
                                query or {}))
        return handler

    return register


@dataclass
class Api:
    """The state the app shares: the queue (its own store connection), the clock, the
    guards against guessing and flooding, dashboard sessions, and the event hub."""

    config: Config
    store: Store
    clock: Callable[[], float] = time.time
    # The daemon's services, {name: {"counts": {…}, "errors": n}}, for /metrics, when the
    # daemon serves us (asked over the link of `process.ApiProcess`).
    services: Callable[[], dict[str, Any]] | None = None
    throttle: token_ops.Throttle = field(default_factory=token_ops.Throttle)
    rates: token_ops.RateLimit = field(default_factory=token_ops.RateLimit)
    # `check` counts a token's requests from the store thread of `perform`.
    _rates_lock: threading.Lock = field(default_factory=threading.Lock)
    sessions: dict[str, Session] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from taskherd.api.fanout import EventHub, SharedBoard

        self.queue = Queue(self.config, self.store)
        self.hub = EventHub(self.queue)
        self.board = SharedBoard()
        # A batch's commits told to listeners (this process's hub among them) together: one
        # datagram a commit woke the loop once a commit, and its wake-ups took the interpreter
        # lock from the batch.
        self.store_thread = StoreThread(hold=self.store.events_held,
                                        group=self.store.writes_grouped)

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """A store call off the event loop, so streams and other requests keep moving."""
        return await self.store_thread.run(function, *args)

    async def run_grouped(self, function: Callable[..., Any], *args: Any) -> Any:
        """As `run`, for a call of a few short writes: committed with the others of its
        batch (`StoreThread.run_grouped`)."""
        return await self.store_thread.run_grouped(function, *args)

    # -- who is calling --------------------------------------------------------------

    async def authenticate(self, request: Request, need: str | None) -> Caller:
        if need is None:
            return Caller()
        with self.guarding(request):
            return await self.run(self._caller, request, need, self.clock())

    @contextlib.contextmanager
    def guarding(self, request: Request) -> Iterator[None]:
        """Around what authenticates a request (on the event loop, which alone keeps the
        throttle): a valid credential is served whatever its address did before; a wrong one
        is a guess, answered 401, or 429 once its address has made too many (`Throttle`)."""
        try:
            yield
        except (token_ops.Unauthenticated, agent_ops.Unauthorized) as error:
            self.count_guess(request, error)
            raise

    def count_guess(self, request: Request, error: Exception) -> None:
        """`guarding`'s step for a refused credential (`error`): counted if it is a guess,
        ApiError 429 past the throttle's limit."""
        if not isinstance(error, token_ops.Unauthenticated | agent_ops.Unauthorized):
            return
        # A guess is a credential given that is wrong; a request with none is no guess.
        given = "authorization" in request.headers or SESSION_COOKIE in request.cookies
        if given and token_ops.is_guess(error):
            self.refuse_guess(self.client_address(request))

    def refuse_guess(self, address: str) -> None:
        """Count a wrong credential from `address`; 429 past the throttle's limit."""
        wait = self.throttle.guessed(address, self.clock())
        if wait:
            raise ApiError(429, "too many wrong tokens from this address: a wrong one is "
                           "refused for a while (a valid token is still served)",
                           headers={"Retry-After": str(int(wait) + 1)})

    def client_address(self, request: Request) -> str:
        """The caller's address: the peer's, or behind a proxy of `[api] trusted_proxies` the
        address that proxy saw (X-Forwarded-For read from the right, past trusted hops; what
        lies left of them is the client's to write, and is not believed)."""
        peer = request.client.host if request.client else "?"
        proxies = self.config.api.trusted_proxies
        if not proxies or not _within(peer, proxies):
            return peer
        forwarded = ",".join(request.headers.getlist("x-forwarded-for"))
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        for hop in reversed(hops):
            if not _within(hop, proxies):
                return hop[:64]
        return hops[0][:64] if hops else peer

    def perform(self, request: Request, spec: RouteSpec, data: bytes | None) -> Any:
        """A declared route's whole work in one trip off the event loop (each trip costs a
        hand-over between threads, a large part of a heartbeat's time): who calls (401), may
        they (403, 429), the body parsed (400, 415), the operation."""
        now = self.clock()
        caller = self._caller(request, spec.need, now) if spec.need else Caller()
        self.check(caller, spec.need)
        body = parse_body(request, data) if data is not None else None
        # No query string (an agent's heartbeat, a task added): no parse of one.
        query = dict(request.query_params) if request.scope.get("query_string") else {}
        call = Call(self, caller, dict(request.path_params), query, body, self.clock(),
                    spec.query)
        return spec.handler(call)

    def _caller(self, request: Request, need: str, now: float) -> Caller:
        bearer = _bearer(request)
        if need == "run":
            return Caller(run=token_ops.authenticate_run(self.queue, bearer, now))
        if bearer is not None:
            return Caller(token=token_ops.authenticate(self.queue, bearer, now))
        session = self.session_of(request, now)
        if session is None:
            raise token_ops.Unauthenticated(
                "no API token given (Authorization: Bearer TOKEN, or log in to the dashboard)")
        token = token_ops.session_token(self.queue, session.digest, now)
        if token is None:
            raise token_ops.Unauthenticated("the session's token was revoked or expired")
        # A cookie rides along with any request the browser makes: a change needs the
        # page's CSRF secret too, which another site cannot read.
        if request.method not in ("GET", "HEAD") and \
                request.headers.get(CSRF_HEADER) != session.csrf:
            raise token_ops.Forbidden("a change made with a dashboard session needs its "
                                      f"CSRF token in the {CSRF_HEADER} header")
        return Caller(token=token, session=session)

    def session_of(self, request: Request, now: float) -> Session | None:
        key = request.cookies.get(SESSION_COOKIE)
        session = self.sessions.get(key) if key else None
        if session is None or session.expires_at <= now:
            return None
        return session

    def check(self, caller: Caller, need: str | None) -> None:
        """The token's scope must grant `need`; an intake token must keep to its rate."""
        if caller.token is not None and need not in (None, "run"):
            token_ops.authorize(caller.token, need)
            with self._rates_lock:
                wait = self.rates.allow(caller.token, self.clock())
            if wait:
                raise ApiError(429, f"token {caller.token.name!r} may make "
                               f"{caller.token.rate_per_minute} requests a minute",
                               headers={"Retry-After": str(int(wait) + 1)})


def _within(address: str, networks: tuple[Any, ...]) -> bool:
    import ipaddress

    try:
        found = ipaddress.ip_address(address)
    except ValueError:
        return False
    found = getattr(found, "ipv4_mapped", None) or found
    return any(found in network for network in networks)


def header_of(request: Request, name: bytes) -> str | None:
    """The first header `name` (lower case, as the server gives names) of the request, read
    from its scope: Starlette's `request.headers` made a Headers of the whole list for each
    request, and looked it up by a name lowered and encoded each time (a tenth of a
    heartbeat's work in the store thread went to reading its two headers)."""
    for key, value in request.scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def _bearer(request: Request) -> str | None:
    header = header_of(request, b"authorization")
    if header is None:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise token_ops.Unauthenticated("the Authorization header must be 'Bearer TOKEN'")
    return value.strip()


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused past `limit` bytes before it is all read (`parse_body`
    reads it as JSON)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the body is {declared} bytes: at most {limit} are accepted "
                       "([api] max_body_bytes)", "body")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise ApiError(413, f"the body is over {limit} bytes: at most {limit} are "
                           "accepted ([api] max_body_bytes)", "body")
    return bytes(data)


def parse_body(request: Request, data: bytes) -> Any:
    """The body as JSON (None when empty; NDJSON's text as it is), refused when it is not
    UTF-8 JSON."""
    if not data.strip():
        return None
    given = header_of(request, b"content-type")
    kind = ("application/json" if given is None else given).split(";")[0].strip()
    if kind not in ("application/json", "application/x-ndjson"):
        raise ApiError(415 if kind else 400, f"content-type {kind!r}: expected application/json",
                       "content-type")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"the body is not valid UTF-8 (byte {error.start})", "body") from None
    if kind == "application/x-ndjson":
        return text
    try:
        return _DECODER.decode(text)
    except ValueError as error:
        raise ApiError(400, f"the body is not valid JSON: {error}", "body") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# Made once: json.loads given an option makes a decoder a call (3 µs of a task added).
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def json_response(data: Any, status: int = 200, zone: tzinfo | None = None) -> Response:
    """`data` as JSON; every time (unix seconds, as ever) with its ISO 8601 form beside it as
    `<name>_iso`, in `zone` (the fleet's; taskherd.policy.timefmt)."""
    return Response(json_body(data, zone), status_code=status, media_type="application/json")


def json_body(data: Any, zone: tzinfo | None = None) -> bytes:
    """`data` as `json_response`'s body: by orjson where installed (the `fast` extra; a task's
    answer in a tenth of the standard library's time; NaN, which the standard library
    refuses, as null), else by the standard library."""
    walked = with_iso(data, zone)
    if _orjson is not None:
        try:
            return _orjson.dumps(walked, default=str, option=_orjson.OPT_NON_STR_KEYS)
        except TypeError:  # what it refuses (a lone surrogate in a text): as it was
            pass
    return json.dumps(walked, separators=(",", ":"), allow_nan=False, default=str).encode()
