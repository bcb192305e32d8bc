"""taskherd.toml → validated, frozen configuration (docs/configuration.md).

Every error names the key, the bad value and what would be accepted; unknown keys are errors,
because a misspelt `max_concurent` silently ignored is a fleet running at the wrong limit.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import platformdirs

from taskherd.model.settings import (
    MERGE_MODES,
    NETWORKS,
    S3_SCHEME,
    ApiConfig,
    BackupConfig,
    Budgets,
    Config,
    ConfigError,
    DaemonConfig,
    DeliveryConfig,
    EmbeddingsConfig,
    FollowUp,
    Gate,
    GitSettings,
    IsolationSettings,
    Limits,
    MemoryConfig,
    MessagesConfig,
    MonitorConfig,
    Price,
    RoleConfig,
    split_listen,
)
from taskherd.model.settings import MODES as ISOLATION_MODES
from taskherd.policy.chains import ChainError, find_cycle, parse_chain
from taskherd.policy.durations import parse_duration
from taskherd.policy.gates import GateError, parse_gates
from taskherd.policy.limits import NODE, SCOPES
from taskherd.policy.sizes import ACCEPTED as SIZE_ACCEPTED
from taskherd.policy.sizes import format_size, parse_size

CONFIG_FILE = "taskherd.toml"
CONFIG_ENV = "TASKHERD_CONFIG"
HOME_ENV = "TASKHERD_HOME"  # the data dir; set for agents, and an override for tests
RUNTIMES = ("command", "claude", "codex", "chat")
CODEX_SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
CODEX_APPROVALS = ("never", "on-request", "on-failure", "untrusted")
ON_SHUTDOWN = ("detach", "wait", "kill")
PROMPT_VIA = ("stdin", "file", "arg")
ON_INPUT = ("kill", "wait")  # what to do with an agent waiting at a question
TOP_LEVEL_KEYS = ("daemon", "roles", "pools", "jobs", "monitor", "api", "backup", "messages",
                  "memory", "delivery", "prices", "budgets")
MIN_LOG_BYTES = 16 << 10  # room for the header line, the head, the cut line and a tail
# Keys people put in [backup] that must come from the environment or the AWS credential chain:
# a secret in the config file ends up in backups of the file, in its repository, in logs.
CREDENTIAL_KEYS = frozenset({"access_key", "secret_key", "access_key_id", "secret_access_key",
                             "aws_access_key_id", "aws_secret_access_key", "session_token",
                             "aws_session_token", "password", "secret"})
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


# A role's keys: those every runtime reads, plus its runtime's own.
RUNTIME_ROLE_KEYS = {
    "command": frozenset({"command", "prompt_via"}),
    "claude": frozenset({"binary", "agent", "model", "allowed_tools", "permission_mode",
                         "mcp_config", "args", "resume", "mcp"}),
    "codex": frozenset({"binary", "model", "sandbox", "approval", "args", "resume"}),
    "chat": frozenset({"base_url", "api_key_env", "model"}),
}
# Names people reach for that difflib cannot guess from spelling alone.
KEY_ALIASES = {
    "retries": "max_attempts", "max_retries": "max_attempts", "attempts": "max_attempts",
    "concurrency": "max_concurrent", "parallel": "max_concurrent", "cwd": "workdir",
    "dir": "workdir", "cmd": "command", "environment": "env", "tz": "timezone",
    "cooldown": "rate_limit_cooldown", "db": "database", "prompt": "prompt_via",
}


def did_you_mean(key: str, accepted: set[str] | frozenset[str]) -> str:
    """' (did you mean 'max_attempts'?)' for a near miss, else ''."""
    import difflib

    guess = KEY_ALIASES.get(key.lower())
    if guess not in accepted:
        close = difflib.get_close_matches(key.lower(), sorted(accepted), n=1, cutoff=0.6)
        guess = close[0] if close else None
    return f" (did you mean {guess!r}?)" if guess else ""


def find_config_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """--config, else $TASKHERD_CONFIG, else the nearest taskherd.toml in this folder or one
    above it (as git finds its repository), else none (defaults)."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        return path
    if os.environ.get(CONFIG_ENV):
        return find_config_file(os.environ[CONFIG_ENV])
    # Walking up: run from a subfolder of the fleet's folder, a command must still talk to
    # the fleet's queue, not open a new, empty one that no daemon serves.
    here = Path.cwd()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
    return None


