"""The HTTP door: REST v1, server-sent events, the dashboard and /metrics, as one ASGI app.

It is an adapter over `taskherd.ops` like the CLI: a rule written here would be missing at
the other doors. It needs the `api` extra (Starlette, uvicorn, prometheus_client), imported
only when the API is served. `taskherd up` serves it from a process of its own with its own
store connection (`process.ApiProcess`), so a slow request or a page of a million tasks
never holds up the daemon's loop that spawns agents.
"""

PACKAGES = ("starlette", "uvicorn", "prometheus_client")  # the `api` extra


def missing_packages() -> list[str]:
    """The `api` extra's packages this installation lacks (looked up, not imported)."""
    import importlib.util

    return [name for name in PACKAGES if importlib.util.find_spec(name) is None]
