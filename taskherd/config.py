"""taskherd.toml → validated, frozen configuration (docs/configuration.md).

Every error names the key, the bad value and what would be accepted; unknown keys are errors,
because a misspelt `max_concurent` silently ignored is a fleet running at the wrong limit.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import platformdirs

from taskherd.durations import parse_duration
from taskherd.limits import NODE, SCOPES
from taskherd.queue import DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_CAP, RetryPolicy

CONFIG_FILE = "taskherd.toml"
CONFIG_ENV = "TASKHERD_CONFIG"
HOME_ENV = "TASKHERD_HOME"  # the data dir; set for agents, and an override for tests
RUNTIMES = ("command", "claude", "chat")
ON_SHUTDOWN = ("detach", "wait", "kill")
PROMPT_VIA = ("stdin", "file", "arg")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class ConfigError(ValueError):
    """A configuration problem, worded for the person who wrote the file."""


# A role's keys: those every runtime reads, plus its runtime's own.
RUNTIME_ROLE_KEYS = {
    "command": frozenset({"command", "prompt_via"}),
    "claude": frozenset({"binary", "agent", "model", "allowed_tools", "permission_mode",
                         "mcp_config", "args", "resume"}),
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


@dataclass(frozen=True)
class DaemonConfig:
    data_dir: Path
    database: str  # a SQLite file path, or a postgres:// URL for several nodes
    durability: str = "full"
    max_concurrent: int = 3
    timezone: str | None = None  # IANA name; required once jobs exist (never silently UTC)
    node: str = field(default_factory=socket.gethostname)
    lease: float = 60.0
    poll_interval: float = 1.0  # fallback poll; the dispatcher mostly wakes on events
    on_shutdown: str = "detach"
    shutdown_grace: float = 30.0
    path: str = DEFAULT_PATH  # PATH agents run with, unless the role names one
    retention: float = 30 * 86400.0
    max_prompt_bytes: int = 1 << 20  # a larger prompt is refused where it enters the queue
    # A node silent this long is declared down by any other node, and its tasks rescued.
    node_timeout: float = 15.0
    tags: tuple[str, ...] = ()  # what this node offers (a GPU, a Mac): roles may require them

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"


@dataclass(frozen=True)
class RoleConfig:
    name: str
    runtime: str = "command"
    command: tuple[str, ...] = ()  # argv template for the command runtime
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    path: str | None = None
    prompt_via: str = "stdin"
    max_concurrent: int | None = None
    stagger: float = 0.0
    pool: str | None = None
    scope: str = "cluster"  # "node": max_concurrent and stagger count each node's runs alone
    nodes: tuple[str, ...] = ()  # tags a node must have to run this role
    max_attempts: int = 3
    backoff: float = DEFAULT_BACKOFF_BASE
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    timeout: float = 30 * 60.0
    idle_timeout: float = 10 * 60.0
    spawn_timeout: float = 30.0  # claimed but never spawned: rescued after this, no strike
    review: bool = False
    require_marker: bool = False
    # claude runtime
    binary: str | None = None
    agent: str | None = None
    model: str | None = None
    allowed_tools: tuple[str, ...] = ()
    permission_mode: str | None = None
    mcp_config: str | None = None
    args: tuple[str, ...] = ()
    resume: bool = False  # a retry continues the previous attempt's session (--resume)
    # chat runtime
    base_url: str | None = None
    api_key_env: str | None = None
    rate_limit_patterns: tuple[str, ...] = ()
    rate_limit_cooldown: float = 3600.0
    # Not a role key: the daemon's timezone, so a limit's "resets 3am" is read in it.
    timezone: str | None = None

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            backoff_base=self.backoff,
            backoff_cap=self.backoff_cap,
            rate_limit_cooldown=self.rate_limit_cooldown,
        )


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig
    roles: Mapping[str, RoleConfig] = field(default_factory=dict)
    pools: Mapping[str, int] = field(default_factory=dict)  # capacity of each pool
    jobs: tuple[Mapping[str, Any], ...] = ()  # validated by the scheduler's job parser
    source: Path | None = None  # the file it came from, if any
    pool_scopes: Mapping[str, str] = field(default_factory=dict)  # a pool's, when not cluster

    def role(self, name: str) -> RoleConfig:
        """The role's config; a role the file does not define gets the defaults."""
        return self.roles.get(name) or RoleConfig(name=name, timezone=self.daemon.timezone)

    def policy_for(self, role: str) -> RetryPolicy:
        return self.role(role).retry_policy

    def runs_here(self, role: RoleConfig) -> bool:
        """Whether this node has every tag the role requires."""
        return set(role.nodes) <= set(self.daemon.tags)

    @property
    def runnable_roles(self) -> list[str]:
        """The roles this node defines and may run (it has their tags)."""
        return [name for name, role in self.roles.items() if self.runs_here(role)]

    def check_role(self, name: str) -> None:
        """Refuse a task role the config does not know (when it defines any roles)."""
        if self.roles and name != "any" and name not in self.roles:
            known = ", ".join(sorted(self.roles))
            raise ConfigError(f"role {name!r} is not defined in the config (defined: {known}, any)")


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
    _no_unknown_keys(raw, {"daemon", "roles", "pools", "jobs"}, "", problems)
    daemon = _parse_daemon(_table(raw, "daemon"), base_dir, source is not None, problems)
    pools, pool_scopes = _parse_pools(_table(raw, "pools"), problems)
    roles = {}
    for name in _table(raw, "roles"):
        role = _parse_role(name, _table(_table(raw, "roles"), name, prefix="roles."), pools,
                           problems)
        if role is not None:
            roles[name] = replace(role, timezone=daemon.timezone)
    jobs = raw.get("jobs", [])
    if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
        problems.append("jobs must be an array of tables ([[jobs]])")
    elif jobs and daemon.timezone is None:
        problems.append("daemon.timezone is required when jobs are defined (e.g. 'Europe/Paris')")
    if problems:
        raise ConfigError(_all_problems(problems))
    config = Config(daemon, roles, pools, tuple(jobs), source, pool_scopes)
    if jobs:
        # Late import: jobs.py validates templates against this Config. A bad [[jobs]] entry
        # stops `taskherd up` here, naming jobs[N].key, before any daemon starts.
        from taskherd.jobs import JobError, parse_jobs

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
        "node_timeout": reader.duration("node_timeout"),
        "tags": reader.tags("tags"),
    }
    given = {key: value for key, value in values.items() if value is not None}
    return DaemonConfig(data_dir=data_path, database=database, **given)


