"""The routes agents and scripts call by the thousand (`POST /v1/tasks`, `POST
/v1/agent/{op}`), answered in front of the Starlette app rather than through it.

Their steps are the declared routes' own (`asgi.endpoint`: authenticate, check, read the
body within its limit, the operation in the store thread, a JSON answer with the security
headers); what is left out is the way there. Starlette's error middleware, the security
headers' middleware, its exception middleware, the router and the route's request wrapper
each wrap the request and every message sent back: under fifty clients those layers and a
Response object cost the loop more than the bare server it sits on (bench/api.py a). Any
other request, and any other method on these paths, goes to the app as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request

from taskherd.api.app import ROUTES, Api, ApiError, RouteSpec, answer_for, json_body

Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
AGENT_PREFIX = "/v1/agent/"


class HotRoutes:
    """The ASGI app: the busiest routes answered here, every other request passed on."""

    def __init__(self, app: Asgi, api: Api, security: list[tuple[bytes, bytes]]):
        self.app = app
        self.security = security
        specs = {(spec.method, spec.path): spec for spec in ROUTES}
        # A task added and a heartbeat are a short write each: committed a batch at a time.
        self.add_task = _answering(api, specs["POST", "/v1/tasks"], security, api.run_grouped)
        agent = specs["POST", AGENT_PREFIX + "{op}"]
        self.heartbeat = _answering(api, agent, security, api.run_grouped)
        self.agent_op = _answering(api, agent, security, api.run)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            if path == "/v1/tasks":
                await self.add_task(scope, receive, send)
                return
            if path.startswith(AGENT_PREFIX):
                op = path[len(AGENT_PREFIX):]
                if op and "/" not in op:  # the route's pattern: one segment, not empty
                    scope["path_params"] = {"op": op}
                    await (self.heartbeat if op == "heartbeat" else self.agent_op)(
                        scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _answering(api: Api, spec: RouteSpec, security: list[tuple[bytes, bytes]],
               run: Callable[..., Awaitable[Any]]) -> Asgi:
    from taskherd.policy.timefmt import zone_named

    limit = api.config.api.max_body_bytes
    zone = zone_named(api.config.daemon.timezone)  # once: a ZoneInfo lookup a request cost
    status = spec.status

    async def answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        try:
            try:
                data = await _body(scope, receive, limit)
                result = await run(api.perform, request, spec, data)
            except Exception as error:
                if spec.need:
                    api.count_guess(request, error)  # as `Api.guarding`: 429 past the limit
                raise
            body = json_body(result, zone)
        except Exception as error:  # noqa: BLE001 - each refusal becomes its status
            response = answer_for(error, f"POST {scope['path']}").response()
            await response(scope, receive, _secured(send, security))
            return
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode()),
                                (b"content-type", b"application/json"), *security]})
        await send({"type": "http.response.body", "body": body})

    return answer


async def _body(scope: dict[str, Any], receive: Any, limit: int) -> bytes:
    """`read_body`'s steps on the ASGI messages themselves: an agent's or a script's body
    comes whole in one message, read without Starlette's stream around it."""
    for name, value in scope["headers"]:
        if name == b"content-length":  # the server gives header names in lower case
            if value.isdigit() and int(value) > limit:
                raise ApiError(413, f"the body is {value.decode()} bytes: at most {limit} "
                               "are accepted ([api] max_body_bytes)", "body")
            break
    data = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()  # as Starlette's stream: the client went away
        data += message.get("body", b"")
        if len(data) > limit:
            raise ApiError(413, f"the body is over {limit} bytes: at most {limit} are "
                           "accepted ([api] max_body_bytes)", "body")
        if not message.get("more_body", False):
            return data


def _secured(send: Any, security: list[tuple[bytes, bytes]]) -> Any:
    """`send`, adding the security headers an answer does not carry already."""

    async def with_headers(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            names = {name for name, _ in message["headers"]}  # Starlette's are lower case
            message["headers"] = [*message["headers"],
                                  *(pair for pair in security if pair[0] not in names)]
        await send(message)

    return with_headers
