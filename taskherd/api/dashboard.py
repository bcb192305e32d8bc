"""The dashboard: server-rendered pages over `taskherd.ops`, live through the event stream.

A person logs in with an API token (read, operator or admin); the page keeps a session
cookie (HttpOnly, SameSite=Strict) and never the token. Every action is a form POST carrying
the session's CSRF secret, so another site cannot act through a logged-in browser. Pages
work without JavaScript; `static/live.js` only makes them live: on each event it fetches the
page's fragment again (`?fragment=1`), and a task page follows its run's log. The board,
the page most left open, gets its fragment on its own event stream (`/board/events`), so a
page on it fetches nothing.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from taskherd.api import page_charts, pages
from taskherd.api.app import SESSION_COOKIE, Api, ApiError, Session, answer_for
from taskherd.api.events import KEEPALIVE_LINE, gathered, sse
from taskherd.ops import tasks as task_ops
from taskherd.ops import tokens as token_ops
from taskherd.ops.tokens import ACT, GRANTS, READ
from taskherd.store.tokens import ApiToken

SESSION_SECONDS = 12 * 3600
MAX_FORM = 16 * 1024
PAGES: dict[str, Callable[..., str]] = {
    "/": pages.board, "/dead": pages.dead, "/review": pages.review, "/blocked": pages.blocked,
    "/cooldowns": pages.cooldowns, "/cost": pages.cost, "/charts": page_charts.charts,
}
ACTIONS = ("approve", "reject", "block", "unblock", "requeue", "cancel")
BOARD_GATHER = 2.0  # seconds between two boards sent to one page at most (live.js MIN_GAP_MS)
# Each page's board is sent after a pause of its own, up to this: twenty dashboards told of
# a change at the same instant would wake twenty browsers at once on the fleet's host.
BOARD_SPREAD = 0.7


def routes(api: Api) -> list[Route]:
    found = [Route(path, _page(api, render)) for path, render in PAGES.items()]
    found += [
        Route("/board/events", _board_events(api)),
        Route("/login", _login_form(api), methods=["GET"]),
        Route("/login", _login(api), methods=["POST"]),
        Route("/logout", _logout(api), methods=["POST"]),
        Route("/ui/tasks/{task_id}/{action}", _act(api), methods=["POST"]),
        Route("/static/{name}", _static),
        Route("/favicon.ico", lambda request: RedirectResponse("/static/favicon.svg", 301)),
    ]
    return found


def _page(api: Api, render: Callable[..., str], title: str | None = None
          ) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        logged = await _logged_in(api, request)
        if logged is None:
            if request.query_params.get("fragment"):
                return Response("log in again", status_code=401)
            return RedirectResponse("/login", status_code=303)
        view = _view(api, *logged, request.url.path, dict(request.path_params),
                     tuple(request.query_params.multi_items()))
        seen = request.query_params.get("seen", "")
        try:
            if render is pages.board and request.query_params.get("fragment"):
                body = await _board_fragment(api, view, int(seen) if seen.isdigit() else None)
            else:
                body = await api.run(render, view)
        except Exception as error:  # noqa: BLE001 - a missing task is a page saying so
            failure = answer_for(error, f"page {request.url.path}")
            return HTMLResponse(pages.layout(view, "taskherd", f'<p class="error">'
                                             f'{pages.h(str(failure))}</p>'),
                                status_code=failure.status)
        if request.query_params.get("fragment"):
            return HTMLResponse(body)
        shown = title or pages.TITLES.get(request.url.path, "Task")
        return HTMLResponse(pages.layout(view, shown, body))

    return handle


def _view(api: Api, session: Session, token: ApiToken, path: str = "/",
          params: dict[str, str] | None = None,
          query: tuple[tuple[str, str], ...] = ()) -> pages.View:
    return pages.View(api.queue, api.clock(), token, session.csrf,
                      may_act=ACT in GRANTS[token.scope], path=path, params=params or {},
                      query=query)


def _board_events(api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        logged = await _logged_in(api, request)
        if logged is None:
            return Response("log in again", status_code=401)
        return StreamingResponse(_boards(api, request), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    return handle


async def _boards(api: Api, request: Request) -> AsyncIterator[bytes]:
    """`event: board` with the board's fragment when the fleet changed, at most every
    BOARD_GATHER seconds: a page on the board then fetches nothing (a fetch cost a browser
    more CPU than rendering the fragment, shared by every viewer, costs the server).
    `event: logout` once the session's token is revoked; `event: changed` (fetch it
    yourself) when the store could not answer (a locked or full disk): the stream goes on."""
    with api.hub.gather() as changes:
        yield b"retry: 1000\n\n"
        yield sse("hello", {"gather": BOARD_GATHER})
        async for change in gathered(changes, BOARD_GATHER):
            if change is None:
                yield KEEPALIVE_LINE
                continue
            await asyncio.sleep(random.uniform(0, BOARD_SPREAD))
            try:  # the session too is read from the store, which may not answer now
                logged = await _logged_in(api, request)
                html = None if logged is None else await _board_fragment(
                    api, _view(api, *logged), change["seq"])
            except Exception:  # noqa: BLE001 - the page fetches it and shows what failed
                yield sse("changed", change)
                continue
            if html is None:
                yield sse("logout", {})
                return
            yield sse("board", {"seq": change["seq"], "html": html})


async def _board_fragment(api: Api, view: pages.View, seen: int | None) -> str:
    """The board's fragment showing at least change `seen`: the one rendered for every viewer
    when it does, else rendered now (and kept for the others)."""
    if seen is not None and api.board.serves(seen, view.now):
        return api.board.html
    sequence = api.hub.sequence  # read before the store: the render shows at least it
    body = await api.run(pages.board, view)
    api.board.keep(sequence, body, view.now)
    return body


async def _logged_in(api: Api, request: Request) -> tuple[Session, ApiToken] | None:
    """The request's session and its live token; None without one (or once it is revoked)."""
    session = api.session_of(request, api.clock())
    if session is None:
        return None
    token = await api.run(token_ops.session_token, api.queue, session.digest, api.clock())
    return None if token is None else (session, token)


