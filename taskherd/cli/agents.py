"""`taskherd agents …`: each role as an agent, and agents registered from outside."""

from __future__ import annotations

from typing import Any

import click

from taskherd.cli.common import format_time, json_option, now, print_json, print_table, queue_for
from taskherd.ops import registry
from taskherd.policy.costs import cost_text


@click.group("agents")
def agents_group() -> None:
    """The agents registry: roles and registered external agents."""


@agents_group.command("list")
@json_option
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """Every agent: runtime, capabilities, state, last seen, last outcome, cost today."""
    with queue_for(ctx, writes=False) as queue:
        agents = registry.list_agents(queue, now())
    if as_json:
        print_json(agents)
        return
    print_table(["name", "kind", "runtime", "state", "last seen", "last outcome",
                 "runs today", "cost today", "capabilities"],
                [[a["name"], a["kind"], a["runtime"], _state(a), format_time(a["last_seen_at"]),
                  a["last_outcome"], a["runs_today"],
                  cost_text(a["cost_today"], a["unpriced_today"]),
                  ", ".join(a["capabilities"])] for a in agents])


@agents_group.command("get")
@click.argument("name")
@json_option
@click.pass_context
def get_command(ctx: click.Context, name: str, as_json: bool) -> None:
    """One agent in full."""
    with queue_for(ctx, writes=False) as queue:
        agent = registry.get_agent(queue, name, now())
    if as_json:
        print_json(agent)
        return
    shown = agent | {"state": _state(agent), "last_seen_at": format_time(agent["last_seen_at"]),
                     "capabilities": ", ".join(agent["capabilities"]) or None,
                     "cost_today": cost_text(agent["cost_today"], agent["unpriced_today"])}
    shown.pop("cooldown_until")
    for key, value in shown.items():
        if value is not None:
            click.echo(f"{key.replace('_', ' '):>13}: {value}")


@agents_group.command("register")
@click.argument("name")
@click.option("--runtime", help="What it runs on, e.g. 'claude' or 'custom'.")
@click.option("--capability", "capabilities", multiple=True, help="What it can do (repeat).")
@click.option("--description", help="A line about it.")
@json_option
@click.pass_context
def register_command(ctx: click.Context, name: str, as_json: bool, **fields: Any) -> None:
    """Record an agent taskherd does not spawn (it works through the API or MCP)."""
    with queue_for(ctx) as queue:
        agent = registry.register(queue, name, now(), **fields)
    if as_json:
        print_json(agent.__dict__)
    else:
        click.echo(f"registered agent {agent.name}")


def _state(agent: dict[str, Any]) -> str:
    if agent["state"] == "cooling down":
        return f"cooling down until {format_time(agent['cooldown_until'])}"
    return agent["state"]
