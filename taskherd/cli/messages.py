"""`taskherd msg …`: messages between agents and people.

Inside an agent's run, `send`, `inbox` and `read` go through its daemon with the run's
credential, and the sender is the run's task; elsewhere they open the queue, and the sender
is `@person` unless `--from` names a role or a task.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from taskherd.agent import door as agent_door
from taskherd.cli.common import (
    BadInput,
    format_time,
    json_option,
    now,
    print_json,
    print_table,
    queue_for,
)
from taskherd.cli.door import call_door
from taskherd.model import MAX_MESSAGES_LISTED, MESSAGE_KINDS, SYSTEM_SENDER, Message

# taskherd.ops.messages (and the store under it) is imported where a command opens the
# queue: an agent's `msg send` goes through its door and would pay ~60 ms for neither.

PRIORITY_WORDS = {0: "normal", 1: "high", 2: "urgent"}


@click.group("msg")
def msg_group() -> None:
    """Send and read messages between agents (a role, task:ID or @all)."""


@msg_group.command("send")
@click.argument("to")
@click.argument("body")
@click.option("--from", "sender", help="Sign as this role or task:ID (default: @person; "
              "inside an agent, its run's task).")
@click.option("--kind", "-k", type=click.Choice(MESSAGE_KINDS), default="text",
              show_default=True)
@click.option("--priority", "-P", default="normal", show_default=True,
              help="normal (0), high (1) or urgent (2).")
@click.option("--reply-to", type=int, help="The message this answers (its thread).")
@click.option("--ttl", help="Expire unread after this long, e.g. '1h'.")
@json_option
@click.pass_context
def send_command(ctx: click.Context, to: str, body: str, sender: str | None, kind: str,
                 priority: str, reply_to: int | None, ttl: str | None, as_json: bool) -> None:
    """Send BODY to TO (a role, task:ID or @all); BODY '-' reads it from stdin.

    With --kind spawn, BODY is a task spec in JSON (the fields of `task add`; the role is TO
    unless given): the task is created as a child of the sender's task, and the answer (a
    `result` message to the sender) names the new id or why not."""
    if body == "-":
        from taskherd.cli.tasks import decoded

        body = decoded(sys.stdin.buffer.read(), "stdin")
    ttl_seconds = _duration(ttl)
    args: dict[str, Any] = {"kind": kind, "priority": priority, "reply_to": reply_to,
                            "ttl": ttl_seconds}
    if agent_door.inside_run() and sender is None:
        sent = call_door("msg_send", {"to": to, "body": body, **args})["messages"]
    else:
        with queue_for(ctx) as queue:
            from taskherd.ops import messages as message_ops

            found = message_ops.send(queue, message_ops.person(sender), to, body, now(), **args)
            sent = [message.to_dict() for message in found]
    if as_json:
        print_json(sent)
    else:
        for message in sent:
            if message["sender"] == SYSTEM_SENDER:  # the answer to a spawn request
                click.echo(f"answer {message['id']}: {message['body']}")
            else:
                click.echo(f"sent message {message['id']} to {message['recipient']}")


@msg_group.command("inbox")
@click.argument("recipient", required=False)
@click.option("--limit", "-n", type=click.IntRange(1, MAX_MESSAGES_LISTED), default=100,
              show_default=True)
@json_option
@click.pass_context
def inbox_command(ctx: click.Context, recipient: str | None, limit: int, as_json: bool) -> None:
    """Unread messages to RECIPIENT (a role or task:ID), urgent first. Inside an agent,
    without RECIPIENT: those to its role and its task."""
    from taskherd.ops import messages as message_ops

    if recipient is None:
        if not agent_door.inside_run():
            raise BadInput("name the recipient (a role or task:ID), e.g. `taskherd msg inbox "
                           "coder`")
        found = call_door("msg_inbox", {"limit": limit})["messages"]
    else:
        with queue_for(ctx, writes=False) as queue:
            found = [m.to_dict() for m in message_ops.inbox(queue, recipient, now(), limit=limit)]
    _show(found, as_json)


@msg_group.command("outbox")
@click.argument("sender")
@click.option("--limit", "-n", type=click.IntRange(1, MAX_MESSAGES_LISTED), default=100,
              show_default=True)
@json_option
@click.pass_context
def outbox_command(ctx: click.Context, sender: str, limit: int, as_json: bool) -> None:
    """Messages SENDER sent (a role, task:ID or @person), newest first."""
    from taskherd.ops import messages as message_ops

    with queue_for(ctx, writes=False) as queue:
        found = message_ops.outbox(queue, sender, limit=limit)
    _show([m.to_dict() for m in found], as_json)


@msg_group.command("thread")
@click.argument("message_id", type=int)
@json_option
@click.pass_context
def thread_command(ctx: click.Context, message_id: int, as_json: bool) -> None:
    """The conversation MESSAGE_ID belongs to, oldest first."""
    from taskherd.ops import messages as message_ops

    with queue_for(ctx, writes=False) as queue:
        found = message_ops.thread(queue, message_id)
    _show([m.to_dict() for m in found], as_json, bodies=True)


@msg_group.command("read")
@click.argument("message_ids", type=int, nargs=-1, required=True)
@click.pass_context
def read_command(ctx: click.Context, message_ids: tuple[int, ...]) -> None:
    """Mark messages read."""
    from taskherd.ops import messages as message_ops

    if agent_door.inside_run():
        marked = call_door("msg_read", {"ids": list(message_ids)})["read"]
    else:
        with queue_for(ctx) as queue:
            marked = [m.id for m in message_ops.mark_read(queue, list(message_ids), now())]
    click.echo(f"marked {len(marked)} message(s) read")


@msg_group.command("readall")
@click.argument("recipient")
@click.pass_context
def readall_command(ctx: click.Context, recipient: str) -> None:
    """Mark every message to RECIPIENT read."""
    from taskherd.ops import messages as message_ops

    with queue_for(ctx) as queue:
        count = message_ops.mark_all_read(queue, recipient, now())
    click.echo(f"marked {count} message(s) read")


@msg_group.command("unread")
@click.argument("recipient")
@json_option
@click.pass_context
def unread_command(ctx: click.Context, recipient: str, as_json: bool) -> None:
    """How many unread messages RECIPIENT has."""
    from taskherd.ops import messages as message_ops

    with queue_for(ctx) as queue:
        count = message_ops.unread_count(queue, recipient, now())
    if as_json:
        print_json({"recipient": recipient, "unread": count})
    else:
        click.echo(str(count))


def _duration(text: str | None) -> float | None:
    if text is None:
        return None
    from taskherd.policy.durations import parse_duration

    try:
        return parse_duration(text, field="--ttl")
    except ValueError as error:
        raise BadInput(str(error)) from error


def _show(found: list[dict[str, Any]], as_json: bool, bodies: bool = False) -> None:
    if as_json:
        print_json(found)
        return
    rows = []
    for data in found:
        message = Message(**data)
        state = ("read" if message.read_at else "delivered" if message.delivered_at
                 else "waiting")
        body = message.body if bodies else " ".join(message.body.split())[:60]
        rows.append([message.id, format_time(message.created_at), message.sender,
                     message.recipient, PRIORITY_WORDS.get(message.priority), message.kind,
                     state, body])
    print_table(["id", "sent", "from", "to", "priority", "kind", "state", "body"], rows)
