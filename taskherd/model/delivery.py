"""Delivery targets and their outbox records, and the events a task, a budget, a node or an
endpoint tells them: what config, the store, the senders and the doors all name."""

from __future__ import annotations

from typing import Any

from taskherd.model import row_fields
from taskherd.model.record import Record

CHANNELS = ("webhook", "command", "file")
FORMATS = ("json", "slack", "discord")
# What a task's settle can tell: the state it moved to, or, for a job's task that died,
# job_error too.
EVENTS = ("completed", "dead", "blocked", "needs_review", "cancelled", "job_error")
DEFAULT_EVENTS = ("completed", "dead", "blocked", "needs_review")
# What a role's budget tells its targets (ops/budget.py): its spawns paused, and resumed.
BUDGET_PAUSED, BUDGET_RESUMED = "budget_paused", "budget_resumed"
BUDGET_EVENTS = (BUDGET_PAUSED, BUDGET_RESUMED)
# What a node tells every role's targets (store/sql_nodes.py): it starts nothing new (its
# disk is full), and it starts runs again.
NODE_PAUSED, NODE_RESUMED = "node_paused", "node_resumed"
NODE_EVENTS = (NODE_PAUSED, NODE_RESUMED)
# What a runtime's endpoint tells its roles' targets (store/watch.py): it is down (a chat
# gateway refusing connections or answering 502/503/504), and a probe got through again.
ENDPOINT_DOWN, ENDPOINT_UP = "endpoint_down", "endpoint_up"
ENDPOINT_EVENTS = (ENDPOINT_DOWN, ENDPOINT_UP)
# A role's `on` may name a task's events, its budget's, its nodes' and its endpoint's; unset,
# these.
ROLE_EVENTS = EVENTS + BUDGET_EVENTS + NODE_EVENTS + ENDPOINT_EVENTS
DEFAULT_ROLE_EVENTS = DEFAULT_EVENTS + (BUDGET_PAUSED, NODE_PAUSED, ENDPOINT_DOWN)


class Alias(Record):
    name: str
    channel: str
    target: str
    format: str
    description: str | None
    created_at: float

    @classmethod
    def from_row(cls, row: Any) -> Alias:
        return cls(**row_fields(row))


class Delivery(Record):
    id: int
    alias: str
    event: str
    task_id: int | None
    payload: str
    state: str  # pending, sent, failed
    attempts: int
    next_attempt_at: float
    last_error: str | None
    created_at: float
    sent_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> Delivery:
        return cls(**row_fields(row))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
