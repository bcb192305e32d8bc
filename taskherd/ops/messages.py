"""Messages: agents and people write to a role, a task (`task:ID`) or `@all`, with a
priority, a kind, a thread (`reply_to`) and an optional expiry; each message has its own
receipts (delivered into a run's prompt, read).

A message to `@all` is written once per role, so every role has its own receipts. An urgent
message to a role that sets `wake_on_urgent` adds a task for it when none is ready, so the
message is read now rather than at the role's next scheduled run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from taskherd.model import (
    EVERYONE,
    MAX_MESSAGES_LISTED,
    MESSAGE_KINDS,
    PERSON,
    TASK_ADDRESS,
    Message,
    MessageKind,
    MessagePriority,
    NewTask,
    Priority,
    Run,
)
from taskherd.model.record import Record
from taskherd.ops import BadInput, Queue
from taskherd.ops.agent import made_before
from taskherd.store import TaskNotFound
from taskherd.store.messages import NewJob, NewMessage
from taskherd.store.requests import RequestKey

MAX_BODY = 64_000  # characters: a message is read inside a prompt, not a file transfer
KINDS = MESSAGE_KINDS
PRIORITY_NAMES = {"normal": 0, "high": 1, "urgent": 2}
MAX_LIST = MAX_MESSAGES_LISTED


class Sender(Record):
    """Who sends: an address, and the run behind it when an agent sends."""

    address: str
    role: str | None = None
    run_id: int | None = None


def person(address: str | None = None) -> Sender:
    return Sender(address or PERSON)


def agent(run: Run) -> Sender:
    """An agent sends as its task, so a reply reaches that task's next run and its role."""
    return Sender(f"{TASK_ADDRESS}{run.task_id}", run.role, run.id)


def send(queue: Queue, sender: Sender, to: str, body: object, now: float, *,
         kind: str = "text", priority: object = 0, reply_to: int | None = None,
         ttl: float | None = None, once: RequestKey | None = None) -> list[Message]:
    """Send `body` to `to` (a role, `task:ID` or `@all`); one message per recipient. A second
    try of an agent's request `once` sends nothing: it answers with what the first sent."""
    if (made := made_before(queue, once)) is not None:
        return _messages(queue, made["messages"])
    if sender.run_id is None:
        check_address(queue, sender.address, "--from", allow_person=True)
    text = _body(body)
    level = parse_priority(priority)
    if kind not in KINDS:
        raise BadInput(f"kind {kind!r} is not one of: {', '.join(KINDS)}")
    if ttl is not None and not ttl > 0:
        raise BadInput(f"ttl = {ttl!r}: an expiry must be a positive duration")
    thread_id = None
    if reply_to is not None:
        parent = queue.store.get_message(reply_to)
        if parent is None:
            raise BadInput(f"reply_to = {reply_to}: no message with that id")
        thread_id = parent.thread
    if kind == MessageKind.SPAWN:
        return spawn(queue, sender, to, text, level, reply_to, thread_id, ttl, now, once)
    recipients = recipients_of(queue, to)
    batch = [NewMessage(sender.address, recipient, text, kind, level, reply_to, thread_id,
                        None if ttl is None else now + ttl, sender.role, sender.run_id)
             for recipient in recipients]
    wake = [_wake_task(queue, recipient, sender.address) for recipient in recipients
            if level == MessagePriority.URGENT and _wakes(queue, recipient)]
    return queue.store.send_messages(batch, now, wake, once)


def _messages(queue: Queue, ids: Sequence[int]) -> list[Message]:
    return [message for message_id in ids
            if (message := queue.store.get_message(message_id)) is not None]


# A spawn spec with any of these is a job (the table of `[[jobs]]` / `taskherd jobs add`):
# a task has no name and no trigger.
JOB_MARKERS = ("name", "cron", "calendar", "every", "at", "manual")


