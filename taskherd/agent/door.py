"""The agent door: how an agent reaches its daemon without holding the database.

The daemon listens on the UNIX stream socket `<data_dir>/door/agent.sock` (mode 0600, in a folder
of mode 0700), which agents reach through the link `<data_dir>/agent.sock`. A request is
one JSON line `{"token", "op", "args", "request_id"}`; the answer one JSON line,
`{"ok": true, "result"}` or `{"error": message, "kind": "bad_input" | "refused" |
"unauthorized"}`. The token is checked against the store (only its hash is stored) and the op
calls `taskherd.ops`. Tokens are never logged.

A daemon restarting (even after `kill -9`) is away for a second or so: the agent's side waits
for it, trying again for up to `[daemon] agent_report_wait` (TASKHERD_REPORT_WAIT, set at
spawn) while nobody answers (no socket, connection refused, the connection dropped before an
answer; over HTTP also 502, 503, 504), so that a report made then is not lost and costs the
agent no strike. Every try of one request carries the same `request_id`, so a request the old
daemon applied but could not answer makes nothing twice (`store/requests.py`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskherd.host.door_path import DOOR_DIR, SOCKET_NAME, door_dir

if TYPE_CHECKING:
    import asyncio

    from taskherd.ops import Queue

# logging is imported where the daemon's side logs, beside asyncio (which loads it anyway):
# every agent command imports this module to send one line, and logging is ~5% of its start.

TOKEN_ENV = "TASKHERD_RUN_TOKEN"
HOME_ENV = "TASKHERD_HOME"
URL_ENV = "TASKHERD_URL"  # the daemon's HTTP API, for an agent that has no socket to it
WAIT_ENV = "TASKHERD_REPORT_WAIT"  # seconds an agent's command waits for an absent daemon
DEFAULT_REPORT_WAIT = 60.0  # [daemon] agent_report_wait's default
FIRST_PAUSE, LAST_PAUSE = 0.05, 1.0  # between two tries while waiting: doubling up to this
AWAY_STATUSES = (502, 503, 504)  # a proxy before the API, or the API, says no daemon serves
MAX_REQUEST = 4 * 1024 * 1024  # a child task's prompt fits; a runaway writer does not
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux: longer paths go through /proc
TIMEOUT = 30.0


def socket_path(data_dir: Path) -> Path:
    """Where agents connect: a link to the socket in `door_dir`."""
    return data_dir / SOCKET_NAME


@contextlib.contextmanager
def _addressable(path: Path) -> Iterator[str]:
    """A name for `path` a socket call accepts: itself, or through its open folder when the
    full path is longer than sun_path (pytest's temporary folders often are)."""
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        yield str(path)
        return
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


# -- the daemon's side -------------------------------------------------------------------


class AgentDoor:
    def __init__(self, queue: Queue, clock: Callable[[], float],
                 on_change: Callable[[], None] = lambda: None):
        self.queue = queue
        self.clock = clock
        self.on_change = on_change
        self._server: asyncio.AbstractServer | None = None
        self._path: Path | None = None

    # asyncio is imported by the daemon's side only: the agent's side (`taskherd heartbeat`,
    # many times a run) would pay ~50 ms of imports for a server it never runs.
    async def start(self, data_dir: Path) -> None:
        import asyncio

        folder = door_dir(data_dir)
        folder.mkdir(mode=0o700, exist_ok=True)
        path = folder / SOCKET_NAME
        path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Created private: no moment exists when another user could connect.
        old_umask = os.umask(0o177)
        try:
            with _addressable(path) as name:
                sock.bind(name)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        link = socket_path(data_dir)
        target = f"{DOOR_DIR}/{SOCKET_NAME}"
        if not (link.is_symlink() and os.readlink(link) == target):
            link.unlink(missing_ok=True)  # an older daemon's socket file where the link goes
            link.symlink_to(target)
        self._server = await asyncio.start_unix_server(self._serve, sock=sock,
                                                       limit=MAX_REQUEST)
        self._path = path

    async def close(self) -> None:
        import asyncio

        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import asyncio
        import logging

        try:
            line = await asyncio.wait_for(reader.readline(), TIMEOUT)
            answer = self.answer(line)
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError) as error:
            logging.getLogger(__name__).debug("agent door: a connection ended early: %s",
                                              type(error).__name__)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def answer(self, line: bytes) -> dict[str, Any]:
        """One request in, one answer out; never raises."""
        from taskherd.ops import BadInput
        from taskherd.ops import agent as agent_ops
        from taskherd.store import StoreError, TaskNotFound

        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise BadInput("a request is a JSON object {token, op, args}")
            return {"ok": True, "result": self._perform(request)}
        except agent_ops.Unauthorized as error:
            return {"error": str(error), "kind": "unauthorized"}
        except (BadInput, TaskNotFound, ValueError) as error:  # JSON errors are ValueErrors
            return {"error": str(error), "kind": "bad_input"}
        except StoreError as error:
            return {"error": str(error), "kind": "refused"}
        except Exception:
            import logging

            logging.getLogger(__name__).exception("agent door: a request failed")
            return {"error": "the daemon failed to handle the request (see its log)",
                    "kind": "refused"}

    def _perform(self, request: dict[str, Any]) -> dict[str, Any]:
        from taskherd.ops import agent as agent_ops
        from taskherd.ops.agent_requests import perform

        run = agent_ops.authenticate(self.queue, request.get("token"))
        result, changed = perform(self.queue, run, request.get("op"),
                                  request.get("args") or {}, self.clock(),
                                  request.get("request_id"))
        if changed:
            self.on_change()
        return result


