"""Sending one delivery to its alias: a webhook (POST JSON; Slack- or Discord-shaped bodies
as options), a command (argv, never a shell; the event as one JSON line on stdin), or a file
(JSON Lines). Each raises `DeliveryFailed` unless the target acknowledged: a 2xx answer,
exit status 0, or the line written and synced.

Every body carries the delivery's id (`X-Taskherd-Delivery` and `Idempotency-Key` headers
for a webhook, `delivery_id` in the JSON): a target that acknowledged but whose answer was
lost (the daemon died between the two) may see it again, and can tell.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from taskherd.host.webhook_urls import RefusedTarget, pinned, redact_in, redacted
from taskherd.model.delivery import Alias, Delivery

TIMEOUT = 10.0


class _NoSecretsInRequestLog(logging.Filter):
    """httpx logs each request's URL at INFO ("HTTP Request: POST http://user:pw@…"): a
    webhook's may hold credentials or a token, shown redacted instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redacted(str(arg)) if "://" in str(arg) else arg
                                for arg in record.args)
        return True


logging.getLogger("httpx").addFilter(_NoSecretsInRequestLog())


class DeliveryFailed(Exception):
    pass


def send(alias: Alias, delivery: Delivery, timeout: float = TIMEOUT,
         client: Any = None) -> None:
    """Send `delivery` to `alias`; `client` is a `direct_client` to reuse across webhooks
    (a new one per call pays for its TLS context and connection every time)."""
    body = {"delivery_id": delivery.id, **json.loads(delivery.payload)}
    if alias.channel == "webhook" and client is None:
        with direct_client(timeout) as own:
            _post(alias, delivery, body, timeout, own)
    elif alias.channel == "webhook":
        _post(alias, delivery, body, timeout, client)
    elif alias.channel == "command":
        _run(alias, body, timeout)
    elif alias.channel == "file":
        _append(alias, body)
    else:
        raise DeliveryFailed(f"channel {alias.channel!r} is unknown")


def one_line(body: dict[str, Any]) -> str:
    budget = body.get("budget")
    if budget is not None:  # a budget's pause or resumption (store/sql_budgets.py)
        scope = budget.get("scope")
        who = "the fleet" if scope == "fleet" else f"role {scope}"
        if body.get("event") == "budget_resumed":
            return f"taskherd: {who} is within its budget again: spawns resume"
        return f"taskherd: {who} paused: {budget.get('reason')}"
    node = body.get("node")
    if node is not None:  # a node's pause or resumption (store/sql_nodes.py)
        if body.get("event") == "node_resumed":
            return f"taskherd: node {node.get('name')} starts runs again"
        return f"taskherd: node {node.get('name')} starts nothing new: {node.get('reason')}"
    endpoint = body.get("endpoint")
    if endpoint is not None:  # a runtime's endpoint down, or back (store/watch.py)
        since = _local(endpoint.get("down_since"))
        if body.get("event") == "endpoint_up":
            return (f"taskherd: runtime {endpoint.get('runtime')}'s endpoint is back "
                    f"(down since {since}): its runs start again")
        return (f"taskherd: runtime {endpoint.get('runtime')}'s endpoint down since {since}: "
                f"{endpoint.get('reason')}")
    task = body.get("task", {})
    detail = task.get("summary") or task.get("last_error") or task.get("reason") or ""
    return (f"taskherd: task {task.get('id')} ({task.get('role')}) {body.get('event')}: "
            f"{task.get('title')}" + (f" — {detail}" if detail else ""))


def _post(alias: Alias, delivery: Delivery, body: dict[str, Any], timeout: float,
          client: Any) -> None:
    import httpx

    shaped: Any = body
    if alias.format == "slack":
        shaped = {"text": one_line(body)}
    elif alias.format == "discord":
        shaped = {"content": one_line(body)[:2000]}
    headers = {"X-Taskherd-Delivery": str(delivery.id), "X-Taskherd-Event": delivery.event,
               "Idempotency-Key": f"taskherd-delivery-{delivery.id}"}
    poster, urls, extensions = _route(alias.target, client, headers)
    for number, url in enumerate(urls, 1):
        try:
            response = poster(url, json=shaped, headers=headers, timeout=timeout,
                              extensions=extensions)
            break
        except httpx.ConnectError as error:
            if number < len(urls):
                continue  # the name's next address, as a connection by name would
            raise DeliveryFailed(redact_in(f"{type(error).__name__}: {error}", url)) from error
        except httpx.HTTPError as error:
            raise DeliveryFailed(redact_in(f"{type(error).__name__}: {error}", url)) from error
    if not 200 <= response.status_code < 300:
        raise DeliveryFailed(f"HTTP {response.status_code}: {response.text[:200]}")


# Mounted over the environment's proxies: a client that connects to the address it is given.
DIRECT = {"http://": None, "https://": None, "all://": None}


def direct_client(timeout: float) -> Any:
    """A client for the deliverer to reuse (a new one per send pays for its TLS context and
    connection every time): it connects straight to the address `_route` checked, as the
    environment's proxies and NO_PROXY name hosts, not addresses."""
    import httpx

    return httpx.Client(timeout=timeout, mounts=DIRECT)


def _route(target: str, client: Any, headers: dict[str, str]
           ) -> tuple[Any, list[str], dict[str, Any]]:
    """How to POST to `target`: (the call, the URLs to try in order, httpx extensions), with
    the Host header added to `headers` when the URLs name the host's addresses."""
    import httpx

    urls, host = _checked(target)
    if _proxied(target):
        # A proxy of the environment connects by name: it is given the name, checked here
        # all the same (a proxy that resolves it elsewhere is the network's own guard).
        return httpx.post, [target], {}
    poster = client.post
    if host is None:
        return poster, urls, {}
    headers["Host"] = urlsplit(target).netloc.rpartition("@")[2]  # the server's own name
    return poster, urls, {"sni_hostname": host}  # and TLS checks the certificate against it


def _checked(target: str) -> tuple[list[str], str | None]:
    """The webhook's URLs by address, checked now (`webhook_urls.pinned`): an alias added
    before the check existed, or a name that resolves to a metadata address today, is
    refused here."""
    try:
        return pinned(target)
    except RefusedTarget as error:
        raise DeliveryFailed(str(error)) from None
    except (OSError, UnicodeError) as error:
        raise DeliveryFailed(f"webhook host {urlsplit(target).hostname} does not resolve: "
                             f"{getattr(error, 'strerror', None) or error}") from None


def _proxied(url: str) -> bool:
    """Whether the environment sends `url` through a proxy (HTTP_PROXY, NO_PROXY…)."""
    import urllib.request

    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    return (parts.scheme in proxies or "all" in proxies) and \
        not urllib.request.proxy_bypass(parts.hostname or "")


def _run(alias: Alias, body: dict[str, Any], timeout: float) -> None:
    argv = json.loads(alias.target)
    try:
        done = subprocess.run(argv, input=json.dumps(body) + "\n", text=True,
                              capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DeliveryFailed(f"{argv[0]}: {error}") from error
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-300:]
        raise DeliveryFailed(f"{argv[0]} exited {done.returncode}" + (f": {tail}" if tail else ""))


def _append(alias: Alias, body: dict[str, Any]) -> None:
    line = (json.dumps(body) + "\n").encode()
    try:
        fd = os.open(alias.target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as error:
        raise DeliveryFailed(f"{alias.target}: {error.strerror or error}") from error


def _local(timestamp: Any) -> str:
    if not isinstance(timestamp, int | float):
        return "?"
    return datetime.fromtimestamp(timestamp).astimezone().isoformat(sep=" ", timespec="seconds")
