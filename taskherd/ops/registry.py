"""The agents registry: every role seen as an agent (runtime, capabilities, what it is doing,
when it was last seen, how its last run went, what it spent today), and agents registered
from outside: they work through the API or MCP, and taskherd does not spawn them."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from taskherd.model import ANY_ROLE, EVERYONE, PERSON, TASK_ADDRESS
from taskherd.ops import BadInput, Queue
from taskherd.ops.board import midnight
from taskherd.policy.costs import known_cost
from taskherd.store.agents import RegisteredAgent

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_CAPABILITIES = 50


def list_agents(queue: Queue, now: float) -> list[dict[str, Any]]:
    """Every configured role and every registered agent, by name."""
    registered = {agent.name: agent for agent in queue.store.list_agents()}
    names = sorted(set(queue.config.roles) | set(registered))
    running = Counter(run.role for run in queue.store.open_runs())
    cooled = {c.runtime: c.until for c in queue.store.active_cooldowns(now)}
    today = midnight(queue.config.daemon.timezone, now)
    spend = {row["role"]: row for row in queue.store.spend_by_role(today, today)}
    return [_agent_view(queue, name, registered.get(name), running[name], cooled,
                        spend.get(name, {})) for name in names]


def get_agent(queue: Queue, name: str, now: float) -> dict[str, Any]:
    for agent in list_agents(queue, now):
        if agent["name"] == name:
            return agent
    known = ", ".join(sorted(set(queue.config.roles) | {a.name for a in queue.store.list_agents()}))
    raise BadInput(f"no agent named {name!r} (agents: {known or 'none'})")


def register(queue: Queue, name: object, now: float, *, runtime: object = None,
             capabilities: Sequence[object] = (), description: object = None) -> RegisteredAgent:
    """Record an agent taskherd does not spawn; registering again updates it and marks it
    seen. A configured role needs no registering: its config says what it is."""
    if not isinstance(name, str) or not NAME.match(name) or name == ANY_ROLE:
        raise BadInput(f"name {name!r}: letters, digits, '_', '.' and '-' (1 to 64, not "
                       f"{ANY_ROLE!r}, {EVERYONE!r}, {PERSON!r} or {TASK_ADDRESS}ID)")
    if name in queue.config.roles:
        raise BadInput(f"{name!r} is a role in the config: its runtime and capabilities come "
                       f"from there (roles.{name}.capabilities)")
    names = [c for c in capabilities if isinstance(c, str) and 0 < len(c) <= 100]
    if len(names) != len(capabilities) or len(names) > MAX_CAPABILITIES:
        raise BadInput(f"capabilities: at most {MAX_CAPABILITIES} names of 1 to 100 characters")
    return queue.store.register_agent(name, now, runtime=_line("runtime", runtime),
                                      capabilities=names,
                                      description=_line("description", description))


def _line(field: str, value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or len(value) > 1000):
        raise BadInput(f"{field} must be text of at most 1000 characters")
    return value


def _agent_view(queue: Queue, name: str, registered: RegisteredAgent | None, running: int,
                cooled: dict[str, float], spend: dict[str, Any]) -> dict[str, Any]:
    role = queue.config.roles.get(name)
    runtime = role.runtime if role else registered.runtime if registered else None
    latest = queue.store.latest_run_of_role(name)
    ended = latest if latest is None or latest.ended_at is not None else (
        queue.store.latest_run_of_role(name, ended=True))
    seen = [moment for moment in (
        registered.last_seen_at if registered else None,
        latest and (latest.ended_at or latest.heartbeat_at or latest.spawned_at
                    or latest.claimed_at)) if moment]
    cooldown_until = cooled.get(runtime) if runtime else None
    if running:
        state = f"running {running}"
    elif cooldown_until is not None:
        state = "cooling down"
    else:
        state = "idle"
    return {
        "name": name,
        "kind": "role" if role else "external",
        "runtime": runtime,
        "capabilities": list(role.capabilities if role else registered.capabilities
                             if registered else ()),
        "description": role.description if role else registered and registered.description,
        "state": state,
        "running": running,
        "cooldown_until": cooldown_until,
        "last_seen_at": max(seen) if seen else None,
        "last_outcome": ended.outcome.value if ended and ended.outcome else None,
        "runs_today": spend.get("runs_today", 0),
        "cost_today": known_cost(spend.get("cost_today", 0.0), spend.get("unpriced_today", 0)),
        "unpriced_today": spend.get("unpriced_today", 0),
    }
