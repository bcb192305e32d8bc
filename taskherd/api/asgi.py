"""The Starlette app: every declared route wrapped in the same steps, the streams, the
agent routes, /metrics, the dashboard and the OpenAPI document.

A request's steps: authenticate (401, or 429 for an address guessing tokens), check the
scope (403), read the body within the limit (413), run the operation off the event loop,
answer JSON; an operation's refusal becomes its status (`app.refusal`).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from taskherd.api import rest  # noqa: F401 - registers the REST routes
from taskherd.api.app import (
    ROUTES,
    Api,
    ApiError,
    Call,
    Caller,
    RouteSpec,
    answer_for,
    json_response,
    path_int,
    read_body,
    route,
)
from taskherd.api.events import event_stream, gather_seconds, gathered_stream, log_stream
from taskherd.api.hot import HotRoutes
from taskherd.ops.tokens import READ
from taskherd.policy.timefmt import zone_named

log = logging.getLogger("taskherd.api")

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    # The pages load their one script and stylesheet from here; nothing inline runs.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
}
# No other route's pattern matches these paths, so trying them first changes no answer.
BUSIEST = ("/v1/agent/{op}", "/v1/tasks")

_SECURITY_PAIRS = [(key.lower().encode(), value.encode())
                   for key, value in SECURITY_HEADERS.items()]


@route("POST", "/v1/agent/{op}", "run",
       "An agent's report on its own run (op: heartbeat, report, add_child_task), "
       "authenticated by its run credential; ?request_id= (the same on every try of one "
       "request) makes a repeated try make nothing twice", "AgentAnswer", body="AgentArgs",
       query={"request_id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}})
def agent_op(call: Call) -> Any:
    from taskherd.ops.agent_requests import perform

    assert call.caller.run is not None
    body = call.body if call.body is not None else {}
    result, _ = perform(call.queue, call.caller.run, call.params["op"], body, call.now,
                        call.query.get("request_id"))
    return result


def endpoint(api: Api, spec: RouteSpec) -> Callable[[Request], Awaitable[Response]]:
    limit = api.config.api.max_body_bytes

    async def handle(request: Request) -> Response:
        try:
            with api.guarding(request) if spec.need else contextlib.nullcontext():
                # The body is read here, on the loop (bounded: 413); all else in one trip.
                data = await read_body(request, limit) if spec.method != "GET" else None
                result = await api.run(api.perform, request, spec, data)
        except Exception as error:  # noqa: BLE001 - each refusal becomes its status
            return _failure(error, request)
        return json_response(result, spec.status, zone_named(api.config.daemon.timezone))

    return handle


def declared_routes(api: Api) -> list[Route]:
    """One route a path, whatever its methods: a method the path does not take is answered
    405 with every method it does take in Allow, and OPTIONS with that list."""
    by_path: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {}
    # The routes agents and scripts call by the thousand first: the router tries each
    # route's pattern in turn, and trying two dozen cost a heartbeat a tenth of its time.
    for spec in sorted(ROUTES, key=lambda spec: spec.path not in BUSIEST):
        by_path.setdefault(spec.path, {})[spec.method] = endpoint(api, spec)
    return [Route(_digits(path), _by_method(handlers), methods=[*handlers, "OPTIONS"])
            for path, handlers in by_path.items()]


class _Digits(Convertor):
    """An id in a path: digits, kept as text (`app.path_int` reads it). A path whose id is
    not digits matches no id route: /v1/tasks/import is that route's, never task 'import'."""

    regex = "[0-9]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return str(value)


register_url_convertor("digits", _Digits())


def _check_ids(path: str) -> None:
    """Raise `path_int`'s 404 when `path` is a declared route's but for an id not digits."""
    for template in {spec.path for spec in ROUTES} | {"/v1/runs/{run_id}/log/stream"}:
        pattern = re.sub(r"{(task_id|run_id)}", r"(?P<\1>[^/]+)", template)
        found = re.fullmatch(re.sub(r"{\w+}", "[^/]+", pattern), path)
        if found:
            for name, text in found.groupdict().items():
                path_int({name: text}, name)