# -- the agent's side --------------------------------------------------------------------


class DoorError(Exception):
    """The daemon said no, or could not be reached. `kind` is bad_input, refused,
    unauthorized, or unreachable."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def inside_run(env: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    return bool(env.get(TOKEN_ENV))


def call(op: str, args: dict[str, Any], env: Any = None) -> dict[str, Any]:
    """Ask the daemon that started this agent to do `op` for its run: over HTTP when
    TASKHERD_URL is set (an agent on another host), else through the agent socket. While no
    daemon answers, try again for up to its report wait (saying so once on stderr), then
    fail with the one-line error of the last try."""
    env = os.environ if env is None else env
    token, home = env.get(TOKEN_ENV), env.get(HOME_ENV)
    if not token:
        raise DoorError(f"{TOKEN_ENV} is not set: this command is run by an agent inside a run",
                        "bad_input")
    if not home and not env.get(URL_ENV):
        raise DoorError(f"{HOME_ENV} is not set: the agent cannot find its daemon", "bad_input")
    wait = report_wait(env)
    # One id for every try: a daemon that applied a try it could not answer (it died) makes
    # nothing again for the next one, and answers it from what the first made.
    request = {"token": token, "op": op, "args": args, "request_id": os.urandom(12).hex()}
    size = len(json.dumps(request).encode()) + 1
    if size > MAX_REQUEST:
        # Refused here: the door stops reading past its limit, and the writer would be told
        # only "Broken pipe".
        raise DoorError(f"the {op} request is {size} bytes: at most {MAX_REQUEST} are accepted "
                        "(put a text this large in a file and name the file)", "bad_input")
    deadline = time.monotonic() + wait
    pause, told = FIRST_PAUSE, False
    while True:
        try:
            return _try(env, request)
        except _Away as away:
            left = deadline - time.monotonic()
            if left <= 0:
                waited = f" (waited {wait:g}s: [daemon] agent_report_wait)" if wait else ""
                raise DoorError(f"{away}{waited}", "unreachable") from None
            if not told:
                print(f"taskherd: {away}; waiting up to {wait:g}s for the daemon to come back",
                      file=sys.stderr, flush=True)
                told = True
            # Jittered: the agents of a restarted daemon do not all knock at the same instant.
            time.sleep(min(left, pause * (0.5 + os.urandom(1)[0] / 255)))
            pause = min(pause * 2, LAST_PAUSE)


def report_wait(env: Any) -> float:
    """How long this agent's commands wait for an absent daemon (its spawn set it)."""
    try:
        wait = float(env.get(WAIT_ENV) or DEFAULT_REPORT_WAIT)
    except ValueError:
        return DEFAULT_REPORT_WAIT
    return max(wait, 0.0) if math.isfinite(wait) else DEFAULT_REPORT_WAIT


