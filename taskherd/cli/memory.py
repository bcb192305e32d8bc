"""`taskherd memory …`: long-term memory per role (or shared by every role).

Inside an agent's run, `add` and `search` go through its daemon and act on its own role.
"""

from __future__ import annotations

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
from taskherd.ops import memory as memory_ops


@click.group("memory")
def memory_group() -> None:
    """Long-term role memory: add, search (by relevance), list, forget."""


def _scope_options(command: Any) -> Any:
    command = click.option("--shared", is_flag=True, help="Every role's memory.")(command)
    return click.option("--role", "-r", help="The role whose memory it is.")(command)


@memory_group.command("add")
@click.argument("text")
@_scope_options
@click.option("--section", help="e.g. Mistakes, Learnings, Feedback.")
@json_option
@click.pass_context
def add_command(ctx: click.Context, text: str, role: str | None, shared: bool,
                section: str | None, as_json: bool) -> None:
    """Remember TEXT for a role (inside an agent: its own role)."""
    if agent_door.inside_run() and role is None:
        entry = call_door("memory_add", {"text": text, "shared": shared,
                                         "section": section})["memory"]
    else:
        with queue_for(ctx) as queue:
            scope = memory_ops.scope_of(queue, role, shared)
            entry = memory_ops.add(queue, scope, text, now(), section=section).to_dict()
    if as_json:
        print_json(entry)
    else:
        click.echo(f"remembered {entry['id']} ({entry['scope']})")


@memory_group.command("search")
@click.argument("words", nargs=-1, required=True)
@click.option("--role", "-r", help="Search this role's memory and the shared one.")
@click.option("--limit", "-n", type=click.IntRange(1, 100), default=5, show_default=True)
@json_option
@click.pass_context
def search_command(ctx: click.Context, words: tuple[str, ...], role: str | None, limit: int,
                   as_json: bool) -> None:
    """The entries most relevant to WORDS, best first: run it before acting."""
    query = " ".join(words)
    if agent_door.inside_run() and role is None:
        found = call_door("memory_search", {"query": query, "limit": limit})["memories"]
    else:
        if role is None:
            raise BadInput("name the role whose memory to search (--role NAME)")
        with queue_for(ctx, writes=False) as queue:
            scope = memory_ops.scope_of(queue, role)
            found = [m.to_dict() for m in memory_ops.search(queue, scope, query, limit=limit)]
    _show(found, as_json)


@memory_group.command("list")
@click.option("--role", "-r", help="Only this role's entries and the shared ones.")
@click.option("--limit", "-n", type=click.IntRange(1, 1000), default=50, show_default=True)
@json_option
@click.pass_context
def list_command(ctx: click.Context, role: str | None, limit: int, as_json: bool) -> None:
    """Entries, newest first."""
    with queue_for(ctx, writes=False) as queue:
        scope = memory_ops.scope_of(queue, role) if role is not None else None
        found = [m.to_dict() for m in memory_ops.list_memories(queue, scope, limit=limit)]
    _show(found, as_json)


@memory_group.command("forget")
@click.argument("memory_id", type=int)
@click.pass_context
def forget_command(ctx: click.Context, memory_id: int) -> None:
    """Delete one entry."""
    with queue_for(ctx) as queue:
        memory_ops.forget(queue, memory_id)
    click.echo(f"forgot {memory_id}")


def _show(found: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(found)
        return
    print_table(["id", "scope", "section", "source", "added", "text"],
                [[m["id"], m["scope"], m["section"], m["source"], format_time(m["created_at"]),
                  " ".join(m["text"].split())[:80]] for m in found])
