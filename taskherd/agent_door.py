"""The agent door: how an agent reaches its daemon without holding the database.

The daemon listens on the UNIX stream socket `<data_dir>/agent.sock` (mode 0600). A request is
one JSON line `{"token", "op", "args"}`; the answer one JSON line, `{"ok": true, "result"}` or
`{"error": message, "kind": "bad_input" | "refused" | "unauthorized"}`. The token is checked
against the store (only its hash is stored) and the op calls `taskherd.ops.agent`.
Tokens are never logged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from taskherd.ops import Queue

log = logging.getLogger(__name__)

SOCKET_NAME = "agent.sock"
TOKEN_ENV = "TASKHERD_RUN_TOKEN"
HOME_ENV = "TASKHERD_HOME"
MAX_REQUEST = 4 * 1024 * 1024  # a child task's prompt fits; a runaway writer does not
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux: longer paths go through /proc
TIMEOUT = 30.0
OPS = ("heartbeat", "report", "add_child_task", "review")


def socket_path(data_dir: Path) -> Path:
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

        path = socket_path(data_dir)
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

        try:
            line = await asyncio.wait_for(reader.readline(), TIMEOUT)
            answer = self.answer(line)
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError) as error:
            log.debug("agent door: a connection ended early: %s", type(error).__name__)
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
            log.exception("agent door: a request failed")
            return {"error": "the daemon failed to handle the request (see its log)",
                    "kind": "refused"}

    def _perform(self, request: dict[str, Any]) -> dict[str, Any]:
        from taskherd.ops import BadInput
        from taskherd.ops import agent as agent_ops

        run = agent_ops.authenticate(self.queue, request.get("token"))
        op, args = request.get("op"), request.get("args") or {}
        if op not in OPS:
            raise BadInput(f"op {op!r} is not one of: {', '.join(OPS)}")
        if not isinstance(args, dict):
            raise BadInput("args must be an object")
        now = self.clock()
        if op == "heartbeat":
            run = agent_ops.heartbeat(self.queue, run, now, args.get("progress"))
            return {"run_id": run.id}
        if op == "report":
            fields = _only(args, "verdict", "summary", "cost_usd", "input_tokens",
                           "output_tokens")
            run = agent_ops.report(self.queue, run, now, fields.pop("verdict", None),
                                   fields.pop("summary", None), **fields)
            log.info("run %s: the agent reported %s", run.id, run.report)
            return {"run_id": run.id, "verdict": run.report}
        if op == "review":
            fields = _only(args, "verdict", "reason")
            task = agent_ops.review(self.queue, run, now, fields.get("verdict"),
                                    fields.get("reason"))
            log.info("run %s: the reviewer's verdict moved task %s to %s", run.id, task.id,
                     task.state.value)
            self.on_change()
            return {"task": task.to_dict()}
        enqueued = agent_ops.add_child_task(self.queue, run, args.get("task"), now)
        if enqueued.created:
            self.on_change()
        return {"task": enqueued.task.to_dict(), "created": enqueued.created}


def _only(args: dict[str, Any], *accepted: str) -> dict[str, Any]:
    from taskherd.ops import BadInput

    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise BadInput(f"unknown argument {unknown[0]!r} (accepted: {', '.join(accepted)})")
    return dict(args)


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
    """Ask the daemon that started this agent to do `op` for its run."""
    env = os.environ if env is None else env
    token, home = env.get(TOKEN_ENV), env.get(HOME_ENV)
    if not token:
        raise DoorError(f"{TOKEN_ENV} is not set: this command is run by an agent inside a run",
                        "bad_input")
    if not home:
        raise DoorError(f"{HOME_ENV} is not set: the agent cannot find its daemon", "bad_input")
    path = socket_path(Path(home))
    request = json.dumps({"token": token, "op": op, "args": args}).encode() + b"\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, \
                _addressable(path) as name:
            sock.settimeout(TIMEOUT)
            sock.connect(name)
            sock.sendall(request)
            answer = _read_line(sock)
    except OSError as error:
        raise DoorError(f"no daemon answers at {path}: {error.strerror or error}",
                        "unreachable") from error
    if "error" in answer:
        raise DoorError(str(answer["error"]), str(answer.get("kind", "refused")))
    return answer.get("result") or {}


def _read_line(sock: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    try:
        answer = json.loads(data)
    except ValueError:
        raise DoorError("the daemon closed the connection without an answer", "refused") from None
    if not isinstance(answer, dict):
        raise DoorError("the daemon's answer is not a JSON object", "refused")
    return answer