def load_config(explicit: str | os.PathLike[str] | None = None) -> Config:
    path = find_config_file(explicit)
    if path is None:
        return parse_config({}, base_dir=Path.cwd())
    try:
        raw = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not valid UTF-8 (offset {error.start}); "
                          "TOML files are UTF-8") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from error
    try:
        return parse_config(raw, base_dir=path.parent, source=path)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from error


def parse_config(raw: Mapping[str, Any], *, base_dir: Path, source: Path | None = None) -> Config:
    """The config in `raw`; every problem in it at once (ConfigError, one per line)."""
    problems: list[str] = []
    _no_unknown_keys(raw, set(TOP_LEVEL_KEYS), "", problems)
    daemon = _parse_daemon(_table(raw, "daemon"), base_dir, source is not None, problems)
    api = _parse_api(_table(raw, "api"), base_dir, problems)
    backup = _parse_backup(_table(raw, "backup"), base_dir, problems)
    pools, pool_scopes = _parse_pools(_table(raw, "pools"), problems)
    messages = _parse_messages(_table(raw, "messages"), problems)
    memory = _parse_memory(_table(raw, "memory"), problems)
    delivery = _parse_delivery(_table(raw, "delivery"), problems)
    prices = _parse_prices(_table(raw, "prices"), problems)
    roles = {}
    for name in _table(raw, "roles"):
        role = _parse_role(name, _table(_table(raw, "roles"), name, prefix="roles."), pools,
                           problems, base_dir)
        if role is not None:
            roles[name] = replace(role, timezone=daemon.timezone,
                                  price=prices.get(role.model) if role.model else None)
    budgets = _parse_budgets(_table(raw, "budgets"), roles, problems)
    _check_workflows(roles, pools, problems)
    monitor = _parse_monitor(_table(raw, "monitor"), roles, problems)
    jobs = raw.get("jobs", [])
    if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
        problems.append("jobs must be an array of tables ([[jobs]])")
    elif jobs and daemon.timezone is None:
        problems.append("daemon.timezone is required when jobs are defined (e.g. 'Europe/Paris')")
    if problems:
        raise ConfigError(_all_problems(problems))
    config = Config(daemon, roles, pools, tuple(jobs), source, api=api, backup=backup,
                    messages=messages, memory=memory, delivery=delivery, monitor=monitor,
                    prices=prices, budgets=budgets,
                    pool_scopes=pool_scopes)
    if jobs:
        # Late import: jobs.py validates templates against this Config. A bad [[jobs]] entry
        # stops `taskherd up` here, naming jobs[N].key, before any daemon starts.
        from taskherd.policy.jobs import JobError, parse_jobs

        try:
            parse_jobs(config)
        except JobError as error:
            raise ConfigError(str(error)) from error
    return config


def make_private_dir(path: Path) -> Path:
    """Create `path` and any missing parent as 0700 (mkdir's `parents` would make them 0755):
    the data dir holds logs with prompts and agent output, the database, the agent socket."""
    missing, folder = [], path
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    return path


def _all_problems(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)


def default_data_dir() -> Path:
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV])
    return Path(platformdirs.user_data_dir("taskherd", appauthor=False))