def spawn(queue: Queue, sender: Sender, to: str, body: str, priority: int,
          reply_to: int | None, thread_id: int | None, ttl: float | None,
          now: float, once: RequestKey | None = None) -> list[Message]:
    """A spawn request: `body` is a JSON task spec (the fields of `task add`), created as a
    child of the sender's task, or a job spec (a table of `[[jobs]]`, with a name and a
    trigger), added as `taskherd jobs add` adds it. Either is checked by the check its own
    door uses, then counted within the sender's spawn limits (`ops.agent`), the rule an
    agent's `task add` obeys. The request and a `result` answer (the new id, or why not) are
    written with the task or job, in one transaction; a refused spec creates nothing but the
    request and its answer."""
    if not sender.address.startswith(TASK_ADDRESS):
        raise BadInput("a spawn request comes from a task (an agent's run, or --from task:ID): "
                       "its child is created under it")
    if to == EVERYONE:
        raise BadInput("a spawn request goes to one role, not to @all")
    check_address(queue, to, "to")
    parent = int(sender.address.removeprefix(TASK_ADDRESS))
    from taskherd.ops.agent import spawn_allowance

    child, refusal = None, None
    since = _spawning_since(queue, sender, parent)
    try:
        child = _spawned(queue, parent, to, body, since, now)
    except SpawnRefusal as error:
        refusal = str(error)
    request = NewMessage(sender.address, to, body, MessageKind.SPAWN.value, priority, reply_to,
                         thread_id, None if ttl is None else now + ttl, sender.role,
                         sender.run_id)
    asked, answer, _ = queue.store.spawn_from_message(request, child, refusal, now,
                                                      spawn_allowance(queue, parent, since), once)
    return [asked, answer]


class SpawnRefusal(Exception):
    """Why a spawn request's spec is refused; it goes into the request's answer."""


def _spawned(queue: Queue, parent: int, to: str, body: str, since: float,
             now: float) -> NewTask | NewJob:
    from taskherd.ops.agent import SpawnRefused, check_spawn_limits, child_task
    from taskherd.ops.jobs import new_job
    from taskherd.store.jobs import JobRefused

    try:
        spec = json.loads(body)
    except ValueError as error:
        raise SpawnRefusal(f"not a JSON task or job spec: {error}") from None
    if isinstance(spec, dict) and "role" not in spec and not to.startswith(TASK_ADDRESS):
        spec["role"] = to  # the request's recipient is the child's role
    try:
        if isinstance(spec, dict) and any(key in spec for key in JOB_MARKERS):
            definition, first_fire = new_job(queue, spec, now)
            made: NewTask | NewJob = NewJob(definition, first_fire, parent)
        else:
            made = child_task(queue, parent, spec)
        check_spawn_limits(queue, parent, since)
    except (BadInput, JobRefused, SpawnRefused) as error:
        raise SpawnRefusal(str(error)) from None
    return made


def _spawning_since(queue: Queue, sender: Sender, task_id: int) -> float:
    """Since when the sender's additions count against max_spawn: its run's claim; for a
    person writing as `task:ID`, the task's latest claim (its creation if it never ran)."""
    if sender.run_id is not None:
        return queue.store.get_run(sender.run_id).claimed_at
    runs = queue.store.runs_of_task(task_id)
    if runs:
        return max(run.claimed_at for run in runs)
    return queue.store.get_task(task_id).created_at


def recipients_of(queue: Queue, to: str) -> list[str]:
    if to == EVERYONE:
        roles = sorted(set(queue.config.roles) | set(known_agents(queue)))
        if not roles:
            raise BadInput("@all: no roles are defined in the config to send to")
        return roles
    check_address(queue, to, "to")
    return [to]


def check_address(queue: Queue, address: object, field: str, *,
                  allow_person: bool = False) -> str:
    """A role, a task as `task:ID` (it must exist), or `@person` where a person may sign."""
    if not isinstance(address, str) or not address.strip():
        raise BadInput(f"{field} must name a role, task:ID or {EVERYONE}")
    if allow_person and address == PERSON:
        return address
    if address.startswith(TASK_ADDRESS):
        number = address.removeprefix(TASK_ADDRESS)
        if not number.isdigit():
            raise BadInput(f"{field} = {address!r}: a task is written task:ID, e.g. task:42")
        try:
            queue.store.get_task(int(number))
        except TaskNotFound:
            raise BadInput(f"{field} = {address!r}: no task with id {number}") from None
        return address
    if address.startswith("@"):
        accepted = f"{EVERYONE}, {PERSON}" if allow_person else EVERYONE
        raise BadInput(f"{field} = {address!r}: of the @ names only {accepted} is known")
    roles = set(queue.config.roles) | set(known_agents(queue))
    if roles and address not in roles:
        raise BadInput(f"{field} = {address!r}: no such role (roles: {', '.join(sorted(roles))})")
    return address


