"""An agent's requests by name: what every door an agent uses (its run's socket, the HTTP
API, MCP through the socket) hands over as `op` and `args`, checked and applied through the
agent's operations. A door checks the run's credential and calls `perform`."""

from __future__ import annotations

import logging
import re
from typing import Any

from taskherd.ops import BadInput, Queue, memory, messages
from taskherd.ops import agent as agent_ops
from taskherd.store.memory import SHARED
from taskherd.store.requests import RequestKey

log = logging.getLogger("taskherd.agent.door")


REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


OPS = ("heartbeat", "report", "add_child_task", "review", "msg_send", "msg_inbox",
       "msg_read", "memory_add", "memory_search", "task_context")


def perform(queue: Queue, run: Any, op: object, args: object, now: float,
            request_id: object = None) -> tuple[dict[str, Any], bool]:
    """Do `op` for `run` (its credential already checked): the answer, and whether it may
    have added work. Shared by every door an agent uses: this socket, and the HTTP API.
    `request_id`: the same for every try of one request (None: tried once)."""
    if op not in OPS:
        raise BadInput(f"op {op!r} is not one of: {', '.join(OPS)}")
    if not isinstance(args, dict):
        raise BadInput("args must be an object")
    if request_id is not None and not (isinstance(request_id, str)
                                       and REQUEST_ID.fullmatch(request_id)):
        raise BadInput(f"request_id {request_id!r}: expected 1 to 64 letters, digits, '-' "
                       "or '_'")
    once = None if request_id is None else RequestKey(run.id, request_id)
    return _OPERATIONS[op](queue, run, args, now, once)


def _heartbeat(queue: Queue, run: Any, args: dict[str, Any], now: float,
               once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    _only(args, "progress")
    run = agent_ops.heartbeat(queue, run, now, args.get("progress"))
    return {"run_id": run.id}, False


def _report(queue: Queue, run: Any, args: dict[str, Any], now: float,
            once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    fields = _only(args, "verdict", "summary", "cost_usd", "input_tokens", "output_tokens")
    run = agent_ops.report(queue, run, now, fields.pop("verdict", None),
                           fields.pop("summary", None), **fields)
    log.info("run %s: the agent reported %s", run.id, run.report)
    return {"run_id": run.id, "verdict": run.report}, False


def _add_child_task(queue: Queue, run: Any, args: dict[str, Any], now: float,
                    once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    _only(args, "task")
    spec: Any = args.get("task")  # the agent's JSON, checked as `task add` checks a task
    enqueued = agent_ops.add_child_task(queue, run, spec, now, once)
    return {"task": enqueued.task.to_dict(), "created": enqueued.created}, enqueued.created


def _review(queue: Queue, run: Any, args: dict[str, Any], now: float,
            once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    fields = _only(args, "verdict", "reason")
    task = agent_ops.review(queue, run, now, fields.get("verdict"), fields.get("reason"), once)
    log.info("run %s: the reviewer's verdict moved task %s to %s", run.id, task.id,
             task.state.value)
    return {"task": task.to_dict()}, True


def _msg_send(queue: Queue, run: Any, args: dict[str, Any], now: float,
              once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    fields = _only(args, "to", "body", "kind", "priority", "reply_to", "ttl")
    sent = messages.send(queue, messages.agent(run), fields.pop("to", None),
                         fields.pop("body", None), now, once=once, **fields)
    # An urgent message may have woken a task.
    return {"messages": [message.to_dict() for message in sent]}, True


def _msg_inbox(queue: Queue, run: Any, args: dict[str, Any], now: float,
               once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    fields = _only(args, "limit")
    found = messages.inbox_of_run(queue, run, now, **fields)
    return {"messages": [message.to_dict() for message in found]}, False


def _msg_read(queue: Queue, run: Any, args: dict[str, Any], now: float,
              once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    ids = _only(args, "ids").get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                            for i in ids):
        raise BadInput("ids must be a list of message ids")
    marked = messages.mark_read(queue, ids, now, run, once)
    return {"read": [message.id for message in marked]}, False


def _memory_add(queue: Queue, run: Any, args: dict[str, Any], now: float,
                once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    fields = _only(args, "text", "shared", "section")
    scope = SHARED if fields.get("shared") else run.role
    added = memory.add(queue, scope, fields.get("text"), now, source="agent",
                       section=fields.get("section"), once=once)
    return {"memory": added.to_dict()}, False


def _memory_search(queue: Queue, run: Any, args: dict[str, Any], now: float,
                   once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    fields = _only(args, "query", "limit")
    found = memory.search(queue, run.role, fields.get("query"), limit=fields.get("limit", 5))
    return {"memories": [entry.to_dict() for entry in found]}, False


def _task_context(queue: Queue, run: Any, args: dict[str, Any], now: float,
                  once: RequestKey | None) -> tuple[dict[str, Any], bool]:
    _only(args)
    return agent_ops.task_context(queue, run), False


_OPERATIONS = {
    "heartbeat": _heartbeat, "report": _report, "add_child_task": _add_child_task,
    "review": _review,
    "msg_send": _msg_send, "msg_inbox": _msg_inbox, "msg_read": _msg_read,
    "memory_add": _memory_add, "memory_search": _memory_search, "task_context": _task_context,
}


def _only(args: dict[str, Any], *accepted: str) -> dict[str, Any]:
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise BadInput(f"unknown argument {unknown[0]!r} (accepted: {', '.join(accepted)})")
    return dict(args)