def _parse_daemon(raw: Mapping[str, Any], base_dir: Path, from_file: bool,
                  problems: list[str]) -> DaemonConfig:
    reader = _Reader(raw, "daemon", {f.name for f in fields(DaemonConfig)}, problems)
    data_dir = reader.get("data_dir", str, None)
    if data_dir:
        data_path = base_dir / data_dir
    elif from_file and not os.environ.get(HOME_ENV):
        # Beside its config file: two fleets configured in two folders must not share one
        # log folder (run ids start at 1 in each database) or one wake socket.
        data_path = base_dir / ".taskherd"
    else:
        data_path = default_data_dir()
    database = (reader.get("database", str, None)
                or str(data_path / "taskherd.db"))
    if not database.startswith(("postgres://", "postgresql://")):
        database = str(base_dir / database)
    values = {
        "durability": reader.choice("durability", ("full", "normal")),
        "max_concurrent": reader.positive_int("max_concurrent"),
        "timezone": reader.timezone("timezone"),
        "node": reader.get("node", str, None),
        "lease": reader.duration("lease"),
        "poll_interval": reader.duration("poll_interval"),
        "on_shutdown": reader.choice("on_shutdown", ON_SHUTDOWN),
        "shutdown_grace": reader.duration("shutdown_grace"),
        "path": reader.get("path", str, None),
        "retention": reader.duration("retention"),
        "max_prompt_bytes": reader.positive_int("max_prompt_bytes"),
        "max_depth": reader.positive_int("max_depth"),
        "node_timeout": reader.duration("node_timeout"),
        "tags": reader.tags("tags"),
        "max_rate_limit_pause": reader.duration("max_rate_limit_pause"),
        "min_free_disk": reader.size("min_free_disk"),
        "agent_report_wait": reader.duration("agent_report_wait", allow_zero=True),
    }
    given = {key: value for key, value in values.items() if value is not None}
    return DaemonConfig(data_dir=data_path, database=database, **given)


def _parse_api(raw: Mapping[str, Any], base_dir: Path, problems: list[str]) -> ApiConfig:
    reader = _Reader(raw, "api", {f.name for f in fields(ApiConfig)}, problems)
    values = {
        "listen": reader.listen("listen"),
        "tls_cert": reader.get("tls_cert", str, None),
        "tls_key": reader.get("tls_key", str, None),
        "allow_plain_http": reader.get("allow_plain_http", bool, None),
        "max_body_bytes": reader.positive_int("max_body_bytes"),
        "trusted_proxies": reader.networks("trusted_proxies"),
    }
    for key in ("tls_cert", "tls_key"):
        if values[key]:
            values[key] = str(base_dir / values[key])
    api = ApiConfig(**{key: value for key, value in values.items() if value is not None})
    if bool(api.tls_cert) != bool(api.tls_key):
        problems.append("api.tls_cert and api.tls_key go together: give both or neither")
    elif api.listen and not is_loopback(api.host) and not api.tls_cert \
            and not api.allow_plain_http:
        problems.append(
            f"api.listen = {api.listen!r} is reachable from other machines, and tokens would "
            "cross the network in the clear: set api.tls_cert and api.tls_key, or write "
            "api.allow_plain_http = true if the network is yours (default: 127.0.0.1:8765)")
    return api


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere
def _parse_backup(raw: Mapping[str, Any], base_dir: Path,
                  problems: list[str]) -> BackupConfig:
    for key in sorted(set(raw) & CREDENTIAL_KEYS):
        problems.append(f"backup.{key}: credentials are never read from the config file; set "
                        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the daemon's environment "
                        "(or use a profile, AWS_PROFILE, or an instance role)")
    raw = {key: value for key, value in raw.items() if key not in CREDENTIAL_KEYS}
    reader = _Reader(raw, "backup", {f.name for f in fields(BackupConfig)}, problems)
    target = reader.get("target", str, None)
    if target is not None and not target.strip():
        problems.append("backup.target = '': expected a folder or s3://bucket/prefix")
        target = None
    elif target is not None and target.startswith(S3_SCHEME):
        if not target[len(S3_SCHEME):].split("/", 1)[0]:
            problems.append(f"backup.target = {target!r}: expected s3://bucket/prefix "
                            "(the bucket is missing)")
    elif target is not None and "://" in target:
        problems.append(f"backup.target = {target!r}: expected a folder or s3://bucket/prefix")
    elif target is not None:
        target = str(base_dir / Path(target).expanduser())
    endpoint = reader.get("endpoint_url", str, None)
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        problems.append(f"backup.endpoint_url = {endpoint!r}: expected an http:// or https:// URL")
    level = raw.get("compression_level")
    if level is not None and (isinstance(level, bool) or level not in range(10)):
        problems.append(f"backup.compression_level = {level!r}: expected a whole number 0…9")
        level = None
    values = {
        "target": target,
        "endpoint_url": endpoint,
        "region": reader.get("region", str, None),
        "snapshot_every": reader.duration("snapshot_every"),
        "snapshot_keep_for": reader.duration("snapshot_keep_for"),
        "snapshot_keep_count": reader.positive_int("snapshot_keep_count"),
        "rollup_every": reader.duration("rollup_every"),
        "rollup_keep_for": reader.duration("rollup_keep_for"),
        "rollup_keep_count": reader.positive_int("rollup_keep_count"),
        "compression_level": level,
        "connect_timeout": reader.duration("connect_timeout"),
        "read_timeout": reader.duration("read_timeout"),
    }
    return BackupConfig(**{key: value for key, value in values.items() if value is not None})