def known_agents(queue: Queue) -> list[str]:
    """Names of registered agents beyond the config's roles (the agents registry)."""
    return [agent.name for agent in queue.store.list_agents()]


def parse_priority(value: object) -> int:
    if isinstance(value, str) and value.strip().lower() in PRIORITY_NAMES:
        return PRIORITY_NAMES[value.strip().lower()]
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2:
        return value
    raise BadInput(f"priority {value!r} is not one of: 0 normal, 1 high, 2 urgent")


def inbox(queue: Queue, recipient: str, now: float, *, limit: int = 100) -> list[Message]:
    """Unread messages to `recipient` (a role or task:ID), urgent first."""
    check_address(queue, recipient, "recipient")
    return queue.store.unread_messages(recipient, now, limit=_limit(limit))


def inbox_of_run(queue: Queue, run: Run, now: float, *, limit: int = 100) -> list[Message]:
    """An agent's inbox: unread messages to its role and to its task."""
    return queue.store.unread_messages(run.role, now, also=f"{TASK_ADDRESS}{run.task_id}",
                                       limit=_limit(limit))


def outbox(queue: Queue, sender: str, *, limit: int = 100) -> list[Message]:
    check_address(queue, sender, "sender", allow_person=True)
    return queue.store.sent_messages(sender, _limit(limit))


def of_task(queue: Queue, task_id: int, now: float, *, limit: int = 100) -> list[Message]:
    """What a task's agents sent from its address (task:ID) and what waits unread for it,
    oldest first."""
    address = f"{TASK_ADDRESS}{task_id}"
    sent = queue.store.sent_messages(address, _limit(limit))
    waiting = queue.store.unread_messages(address, now, limit=_limit(limit))
    return sorted([*sent, *waiting], key=lambda message: message.id)


def thread(queue: Queue, message_id: int) -> list[Message]:
    found = queue.store.message_thread(message_id)
    if not found:
        raise BadInput(f"no message with id {message_id}")
    return found


def mark_read(queue: Queue, message_ids: Sequence[int], now: float,
              run: Run | None = None, once: RequestKey | None = None) -> list[Message]:
    """Mark messages read; an agent may mark only its own (its role's or its task's). A
    second try of `once` answers as the first did."""
    if (made := made_before(queue, once)) is not None:
        return _messages(queue, made["messages"])
    for message_id in message_ids:
        message = queue.store.get_message(message_id)
        if message is None:
            raise BadInput(f"no message with id {message_id}")
        if run is not None and message.recipient not in (run.role,
                                                         f"{TASK_ADDRESS}{run.task_id}"):
            raise BadInput(f"message {message_id} is for {message.recipient}, not for this "
                           f"run's role {run.role!r} or task {run.task_id}")
    return queue.store.mark_messages_read(message_ids, now, once)


def mark_all_read(queue: Queue, recipient: str, now: float) -> int:
    check_address(queue, recipient, "recipient")
    return queue.store.mark_all_messages_read(recipient, now)


def unread_count(queue: Queue, recipient: str, now: float) -> int:
    check_address(queue, recipient, "recipient")
    return queue.store.count_unread_messages(recipient, now)


def _wakes(queue: Queue, recipient: str) -> bool:
    return recipient in queue.config.roles and queue.config.roles[recipient].wake_on_urgent


def _wake_task(queue: Queue, role: str, sender: str) -> NewTask:
    # One open wake task per role (its dedup key): ten urgent messages wake it once, and
    # its run receives them all.
    return NewTask(role=role, title=f"Urgent message from {sender}", priority=Priority.P1,
                   prompt="An urgent message arrived for this role (below, under Messages for "
                          "you). Read it and act on it.",
                   dedup_key=f"wake-on-urgent:{role}",
                   max_attempts=queue.config.role(role).max_attempts)


def _body(body: object) -> str:
    if not isinstance(body, str) or not body.strip():
        raise BadInput("a message needs a body: some text")
    if len(body) > MAX_BODY:
        raise BadInput(f"the body is {len(body)} characters long (at most {MAX_BODY})")
    return body


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
        raise BadInput(f"limit = {limit!r}: expected a whole number from 1 to {MAX_LIST}")
    return limit
