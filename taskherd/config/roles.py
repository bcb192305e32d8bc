"""`[roles.NAME]` and `[pools]`: each role's keys, its runtime's own, and the checks across
roles (chains and reviewers that name roles, pools, delivery targets)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from taskherd.config.reader import Reader
from taskherd.model.settings import NODE, SCOPES, ConfigError, RoleConfig
from taskherd.policy.chains import find_cycle

RUNTIMES = ("command", "claude", "codex", "chat")


CODEX_SANDBOXES = ("read-only", "workspace-write", "danger-full-access")


CODEX_APPROVALS = ("never", "on-request", "on-failure", "untrusted")


PROMPT_VIA = ("stdin", "file", "arg")


ON_INPUT = ("kill", "wait")  # what to do with an agent waiting at a question


MIN_LOG_BYTES = 16 << 10  # room for the header line, the head, the cut line and a tail


# A role's keys: those every runtime reads, plus its runtime's own.
RUNTIME_ROLE_KEYS = {
    "command": frozenset({"command", "prompt_via"}),
    "claude": frozenset({"binary", "agent", "model", "allowed_tools", "permission_mode",
                         "mcp_config", "args", "resume", "mcp"}),
    "codex": frozenset({"binary", "model", "sandbox", "approval", "args", "resume"}),
    "chat": frozenset({"base_url", "api_key_env", "model"}),
}


def parse_role(name: str, raw: Mapping[str, Any], pools: Mapping[str, int],
                problems: list[str], base_dir: Path) -> RoleConfig | None:
    if name == "any":
        problems.append("roles.any: 'any' is reserved (a task for role 'any' runs as any role)")
        return None
    known_before = len(problems)
    runtime_keys_only(name, raw, problems)
    reader = Reader(raw, f"roles.{name}", ALL_ROLE_KEYS, problems)
    values = {
        "runtime": reader.choice("runtime", RUNTIMES),
        "command": reader.str_list("command"),
        "workdir": reader.path("workdir", base_dir),
        "env": reader.str_map("env"),
        "path": reader.get("path", str, None),
        "prompt_via": reader.choice("prompt_via", PROMPT_VIA),
        "max_concurrent": reader.positive_int("max_concurrent"),
        "stagger": reader.duration("stagger", allow_zero=True),
        "pool": reader.get("pool", str, None),
        "scope": reader.choice("scope", SCOPES),
        "nodes": reader.tags("nodes"),
        "max_attempts": reader.positive_int("max_attempts"),
        "backoff": reader.duration("backoff", allow_zero=True),
        "backoff_cap": reader.duration("backoff_cap", allow_zero=True),
        "timeout": reader.duration("timeout"),
        "idle_timeout": reader.duration("idle_timeout"),
        "spawn_timeout": reader.duration("spawn_timeout"),
        "input_timeout": reader.duration("input_timeout"),
        "on_input": reader.choice("on_input", ON_INPUT),
        "input_patterns": reader.patterns("input_patterns"),
        "loop_repeats": reader.positive_int("loop_repeats"),
        "loop_window": reader.duration("loop_window"),
        "review": reader.get("review", bool, None),
        "require_marker": reader.get("require_marker", bool, None),
        "wake_on_urgent": reader.get("wake_on_urgent", bool, None),
        "capabilities": reader.str_list("capabilities"),
        "memory": reader.get("memory", bool, None),
        "deliver_to": reader.str_list("deliver_to"),
        "deliver_on": reader.str_list("on"),
        "description": reader.get("description", str, None),
        "budget": reader.limits("budget"),
        "git": reader.git("git", base_dir),
        "isolation": reader.isolation("isolation", base_dir),
        "binary": reader.get("binary", str, None),
        "agent": reader.get("agent", str, None),
        "model": reader.get("model", str, None),
        "allowed_tools": reader.str_list("allowed_tools"),
        "permission_mode": reader.get("permission_mode", str, None),
        "mcp_config": reader.get("mcp_config", str, None),
        "args": reader.str_list("args"),
        "resume": reader.get("resume", bool, None),
        "mcp": reader.get("mcp", bool, None),
        "sandbox": reader.choice("sandbox", CODEX_SANDBOXES),
        "approval": reader.choice("approval", CODEX_APPROVALS),
        "base_url": reader.get("base_url", str, None),
        "api_key_env": reader.get("api_key_env", str, None),
        "rate_limit_patterns": reader.str_list("rate_limit_patterns"),
        "rate_limit_cooldown": reader.duration("rate_limit_cooldown"),
        "max_log_bytes": reader.size("max_log_bytes", MIN_LOG_BYTES),
        "chain": reader.chain("chain"),
        "review_by": reader.get("review_by", str, None),
        "max_reviews": reader.positive_int("max_reviews"),
        "gates": reader.gates("gates"),
    }
    role = RoleConfig(name=name, **{k: v for k, v in values.items() if v is not None})
    if len(problems) == known_before:  # a bad key read as unset must not also say "missing"
        try:
            check_role(role, pools)
        except ConfigError as error:
            problems.append(str(error))
    return role


ALL_ROLE_KEYS = ({f.name for f in fields(RoleConfig)} - {"name", "timezone", "deliver_on", "price"}
                  | {"on"})


SHARED_ROLE_KEYS = ALL_ROLE_KEYS - set().union(*RUNTIME_ROLE_KEYS.values())


def runtime_keys_only(name: str, raw: Mapping[str, Any], problems: list[str]) -> None:
    """A key of another runtime on this role is a mistake the role would silently ignore."""
    runtime = raw.get("runtime", "command")
    if runtime not in RUNTIME_ROLE_KEYS:
        return  # the runtime itself is reported
    mine = SHARED_ROLE_KEYS | RUNTIME_ROLE_KEYS[runtime]
    for key in sorted(set(raw) & ALL_ROLE_KEYS - mine):
        owners = [r for r, keys in RUNTIME_ROLE_KEYS.items() if key in keys]
        problems.append(
            f"roles.{name}.{key} = {raw[key]!r}: a key of runtime {' and '.join(map(repr, owners))}"
            f", not of this role's runtime {runtime!r} (its own keys: "
            f"{', '.join(sorted(RUNTIME_ROLE_KEYS[runtime]))})"
        )


def check_role(role: RoleConfig, pools: Mapping[str, int]) -> None:
    where = f"roles.{role.name}"
    if role.runtime == "command" and not role.command:
        raise ConfigError(f"{where}.command is required for runtime 'command' (an argv list)")
    if role.runtime == "command" and role.prompt_via == "arg" and role.command[-1:] != ("--",):
        raise ConfigError(
            f"{where}.command = {list(role.command)!r}: with prompt_via = 'arg' the command must "
            "end with '--', so a prompt starting with '-' is never read as an option "
            "(or use prompt_via = 'stdin' or 'file')"
        )
    if role.runtime == "chat" and not (role.base_url and role.model):
        raise ConfigError(f"{where}: runtime 'chat' needs base_url and model")
    if role.pool is not None and role.pool not in pools:
        known = ", ".join(sorted(pools)) or "none defined"
        raise ConfigError(f"{where}.pool = {role.pool!r} is not a pool in [pools] ({known})")
    if role.loop_repeats < 2:
        raise ConfigError(f"{where}.loop_repeats = {role.loop_repeats}: expected a whole "
                          "number ≥ 2 (a block seen once is not a repeat)")
    if role.on_input == "wait" and (role.runtime != "command" or role.prompt_via == "stdin"):
        # The agent's stdin stays open for answers, so it never reads an end of input: a
        # prompt on stdin (claude's, or prompt_via = 'stdin') would never be read to its end.
        raise ConfigError(
            f"{where}.on_input = 'wait' needs runtime 'command' with prompt_via = 'file' or "
            f"'arg' (this role: runtime {role.runtime!r}, prompt_via {role.prompt_via!r}): "
            "its standard input is kept open for `taskherd task answer`")
    check_delivery(role, where)
    if role.backoff_cap < role.backoff:
        raise ConfigError(
            f"{where}.backoff_cap ({role.backoff_cap:g}s) is less than backoff ({role.backoff:g}s)"
        )


def check_delivery(role: RoleConfig, where: str) -> None:
    from taskherd.model.delivery import ROLE_EVENTS
    from taskherd.policy.taskspec import ALIAS_NAME

    bad = [target for target in role.deliver_to if not ALIAS_NAME.match(target)]
    if bad:
        raise ConfigError(f"{where}.deliver_to = {bad[0]!r}: expected an alias such as '@ops'")
    unknown = [event for event in role.deliver_on if event not in ROLE_EVENTS]
    if unknown:
        raise ConfigError(f"{where}.on = {unknown[0]!r}: expected some of "
                          f"{', '.join(ROLE_EVENTS)}")
    if role.deliver_on and not role.deliver_to:
        raise ConfigError(f"{where}.on is set without deliver_to: name the aliases to tell")


def check_workflows(roles: Mapping[str, RoleConfig], pools: Mapping[str, int],
                     problems: list[str]) -> None:
    """Chains and reviewers name roles and pools that exist, and no chain loops forever."""
    defined = ", ".join(sorted(roles)) or "none"
    for role in roles.values():
        if role.review_by is not None and role.review_by not in roles:
            problems.append(f"roles.{role.name}.review_by = {role.review_by!r} is not a role "
                            f"defined in the config (defined: {defined})")
        if role.review_by == role.name:
            problems.append(f"roles.{role.name}.review_by = {role.name!r}: a role cannot "
                            "review its own work; name another role")
        for index, follow_up in enumerate(role.chain):
            where = f"roles.{role.name}.chain[{index}]"
            if follow_up.role not in roles and follow_up.role != "any":
                problems.append(f"{where}.role = {follow_up.role!r} is not a role defined in "
                                f"the config (defined: {defined})")
            if follow_up.pool is not None and follow_up.pool not in pools:
                problems.append(f"{where}.pool = {follow_up.pool!r} is not a pool in [pools]")
    cycle = find_cycle({name: role.chain for name, role in roles.items()})
    if cycle:
        problems.append(f"roles: the default chains loop forever: {' → '.join(cycle)} "
                        "(give every link of it a `when` condition or remove one; for a "
                        "reviewer that sends work back, use review_by)")


def parse_pools(raw: Mapping[str, Any],
                 problems: list[str]) -> tuple[dict[str, int], dict[str, str]]:
    """`name = capacity`, or `name = { capacity = N, scope = "node" }` for a pool each node
    has its own of (a GPU per machine): capacities, and the scopes that are not cluster."""
    pools, scopes = {}, {}
    for name, value in raw.items():
        if isinstance(value, dict):
            reader = Reader(value, f"pools.{name}", {"capacity", "scope"}, problems)
            capacity, scope = value.get("capacity"), reader.choice("scope", SCOPES)
            if scope == NODE:
                scopes[name] = scope
        else:
            capacity = value
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            problems.append(f"pools.{name} = {value!r}: a capacity must be a whole number ≥ 1"
                            " (or a table: { capacity = 2, scope = \"node\" })")
            continue
        pools[name] = capacity
    return pools, scopes