def _parse_role(name: str, raw: Mapping[str, Any], pools: Mapping[str, int],
                problems: list[str], base_dir: Path) -> RoleConfig | None:
    if name == "any":
        problems.append("roles.any: 'any' is reserved (a task for role 'any' runs as any role)")
        return None
    known_before = len(problems)
    _runtime_keys_only(name, raw, problems)
    reader = _Reader(raw, f"roles.{name}", _ALL_ROLE_KEYS, problems)
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
            _check_role(role, pools)
        except ConfigError as error:
            problems.append(str(error))
    return role


_ALL_ROLE_KEYS = ({f.name for f in fields(RoleConfig)} - {"name", "timezone", "deliver_on", "price"}
                  | {"on"})
_SHARED_ROLE_KEYS = _ALL_ROLE_KEYS - set().union(*RUNTIME_ROLE_KEYS.values())


def _runtime_keys_only(name: str, raw: Mapping[str, Any], problems: list[str]) -> None:
    """A key of another runtime on this role is a mistake the role would silently ignore."""
    runtime = raw.get("runtime", "command")
    if runtime not in RUNTIME_ROLE_KEYS:
        return  # the runtime itself is reported
    mine = _SHARED_ROLE_KEYS | RUNTIME_ROLE_KEYS[runtime]
    for key in sorted(set(raw) & _ALL_ROLE_KEYS - mine):
        owners = [r for r, keys in RUNTIME_ROLE_KEYS.items() if key in keys]
        problems.append(
            f"roles.{name}.{key} = {raw[key]!r}: a key of runtime {' and '.join(map(repr, owners))}"
            f", not of this role's runtime {runtime!r} (its own keys: "
            f"{', '.join(sorted(RUNTIME_ROLE_KEYS[runtime]))})"
        )


def _check_role(role: RoleConfig, pools: Mapping[str, int]) -> None:
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
    _check_delivery(role, where)
    if role.backoff_cap < role.backoff:
        raise ConfigError(
            f"{where}.backoff_cap ({role.backoff_cap:g}s) is less than backoff ({role.backoff:g}s)"
        )


def _parse_messages(raw: Mapping[str, Any], problems: list[str]) -> MessagesConfig:
    reader = _Reader(raw, "messages", {f.name for f in fields(MessagesConfig)}, problems)
    values = {"inbox_messages": reader.positive_int("inbox_messages"),
              "inbox_bytes": reader.positive_int("inbox_bytes")}
    return MessagesConfig(**{k: v for k, v in values.items() if v is not None})