class _Away(Exception):
    """No daemon answered this try: none listens, or it went away before answering. Another
    try may find the next one."""


def _try(env: Any, request: dict[str, Any]) -> dict[str, Any]:
    """One try, through the socket when it is here (the agent runs on the daemon's host),
    else the HTTP API; chosen again each try, as a restarting daemon makes its socket anew."""
    home, url = env.get(HOME_ENV), env.get(URL_ENV)
    if url and not (home and socket_path(Path(home)).exists()):
        return _call_http(url, request)
    return _call_socket(socket_path(Path(home)), request)


def _call_socket(path: Path, request: dict[str, Any]) -> dict[str, Any]:
    line = json.dumps(request).encode() + b"\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, \
                _addressable(path) as name:
            sock.settimeout(TIMEOUT)
            sock.connect(name)
            sock.sendall(line)
            answer = _read_line(sock)
    except (FileNotFoundError, ConnectionError, TimeoutError) as error:
        raise _Away(f"no daemon answers at {path}: {error.strerror or error}") from None
    except _Away as away:
        raise _Away(f"no daemon answers at {path}: {away}") from None
    except OSError as error:
        raise DoorError(f"no daemon answers at {path}: {error.strerror or error}",
                        "unreachable") from error
    if "error" in answer:
        raise DoorError(str(answer["error"]), str(answer.get("kind", "refused")))
    return answer.get("result") or {}


# HTTP statuses of the API's refusals, as the kinds the CLI turns into exit codes.
_HTTP_KINDS = {400: "bad_input", 401: "unauthorized", 403: "unauthorized", 404: "bad_input",
               413: "bad_input", 415: "bad_input", 422: "bad_input"}


def _call_http(url: str, request: dict[str, Any]) -> dict[str, Any]:
    """POST the op to the API's agent route. urllib, not httpx: `taskherd heartbeat` runs
    many times a run and should start fast."""
    import http.client
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise DoorError(f"{URL_ENV} = {url!r}: expected an http:// or https:// URL", "bad_input")
    posted = urllib.request.Request(
        f"{url.rstrip('/')}/v1/agent/{request['op']}?request_id={request['request_id']}",
        data=json.dumps(request["args"]).encode(), method="POST",
        headers={"Authorization": f"Bearer {request['token']}",
                 "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(posted, timeout=TIMEOUT) as response:
            answer = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        if error.code in AWAY_STATUSES:
            raise _Away(f"no daemon answers at {url}: HTTP {error.code} {error.reason}") from None
        try:
            message = json.loads(error.read()).get("error") or error.reason
        except (ValueError, AttributeError):
            message = error.reason
        raise DoorError(str(message), _HTTP_KINDS.get(error.code, "refused")) from None
    except (OSError, ValueError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", None) or error
        if isinstance(reason, ConnectionError | TimeoutError | http.client.HTTPException):
            raise _Away(f"no daemon answers at {url}: {reason}") from None
        raise DoorError(f"no daemon answers at {url}: {reason}", "unreachable") from None
    return answer if isinstance(answer, dict) else {}


def _read_line(sock: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            # The daemon went away before its answer was whole (killed while serving).
            raise _Away("the daemon closed the connection without an answer")
        data += chunk
    try:
        answer = json.loads(data)
    except ValueError:
        raise DoorError("the daemon's answer is not JSON", "refused") from None
    if not isinstance(answer, dict):
        raise DoorError("the daemon's answer is not a JSON object", "refused")
    return answer