def _login_form(api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        return HTMLResponse(pages.login_page(request.query_params.get("error", "")))

    return handle


def _login(api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        now = api.clock()
        form = await _form(request)
        given = (form.get("token") or "").strip()
        try:
            token = await api.run(token_ops.authenticate, api.queue, given, now)
            token_ops.authorize(token, READ)
        except (token_ops.Unauthenticated, token_ops.Forbidden) as error:
            return _refused_login(api, request, error, given)
        key = secrets.token_urlsafe(32)
        api.sessions[key] = Session(token_ops.token_digest(given), secrets.token_urlsafe(32),
                                    now + SESSION_SECONDS)
        _forget_expired(api, now)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(SESSION_COOKIE, key, max_age=SESSION_SECONDS, httponly=True,
                            samesite="strict", secure=bool(api.config.api.tls_cert), path="/")
        return response

    return handle


def _refused_login(api: Api, request: Request, error: Exception, given: str) -> Response:
    """A wrong token is a guess, counted as the API counts them (429 past the limit); a valid
    one of a scope that may not read, or a run's, is no guess."""
    if given and token_ops.is_guess(error):
        try:
            api.refuse_guess(api.client_address(request))
        except ApiError:
            return HTMLResponse(pages.login_page("Too many wrong tokens: wait a minute."),
                                status_code=429)
    if isinstance(error, token_ops.WrongKind):
        said = "That is a run credential: log in with an API token."
    elif isinstance(error, token_ops.Unauthenticated):
        said = "That token is not valid."
    else:
        said = "An intake token cannot open the dashboard."
    return HTMLResponse(pages.login_page(said), status_code=401)


def _forget_expired(api: Api, now: float) -> None:
    for key in [key for key, session in api.sessions.items() if session.expires_at <= now]:
        del api.sessions[key]


def _logout(api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        session = api.session_of(request, api.clock())
        form = await _form(request)
        if session is not None and secrets.compare_digest(form.get("csrf", ""), session.csrf):
            api.sessions = {k: s for k, s in api.sessions.items() if s is not session}
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    return handle


async def _checked_form(api: Api, request: Request) -> tuple[dict[str, str], Any]:
    """The form of an action, once its session, scope and CSRF secret are checked."""
    logged = await _logged_in(api, request)
    if logged is None:
        raise ApiError(401, "log in first")
    session, token = logged
    form = await _form(request)
    if not secrets.compare_digest(form.get("csrf", ""), session.csrf):
        raise ApiError(403, "the form's CSRF token is missing or wrong: reload the page")
    token_ops.authorize(token, ACT)
    return form, token


def _act(api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        action = request.path_params["action"]
        try:
            form, _ = await _checked_form(api, request)
            if action not in ACTIONS:
                raise ApiError(404, f"no action {action!r}")
            task_id = pages.task_id_in(request.path_params["task_id"])
            reason = (form.get("reason") or None,) if action in ("reject", "cancel", "block") \
                else ()
            await api.run(task_ops.TRANSITIONS[action], api.queue, task_id, api.clock(),
                          *reason)
        except Exception as error:  # noqa: BLE001
            return _refused_page(error)
        return RedirectResponse(_back(form), status_code=303)

    return handle


def _refused_page(error: Exception) -> Response:
    failure = answer_for(error, "a dashboard action")
    return HTMLResponse(f'<!doctype html><title>refused</title><p class="error">'
                        f'{pages.h(str(failure))}</p><p><a href="/">back</a></p>',
                        status_code=failure.status)


def _back(form: dict[str, str]) -> str:
    """Where an action returns: a path of this site only (never `//elsewhere`)."""
    back = form.get("back", "/")
    return back if back.startswith("/") and not back.startswith("//") else "/"


async def _form(request: Request) -> dict[str, str]:
    fields = await _form_lists(request)
    return {key: values[0] for key, values in fields.items()}


async def _form_lists(request: Request, limit: int = MAX_FORM) -> dict[str, list[str]]:
    """Every value of every field (a list's ticked tasks share one name)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"the form is too large (at most {limit:,} bytes)")
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


STATIC_TYPES = {"live.js": "text/javascript", "style.css": "text/css",
                "favicon.svg": "image/svg+xml", "charts.js": "text/javascript",
                "uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}


async def _static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC_TYPES:
        return Response("not found", status_code=404)
    data = resources.files("taskherd.api").joinpath("static", name).read_bytes()
    return Response(data, media_type=STATIC_TYPES[name])