def _parse_memory(raw: Mapping[str, Any], problems: list[str]) -> MemoryConfig:
    reader = _Reader(raw, "memory", {"short_term_lines", "embeddings"}, problems)
    lines = reader.positive_int("short_term_lines")
    embeddings = None
    if "embeddings" in raw:
        table = raw["embeddings"]
        if not isinstance(table, dict):
            problems.append("memory.embeddings must be a table: { base_url = '…', model = '…' }")
        else:
            inner = _Reader(table, "memory.embeddings", {"base_url", "model", "api_key_env"},
                            problems)
            url, model = inner.get("base_url", str, None), inner.get("model", str, None)
            key_env = inner.get("api_key_env", str, None)
            if url and not url.startswith(("http://", "https://")):
                problems.append(f"memory.embeddings.base_url = {url!r}: expected an http:// or "
                                "https:// URL")
            elif not (url and model):
                problems.append("memory.embeddings needs base_url and model")
            else:
                embeddings = EmbeddingsConfig(url, model, key_env)
    return MemoryConfig(lines or MemoryConfig.short_term_lines, embeddings)


def _parse_delivery(raw: Mapping[str, Any], problems: list[str]) -> DeliveryConfig:
    reader = _Reader(raw, "delivery", {f.name for f in fields(DeliveryConfig)}, problems)
    values = {"timeout": reader.duration("timeout"),
              "max_attempts": reader.positive_int("max_attempts"),
              "backoff": reader.duration("backoff"), "backoff_cap": reader.duration("backoff_cap")}
    return DeliveryConfig(**{k: v for k, v in values.items() if v is not None})


def _check_delivery(role: RoleConfig, where: str) -> None:
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


