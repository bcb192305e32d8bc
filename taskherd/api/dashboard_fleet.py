"""The dashboard's routes for the fleet: the nodes page, the jobs and one job's page, and a
job's actions (run now, enable, disable); messages (and sending one), memory, and the
delivery aliases (and retrying a failed delivery). Each action is a form POST checked as `dashboard`
checks them (session, scope, CSRF) and calls the `taskherd.ops` function the CLI and REST
call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from taskherd.api import dashboard, page_comms, page_fleet
from taskherd.api.app import Api, ApiError
from taskherd.ops import delivery as delivery_ops
from taskherd.ops import jobs as job_ops
from taskherd.ops import messages as message_ops

JOB_ACTIONS = {"run": job_ops.run_job_now, "enable": job_ops.enable_job,
               "disable": job_ops.disable_job}


def routes(api: Api) -> list[Route]:
    return [
        Route("/nodes", dashboard._page(api, page_fleet.nodes)),
        Route("/jobs", dashboard._page(api, page_fleet.jobs)),
        Route("/jobs/{name}", dashboard._page(api, page_fleet.job, title="Job")),
        Route("/ui/jobs/{name}/{action}", _job_action(api), methods=["POST"]),
        Route("/messages", dashboard._page(api, page_comms.messages)),
        Route("/memory", dashboard._page(api, page_comms.memory)),
        Route("/delivery", dashboard._page(api, page_comms.delivery)),
        Route("/ui/messages", _send(api), methods=["POST"]),
        Route("/ui/deliveries/{delivery_id}/retry", _retry(api), methods=["POST"]),
    ]


def _job_action(api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        action = request.path_params["action"]
        try:
            form, _ = await dashboard._checked_form(api, request)
            if action not in JOB_ACTIONS:
                raise ApiError(404, f"no job action {action!r}: expected one of "
                                    f"{', '.join(JOB_ACTIONS)}")
            await api.run(JOB_ACTIONS[action], api.queue, request.path_params["name"],
                          api.clock())
        except Exception as error:  # noqa: BLE001
            return dashboard._refused_page(error)
        return RedirectResponse(dashboard._back(form), status_code=303)

    return handle


def _send(api: Api) -> Callable[[Request], Awaitable[Response]]:
    """A person's message, as `taskherd msg send` sends it; back to the address's page."""
    async def handle(request: Request) -> Response:
        try:
            form, _ = await dashboard._checked_form(api, request)
            to = form.get("to", "").strip()
            await api.run(partial(message_ops.send, priority=form.get("priority", "0")),
                          api.queue, message_ops.person(), to, form.get("body", ""),
                          api.clock())
        except Exception as error:  # noqa: BLE001
            return dashboard._refused_page(error)
        return RedirectResponse(f"/messages?{urlencode({'address': to})}", status_code=303)

    return handle


def _retry(api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            form, _ = await dashboard._checked_form(api, request)
            given = request.path_params["delivery_id"]
            if not given.isdigit():
                raise ApiError(404, f"no delivery {given!r}")
            await api.run(delivery_ops.retry, api.queue, api.clock(), int(given))
        except Exception as error:  # noqa: BLE001
            return dashboard._refused_page(error)
        return RedirectResponse(dashboard._back(form), status_code=303)

    return handle