def _parse_role(name: str, raw: Mapping[str, Any], pools: Mapping[str, int],
                problems: list[str]) -> RoleConfig | None:
    if name == "any":
        problems.append("roles.any: 'any' is reserved (a task for role 'any' runs as any role)")
        return None
    known_before = len(problems)
    _runtime_keys_only(name, raw, problems)
    reader = _Reader(raw, f"roles.{name}", _ALL_ROLE_KEYS, problems)
    values = {
        "runtime": reader.choice("runtime", RUNTIMES),
        "command": reader.str_list("command"),
        "workdir": reader.get("workdir", str, None),
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
        "review": reader.get("review", bool, None),
        "require_marker": reader.get("require_marker", bool, None),
        "binary": reader.get("binary", str, None),
        "agent": reader.get("agent", str, None),
        "model": reader.get("model", str, None),
        "allowed_tools": reader.str_list("allowed_tools"),
        "permission_mode": reader.get("permission_mode", str, None),
        "mcp_config": reader.get("mcp_config", str, None),
        "args": reader.str_list("args"),
        "resume": reader.get("resume", bool, None),
        "base_url": reader.get("base_url", str, None),
        "api_key_env": reader.get("api_key_env", str, None),
        "rate_limit_patterns": reader.str_list("rate_limit_patterns"),
        "rate_limit_cooldown": reader.duration("rate_limit_cooldown"),
    }
    role = RoleConfig(name=name, **{k: v for k, v in values.items() if v is not None})
    if len(problems) == known_before:  # a bad key read as unset must not also say "missing"
        try:
            _check_role(role, pools)
        except ConfigError as error:
            problems.append(str(error))
    return role


_ALL_ROLE_KEYS = {f.name for f in fields(RoleConfig)} - {"name", "timezone"}
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
    if role.backoff_cap < role.backoff:
        raise ConfigError(
            f"{where}.backoff_cap ({role.backoff_cap:g}s) is less than backoff ({role.backoff:g}s)"
        )


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

    def positive_int(self, key: str) -> int | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self._fail(key, value, "a whole number ≥ 1")
        return value

    def duration(self, key: str, allow_zero: bool = False) -> float | None:
        return self._convert(key, lambda v: _duration(v, allow_zero), "a duration like '90s', '10m', '1h'")

    def timezone(self, key: str) -> str | None:
        return self._convert(key, _zone, "an IANA time zone such as 'Europe/Paris'")

    def str_list(self, key: str) -> tuple[str, ...] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(key, value, "a list of strings")
        return tuple(value)

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

    def _convert(self, key: str, convert: Callable[[Any], Any], accepted: str) -> Any:
        if key not in self.raw:
            return None
        try:
            return convert(self.raw[key])
        except (ValueError, TypeError) as error:
            raise self._fail(key, self.raw[key], accepted) from error


def _duration(value: Any, allow_zero: bool) -> float:
    if isinstance(value, bool):
        raise TypeError("a boolean is not a duration")
    seconds = parse_duration(value)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError("must be positive")
    return seconds


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
    defined = ", ".join(sorted(new.roles)) or "none"
    for index, job in enumerate(new.jobs):
        role = job.get("role") if isinstance(job, Mapping) else None
        if isinstance(role, str) and role != "any" and role not in new.roles:
            problems.append(f"jobs[{index}] {job.get('name')!r} names role {role!r}, which this "
                            f"node does not define (defined: {defined})")
    if problems:
        raise ConfigError("; ".join(problems))