def _check_workflows(roles: Mapping[str, RoleConfig], pools: Mapping[str, int],
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


def _parse_monitor(raw: Mapping[str, Any], roles: Mapping[str, RoleConfig],
                   problems: list[str]) -> MonitorConfig:
    reader = _Reader(raw, "monitor", {f.name for f in fields(MonitorConfig)}, problems)
    values = {
        "planner": reader.get("planner", str, None),
        "low_water": reader.positive_int("low_water"),
        "planner_every": reader.duration("planner_every"),
        "prompt": reader.get("prompt", str, None),
        "max_spawn": reader.positive_int("max_spawn"),
    }
    planner = values["planner"]
    if planner is not None and planner not in roles:
        defined = ", ".join(sorted(roles)) or "none"
        problems.append(f"monitor.planner = {planner!r} is not a role defined in the config "
                        f"(defined: {defined})")
    return MonitorConfig(**{key: value for key, value in values.items() if value is not None})


def _parse_pools(raw: Mapping[str, Any],
                 problems: list[str]) -> tuple[dict[str, int], dict[str, str]]:
    """`name = capacity`, or `name = { capacity = N, scope = "node" }` for a pool each node
    has its own of (a GPU per machine): capacities, and the scopes that are not cluster."""
    pools, scopes = {}, {}
    for name, value in raw.items():
        if isinstance(value, dict):
            reader = _Reader(value, f"pools.{name}", {"capacity", "scope"}, problems)
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


LIMIT_KEYS = {"daily_usd", "monthly_usd", "daily_tokens", "monthly_tokens"}
ESTIMATE_KEYS = {"unknown_run_usd", "run_estimate_usd"}


def _parse_budgets(raw: Mapping[str, Any], roles: Mapping[str, RoleConfig],
                   problems: list[str]) -> Budgets:
    """[budgets]: the fleet's limits and the estimates; each role's own `budget` table."""
    reader = _Reader(raw, "budgets", LIMIT_KEYS | ESTIMATE_KEYS, problems)
    if "fleet" in roles and roles["fleet"].budget:
        problems.append("roles.fleet.budget: 'fleet' names the whole fleet's budget "
                        "([budgets]); give the role another name to budget it alone")
    fleet = _limits(raw, "budgets", reader)
    estimates = {key: reader.amount(key) for key in ESTIMATE_KEYS}
    return Budgets(fleet, {name: role.budget for name, role in roles.items()}, **estimates)


def _limits(raw: Mapping[str, Any], where: str, reader: _Reader) -> Limits:
    values = {key: reader.amount(key) for key in ("daily_usd", "monthly_usd")}
    values |= {key: reader.positive_int(key) for key in ("daily_tokens", "monthly_tokens")}
    return Limits(**values)


PRICE_KEYS = {"input", "output", "cached_input"}


def _parse_prices(raw: Mapping[str, Any], problems: list[str]) -> dict[str, Price]:
    """[prices."MODEL"] input = …, output = …, cached_input = … (USD per million tokens)."""
    prices = {}
    for model, table in raw.items():
        where = f"prices.{model}"
        if not isinstance(table, dict):
            problems.append(f"{where} must be a table (input = 1.25, output = 10.0 in USD per "
                            "million tokens)")
            continue
        _no_unknown_keys(table, PRICE_KEYS, where, problems)
        values = {}
        for key in PRICE_KEYS & set(table):
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                problems.append(f"{where}.{key} = {value!r}: expected a number ≥ 0 "
                                "(USD per million tokens)")
            else:
                values[key] = float(value)
        missing = sorted({"input", "output"} - set(table))
        if missing:
            problems.append(f"{where}: {' and '.join(missing)} required (USD per million tokens)")
        elif len(values) == len(PRICE_KEYS & set(table)):
            prices[model] = Price(**values)
    return prices


def _table(raw: Mapping[str, Any], key: str, prefix: str = "") -> Mapping[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{prefix}{key} must be a table, not {type(value).__name__}")
    return value


def _no_unknown_keys(raw: Mapping[str, Any], known: set[str], where: str,
                     problems: list[str]) -> None:
    for key in sorted(set(raw) - known):
        dotted = f"{where}.{key}" if where else key
        value = raw[key] if not isinstance(raw[key], dict) else "{…}"
        problems.append(f"unknown key {dotted!r} = {value!r}{did_you_mean(key, known)} "
                        f"(accepted: {', '.join(sorted(known))})")


class _Reader:
    """Reads one table's keys, each with a check that names `where.key` when it fails."""

    def __init__(self, raw: Mapping[str, Any], where: str, known: set[str],
                 problems: list[str]):
        _no_unknown_keys(raw, known, where, problems)
        self.raw, self.where, self.problems = raw, where, problems

    def __getattribute__(self, name: str) -> Any:
        # Every reading method notes its problem and reads the key as unset, so one pass
        # reports every bad key instead of stopping at the first.
        attribute = super().__getattribute__(name)
        if name.startswith("_") or not callable(attribute):
            return attribute

        def noting_problems(*args: Any, **kwargs: Any) -> Any:
            try:
                return attribute(*args, **kwargs)
            except ConfigError as error:
                self.problems.append(str(error))
                return None

        return noting_problems

    def _fail(self, key: str, value: Any, accepted: str) -> ConfigError:
        return ConfigError(f"{self.where}.{key} = {value!r}: expected {accepted}")

    def get(self, key: str, kind: type, default: Any) -> Any:
        if key not in self.raw:
            return default
        value = self.raw[key]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise self._fail(key, value, f"a {kind.__name__}")
        return value

    def choice(self, key: str, options: tuple[str, ...]) -> str | None:
        value = self.get(key, str, None)
        if value is not None and value not in options:
            raise self._fail(key, value, "one of " + ", ".join(options))
        return value

    def networks(self, key: str) -> tuple[Any, ...] | None:
        """A list of addresses or networks ("10.0.0.5", "10.0.0.0/8", "::1")."""
        import ipaddress

        value = self.raw.get(key)
        if value is None:
            return None
        accepted = 'a list of addresses or networks, e.g. ["127.0.0.1", "10.0.0.0/8"]'
        if not isinstance(value, list):
            raise self._fail(key, value, accepted)
        found = []
        for item in value:
            try:  # text only: ip_network(5) would read the number as 0.0.0.5
                if not isinstance(item, str):
                    raise ValueError(item)
                found.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise self._fail(key, item, accepted) from None
        return tuple(found)

    def positive_int(self, key: str) -> int | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self._fail(key, value, "a whole number ≥ 1")
        return value

    def amount(self, key: str) -> float | None:
        """A sum of money in USD, ≥ 0."""
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise self._fail(key, value, "an amount in USD ≥ 0 (e.g. 25 or 0.5)")
        return float(value)

    def limits(self, key: str) -> Limits | None:
        """A table of spending limits (daily_usd, monthly_usd, daily_tokens, monthly_tokens)."""
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._fail(key, value, "a table such as { daily_usd = 5, monthly_usd = 100 }")
        where = f"{self.where}.{key}"
        return _limits(value, where, _Reader(value, where, LIMIT_KEYS, self.problems))

    def git(self, key: str, base_dir: Path) -> GitSettings | None:
        """[roles.NAME.git]: repo (required), base, merge, pool, keep, merge_timeout, hooks."""
        value = self.raw.get(key)
        if value is None:
            return None
        where = f"{self.where}.{key}"
        if not isinstance(value, dict):
            raise self._fail(key, value, 'a table such as { repo = "~/src/app", base = "main" }')
        reader = _Reader(value, where, {"repo", "base", "merge", "pool", "keep", "merge_timeout",
                                        "hooks"}, self.problems)
        repo, base = reader.get("repo", str, None), reader.get("base", str, None)
        if not repo:
            raise ConfigError(f"{where}.repo is required (the repository's folder)")
        if base is not None and not _safe_ref(base):
            raise ConfigError(f"{where}.base = {base!r}: expected a branch name such as 'main'")
        given = {"base": base, "merge": reader.choice("merge", MERGE_MODES),
                 "pool": reader.get("pool", str, None), "keep": reader.duration("keep"),
                 "merge_timeout": reader.duration("merge_timeout"),
                 "hooks": reader.get("hooks", bool, None)}
        return GitSettings(base_dir / Path(repo).expanduser(),
                           **{k: v for k, v in given.items() if v is not None})

    def isolation(self, key: str, base_dir: Path) -> IsolationSettings | None:
        """[roles.NAME.isolation]: mode, network, writable, hidden, memory, pids, cpu."""
        value = self.raw.get(key)
        if value is None:
            return None
        where = f"{self.where}.{key}"
        if not isinstance(value, dict):
            raise self._fail(key, value, 'a table such as { mode = "bwrap", memory = "4G" }')
        reader = _Reader(value, where, {"mode", "network", "writable", "hidden", "memory",
                                        "pids", "cpu"}, self.problems)
        paths = {name: tuple(base_dir / Path(text).expanduser()
                             for text in reader.str_list(name) or ())
                 for name in ("writable", "hidden")}
        given = {"mode": reader.choice("mode", ISOLATION_MODES),
                 "network": reader.choice("network", NETWORKS),
                 "memory": reader.memory_cap("memory"), "pids": reader.positive_int("pids"),
                 "cpu": reader.cores("cpu"), **paths}
        return IsolationSettings(**{k: v for k, v in given.items() if v is not None})

    def memory_cap(self, key: str) -> int | None:
        """A memory size; "4G" alone reads as GiB here, as cgroups and systemd read it."""
        value = self.raw.get(key)
        if isinstance(value, str) and re.fullmatch(r"\s*[\d.]+\s*[KMGT]\s*", value):
            value = value.strip() + "iB"
        accepted = f"{SIZE_ACCEPTED} (or 4G, as cgroups write it), at least 16 MiB"
        size = self._convert(key, lambda _: parse_size(value), accepted)
        if size is not None and size < 16 << 20:
            raise self._fail(key, self.raw[key], accepted)
        return size

    def cores(self, key: str) -> float | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                0.01 <= value <= 4096):
            raise self._fail(key, value, "a number of cores such as 1.5 (at least 0.01)")
        return float(value)

    def duration(self, key: str, allow_zero: bool = False) -> float | None:
        return self._convert(key, lambda v: _duration(v, allow_zero), "a duration like '90s', '10m', '1h'")

    def size(self, key: str, least: int = 0) -> int | None:
        accepted = f"{SIZE_ACCEPTED}, at least {format_size(least)}" if least else SIZE_ACCEPTED
        value = self._convert(key, parse_size, accepted)
        if value is not None and value < least:
            raise self._fail(key, self.raw[key], accepted)
        return value

    def listen(self, key: str) -> str | None:
        value = self._convert(key, _listen, "'HOST:PORT', e.g. '127.0.0.1:8765'")
        return value

    def timezone(self, key: str) -> str | None:
        return self._convert(key, _zone, "an IANA time zone such as 'Europe/Paris'")

    def path(self, key: str, base_dir: Path) -> str | None:
        """A folder's path, relative to the config file's folder as every path in it is (not
        to wherever the daemon happens to run), `~` expanded."""
        value = self.get(key, str, None)
        return None if value is None else str(base_dir / Path(value).expanduser())

    def str_list(self, key: str) -> tuple[str, ...] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(key, value, "a list of strings")
        return tuple(value)

    def patterns(self, key: str) -> tuple[str, ...] | None:
        """A list of regular expressions, each compiled once here so a typo is named now."""
        value = self.str_list(key)
        for pattern in value or ():
            try:
                re.compile(pattern)
            except re.error as error:
                raise self._fail(key, pattern, f"a regular expression ({error})") from error

    def tags(self, key: str) -> tuple[str, ...] | None:
        value = self.str_list(key)
        if value is not None and not all(_TAG.fullmatch(tag) for tag in value):
            raise self._fail(key, list(value), "a list of tags made of letters, digits, '-', "
                                               "'_' or '.' (e.g. [\"gpu\", \"mac\"])")
        return value

    def str_map(self, key: str) -> dict[str, str] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._fail(key, value, "a table of strings")
        return dict(value)

    def chain(self, key: str) -> tuple[FollowUp, ...] | None:
        if key not in self.raw:
            return None
        try:
            return parse_chain(self.raw[key], f"{self.where}.{key}")
        except ChainError as error:
            raise ConfigError(str(error)) from None

    def gates(self, key: str) -> tuple[Gate, ...] | None:
        if key not in self.raw:
            return None
        try:
            return parse_gates(self.raw[key], f"{self.where}.{key}")
        except GateError as error:
            raise ConfigError(str(error)) from None

    def _convert(self, key: str, convert: Callable[[Any], Any], accepted: str) -> Any:
        if key not in self.raw:
            return None
        try:
            return convert(self.raw[key])
        except (ValueError, TypeError) as error:
            raise self._fail(key, self.raw[key], accepted) from error


def _safe_ref(name: str) -> bool:
    """A branch name git accepts and no command line could read as an option."""
    import re

    return (bool(re.fullmatch(r"[A-Za-z0-9._/-]+", name)) and not name.startswith(("-", "/"))
            and ".." not in name and not name.endswith((".lock", "/", ".")))


def _duration(value: Any, allow_zero: bool) -> float:
    if isinstance(value, bool):
        raise TypeError("a boolean is not a duration")
    seconds = parse_duration(value)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError("must be positive")
    return seconds


def _listen(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    split_listen(value)
    return value


def _zone(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(str(error)) from error
    return value


# What a running daemon cannot take from a reload: its store, its name and its files are open.
FIXED_WHILE_RUNNING = ("database", "node", "data_dir", "durability")


def check_reloadable(running: Config, new: Config) -> None:
    """Refuse a reloaded config that changes what is fixed while running, or whose jobs name
    a role this node does not define (their tasks would wait forever); say all at once."""
    problems = [f"[daemon] {key} cannot change while the daemon runs "
                f"({getattr(running.daemon, key)!s} → {getattr(new.daemon, key)!s}); restart it"
                for key in FIXED_WHILE_RUNNING
                if getattr(running.daemon, key) != getattr(new.daemon, key)]
    if running.api != new.api:  # its port is open and its thread serves the old settings
        problems.append("[api] cannot change while the daemon runs; restart it")
    defined = ", ".join(sorted(new.roles)) or "none"
    for index, job in enumerate(new.jobs):
        role = job.get("role") if isinstance(job, Mapping) else None
        if isinstance(role, str) and role != "any" and role not in new.roles:
            problems.append(f"jobs[{index}] {job.get('name')!r} names role {role!r}, which this "
                            f"node does not define (defined: {defined})")
    if problems:
        raise ConfigError("; ".join(problems))