def _digits(path: str) -> str:
    return re.sub(r"{(task_id|run_id)}", r"{\1:digits}", path)


def _by_method(handlers: dict[str, Callable[[Request], Awaitable[Response]]]
               ) -> Callable[[Request], Awaitable[Response]]:
    allowed = ", ".join([*handlers, *(["HEAD"] if "GET" in handlers else []), "OPTIONS"])

    async def dispatch(request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers={"Allow": allowed})
        return await handlers["GET" if request.method == "HEAD" else request.method](request)

    return dispatch


async def _http_exception(request: Request, error: Exception) -> Response:
    """The router's own refusals (no such path: 404; a method the path does not take: 405
    with Allow) as JSON errors under /v1/, as every other answer there."""
    assert isinstance(error, HTTPException)
    if not request.url.path.startswith("/v1/"):
        return PlainTextResponse(error.detail, error.status_code, headers=error.headers)
    if error.status_code == 404:
        try:
            _check_ids(request.url.path)  # /v1/tasks/abc: say it is the id that is wrong
        except ApiError as wrong_id:
            return wrong_id.response()
    return ApiError(error.status_code, f"{request.method} {request.url.path}: {error.detail}",
                    headers=dict(error.headers or {})).response()


def _failure(error: Exception, request: Request) -> Response:
    return answer_for(error, f"{request.method} {request.url.path}").response()


def stream(api: Api, make: Callable[[Request, Caller], AsyncIterator[bytes]],
           need: str = READ) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            caller = await api.authenticate(request, need)
            api.check(caller, need)
            body = make(request, caller)
            first = await anext(body)  # a refusal (no such run) is still a JSON answer
        except Exception as error:  # noqa: BLE001
            return _failure(error, request)

        async def chained() -> AsyncIterator[bytes]:
            yield first
            async for chunk in body:
                yield chunk

        return StreamingResponse(chained(), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    return handle


def build_app(api: Api) -> HotRoutes:
    """The app: the busiest routes answered in front of Starlette (`hot`), all else by it."""
    from taskherd.api import dashboard, dashboard_fleet, dashboard_lists, metrics, openapi

    counters = metrics.Metrics(api)
    routes = declared_routes(api)
    routes += [
        Route("/v1/events", stream(api, lambda request, caller: _events(api, request))),
        Route(_digits("/v1/runs/{run_id}/log/stream"),
              stream(api, lambda request, caller: log_stream(
                  api, path_int(dict(request.path_params), "run_id"), _lines(request)))),
        Route("/v1/openapi.json", lambda request: JSONResponse(openapi.document())),
        Route("/metrics", metrics.endpoint(api, counters)),
        *dashboard_lists.routes(api),  # first: /tasks/new before the task page's pattern
        *dashboard_fleet.routes(api),
        *dashboard.routes(api),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await api.hub.start()
        counters.start()
        try:
            yield
        finally:
            await counters.stop()
            await api.hub.stop()

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: _http_exception})
    app.add_middleware(_SecurityHeaders)
    return HotRoutes(app, api, _SECURITY_PAIRS)


def _events(api: Api, request: Request) -> AsyncIterator[bytes]:
    seconds = gather_seconds(request.query_params.get("gather"))
    zone = zone_named(api.config.daemon.timezone)
    return event_stream(api.hub, zone) if seconds is None else gathered_stream(api.hub, seconds)


def _lines(request: Request) -> int:
    text = request.query_params.get("lines", "100")
    if not text.isdigit() or int(text) > 10_000:
        raise ApiError(400, f"lines = {text!r}: expected a whole number from 0 to 10000", "lines")
    return int(text)


class _SecurityHeaders:
    """Headers every answer carries: nothing is cached, framed or sniffed."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                message["headers"] = headers + [
                    pair for pair in _SECURITY_PAIRS if pair[0] not in names]
            await send(message)

        await self.app(scope, receive, with_headers)
