"""The dashboard's routes for lists of tasks, bulk actions, adding tasks and the task page's
own forms (answer, priority). Each action is a form POST checked as `dashboard` checks
them (session, scope, CSRF) and calls the `taskherd.ops` function the CLI and REST call."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from taskherd.api import dashboard, page_add, page_lists, page_task, pages
from taskherd.api.app import Api, ApiError, answer_for
from taskherd.ops import BadInput, task_lists
from taskherd.ops import tasks as task_ops
from taskherd.ops import tokens as token_ops
from taskherd.ops.tokens import ACT, GRANTS

MAX_BULK_FORM = 64 * 1024  # a confirmation carries up to BULK_MAX task ids
MAX_IMPORT = 1024 * 1024  # a JSON Lines upload: thousands of tasks, read whole to check all


def routes(api: Api) -> list[Route]:
    return [
        Route("/tasks", dashboard._page(api, page_lists.task_list)),
        Route("/tasks/new", dashboard._page(api, page_add.add_form)),
        Route("/tasks/{task_id}", dashboard._page(api, page_task.task)),
        Route("/ui/bulk", _bulk(api), methods=["POST"]),
        Route("/ui/add", _add(api), methods=["POST"]),
        Route("/ui/import", _import(api), methods=["POST"]),
        Route("/ui/tasks/{task_id}/answer", _answer(api), methods=["POST"]),
        Route("/ui/tasks/{task_id}/priority", _priority(api), methods=["POST"]),
    ]


Handler = Callable[[Request], Awaitable[Response]]


async def _checked(api: Api, request: Request,
                   limit: int = dashboard.MAX_FORM) -> tuple[dict[str, list[str]], pages.View]:
    """The form of an action, once its session, scope and CSRF secret are checked, and the
    view to answer it in."""
    logged = await dashboard._logged_in(api, request)
    if logged is None:
        raise ApiError(401, "log in first")
    session, token = logged
    form = await dashboard._form_lists(request, limit)
    if not secrets.compare_digest(_one(form, "csrf"), session.csrf):
        raise ApiError(403, "the form's CSRF token is missing or wrong: reload the page")
    token_ops.authorize(token, ACT)
    view = pages.View(api.queue, api.clock(), token, session.csrf,
                      may_act=ACT in GRANTS[token.scope], path=request.url.path)
    return form, view


def _one(form: dict[str, list[str]], key: str) -> str:
    return (form.get(key) or [""])[0]


def _refused(error: Exception, where: str) -> Response:
    failure = answer_for(error, where)
    return HTMLResponse(f'<!doctype html><title>refused</title><p class="error" id="refused">'
                        f'{pages.h(str(failure))}</p><p><a href="/tasks">back to the tasks</a></p>',
                        status_code=failure.status)


def _bulk(api: Api) -> Handler:
    """Step one (no `confirmed`): say how many tasks, and which, the action would move.
    Step two: move exactly the tasks the confirmation named, each by its own transition."""
    async def handle(request: Request) -> Response:
        try:
            form, view = await _checked(api, request, MAX_BULK_FORM)
            action = _one(form, "action")
            if action not in task_lists.BULK_ACTIONS:
                raise BadInput(f"action {action!r}: expected one of "
                               f"{', '.join(task_lists.BULK_ACTIONS)}")
            back = "/tasks" + (f"?{_one(form, 'filter')}" if _one(form, "filter") else "")
            back = dashboard._back({"back": _one(form, "back") or back})
            if _one(form, "scope") == "all":
                asked = page_lists.parsed(api.queue, parse_qsl(_one(form, "filter")))
                ids = await api.run(task_lists.matching_ids, api.queue, asked)
            else:
                ids = _ids(form.get("task", []))
            if not ids:
                raise BadInput("no task chosen: tick the tasks to act on, or act on all that "
                               "match")
            if _one(form, "confirmed") != "yes":
                body = page_lists.bulk_confirmation(view, action, ids, back)
                return HTMLResponse(pages.layout(view, "Confirm", body))
            result = await api.run(task_lists.bulk, api.queue, action, ids, api.clock(),
                                   _one(form, "reason") or None)
        except Exception as error:  # noqa: BLE001 - said on a page, never a traceback
            return _refused(error, "a bulk action")
        return HTMLResponse(pages.layout(view, "Done", page_lists.bulk_result(action, result,
                                                                              back)))

    return handle


def _ids(values: list[str]) -> list[int]:
    for value in values:
        if not value.isdigit():
            raise BadInput(f"task {value!r}: expected a task id")
    return [int(value) for value in values]


def _add(api: Api) -> Handler:
    async def handle(request: Request) -> Response:
        try:
            form, _ = await _checked(api, request)
            data = page_add.task_data({key: _one(form, key) for key in form})
            added = await api.run(task_ops.add_task, api.queue, data, api.clock())
        except Exception as error:  # noqa: BLE001
            return _refused(error, "adding a task")
        return RedirectResponse(f"/tasks/{added.task.id}", status_code=303)

    return handle


def _import(api: Api) -> Handler:
    async def handle(request: Request) -> Response:
        try:
            form, view = await _checked(api, request, MAX_IMPORT)
            lines = _one(form, "jsonl").splitlines()
            result = await api.run(task_ops.import_json_lines, api.queue, lines, api.clock())
        except task_ops.LinesRefused as wrong:
            return HTMLResponse(pages.layout(view, "Nothing imported",
                                             page_add.wrong_lines(wrong.errors)),
                                status_code=422)
        except Exception as error:  # noqa: BLE001
            return _refused(error, "the import")
        return HTMLResponse(pages.layout(view, "Imported", page_add.imported(result)))

    return handle


def _answer(api: Api) -> Handler:
    async def handle(request: Request) -> Response:
        raw = request.path_params["task_id"]
        try:
            form, _ = await _checked(api, request)
            task_id = pages.task_id_in(raw)
            await api.run(task_ops.answer, api.queue, task_id, _one(form, "text"), api.clock())
        except Exception as error:  # noqa: BLE001
            return _refused(error, "the answer")
        return RedirectResponse(f"/tasks/{raw}", status_code=303)

    return handle


def _priority(api: Api) -> Handler:
    async def handle(request: Request) -> Response:
        raw = request.path_params["task_id"]
        try:
            form, _ = await _checked(api, request)
            task_id = pages.task_id_in(raw)
            value = _one(form, "priority")
            await api.run(task_ops.set_priority, api.queue, task_id,
                          int(value) if value.isdigit() else value, api.clock())
        except Exception as error:  # noqa: BLE001
            return _refused(error, "the priority")
        return RedirectResponse(f"/tasks/{raw}", status_code=303)

    return handle
