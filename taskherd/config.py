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

from taskherd.budgets import Budgets, Limits
from taskherd.durations import parse_duration
from taskherd.pricing import Price
from taskherd.queue import DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_CAP, RetryPolicy
from taskherd.worktrees import MERGE_MODES, GitSettings

CONFIG_FILE = "taskherd.toml"
CONFIG_ENV = "TASKHERD_CONFIG"
HOME_ENV = "TASKHERD_HOME"  # the data dir; set for agents, and an override for tests
RUNTIMES = ("command", "claude", "codex", "chat")
CODEX_SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
CODEX_APPROVALS = ("never", "on-request", "on-failure", "untrusted")
ON_SHUTDOWN = ("detach", "wait", "kill")
PROMPT_VIA = ("stdin", "file", "arg")
ON_INPUT = ("kill", "wait")  # what to do with an agent waiting at a question
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class ConfigError(ValueError):
    """A configuration problem, worded for the person who wrote the file."""


# A role's keys: those every runtime reads, plus its runtime's own.
RUNTIME_ROLE_KEYS = {
    "command": frozenset({"command", "prompt_via"}),
    "claude": frozenset({"binary", "agent", "model", "allowed_tools", "permission_mode",
                         "mcp_config", "args", "resume"}),
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
    max_attempts: int = 3
    backoff: float = DEFAULT_BACKOFF_BASE
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    timeout: float = 30 * 60.0
    idle_timeout: float = 10 * 60.0
    spawn_timeout: float = 30.0  # claimed but never spawned: rescued after this, no strike
    # Idle this long with a question as its last output: the agent waits for input.
    input_timeout: float = 60.0
    on_input: str = "kill"  # kill: end it as needs_input; wait: keep it for `task answer`
    input_patterns: tuple[str, ...] = ()  # the role's own prompts, besides the known ones
    loop_repeats: int = 20  # the same output block (or tool call) this often in a row: looping
    loop_window: float = 120.0  # ...within this span
    review: bool = False
    require_marker: bool = False
    budget: Limits = field(default_factory=Limits)  # its spend per day and month
    git: GitSettings | None = None  # each task in its own git worktree and branch
    # claude runtime
    binary: str | None = None
    agent: str | None = None
    model: str | None = None
    allowed_tools: tuple[str, ...] = ()
    permission_mode: str | None = None
    mcp_config: str | None = None
    args: tuple[str, ...] = ()
    resume: bool = False  # a retry continues the previous attempt's session (--resume)
    # codex runtime (binary, model, args and resume as for claude)
    sandbox: str = "workspace-write"
    approval: str = "never"  # `codex exec` runs unattended: nobody is there to approve
    # chat runtime
    base_url: str | None = None
    api_key_env: str | None = None
    rate_limit_patterns: tuple[str, ...] = ()
    rate_limit_cooldown: float = 3600.0
    # Not role keys: the daemon's timezone, so a limit's "resets 3am" is read in it, and
    # the price of the role's model from [prices], for runtimes that report tokens only.
    timezone: str | None = None
    price: Price | None = None

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
    pools: Mapping[str, int] = field(default_factory=dict)
    jobs: tuple[Mapping[str, Any], ...] = ()  # validated by the scheduler's job parser
    source: Path | None = None  # the file it came from, if any
    prices: Mapping[str, Price] = field(default_factory=dict)  # model → USD per Mtok
    budgets: Budgets = field(default_factory=Budgets)

    def role(self, name: str) -> RoleConfig:
        """The role's config; a role the file does not define gets the defaults."""
        return self.roles.get(name) or RoleConfig(name=name, timezone=self.daemon.timezone)

    def policy_for(self, role: str) -> RetryPolicy:
        return self.role(role).retry_policy

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
    _no_unknown_keys(raw, {"daemon", "roles", "pools", "prices", "budgets", "jobs"}, "",
                     problems)
    daemon = _parse_daemon(_table(raw, "daemon"), base_dir, source is not None, problems)
    pools = _parse_pools(_table(raw, "pools"), problems)
    prices = _parse_prices(_table(raw, "prices"), problems)
    roles = {}
    for name in _table(raw, "roles"):
        role = _parse_role(name, _table(_table(raw, "roles"), name, prefix="roles."), pools,
                           problems, base_dir)
        if role is not None:
            roles[name] = replace(role, timezone=daemon.timezone,
                                  price=prices.get(role.model) if role.model else None)
    budgets = _parse_budgets(_table(raw, "budgets"), roles, problems)
    jobs = raw.get("jobs", [])
    if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
        problems.append("jobs must be an array of tables ([[jobs]])")
    elif jobs and daemon.timezone is None:
        problems.append("daemon.timezone is required when jobs are defined (e.g. 'Europe/Paris')")
    if problems:
        raise ConfigError(_all_problems(problems))
    config = Config(daemon, roles, pools, tuple(jobs), source, prices, budgets)
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
    }
    given = {key: value for key, value in values.items() if value is not None}
    return DaemonConfig(data_dir=data_path, database=database, **given)


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
        "workdir": reader.get("workdir", str, None),
        "env": reader.str_map("env"),
        "path": reader.get("path", str, None),
        "prompt_via": reader.choice("prompt_via", PROMPT_VIA),
        "max_concurrent": reader.positive_int("max_concurrent"),
        "stagger": reader.duration("stagger", allow_zero=True),
        "pool": reader.get("pool", str, None),
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
        "budget": reader.limits("budget"),
        "git": reader.git("git", base_dir),
        "binary": reader.get("binary", str, None),
        "agent": reader.get("agent", str, None),
        "model": reader.get("model", str, None),
        "allowed_tools": reader.str_list("allowed_tools"),
        "permission_mode": reader.get("permission_mode", str, None),
        "mcp_config": reader.get("mcp_config", str, None),
        "args": reader.str_list("args"),
        "resume": reader.get("resume", bool, None),
        "sandbox": reader.choice("sandbox", CODEX_SANDBOXES),
        "approval": reader.choice("approval", CODEX_APPROVALS),
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


_ALL_ROLE_KEYS = {f.name for f in fields(RoleConfig)} - {"name", "timezone", "price"}
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
    if role.backoff_cap < role.backoff:
        raise ConfigError(
            f"{where}.backoff_cap ({role.backoff_cap:g}s) is less than backoff ({role.backoff:g}s)"
        )


def _parse_pools(raw: Mapping[str, Any], problems: list[str]) -> dict[str, int]:
    pools = {}
    for name, capacity in raw.items():
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            problems.append(f"pools.{name} = {capacity!r}: a capacity must be a whole number ≥ 1")
            continue
        pools[name] = capacity
    return pools


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
        """[roles.NAME.git]: repo (required), base, merge, pool, keep."""
        value = self.raw.get(key)
        if value is None:
            return None
        where = f"{self.where}.{key}"
        if not isinstance(value, dict):
            raise self._fail(key, value, 'a table such as { repo = "~/src/app", base = "main" }')
        reader = _Reader(value, where, {"repo", "base", "merge", "pool", "keep"}, self.problems)
        repo, base = reader.get("repo", str, None), reader.get("base", str, None)
        if not repo:
            raise ConfigError(f"{where}.repo is required (the repository's folder)")
        if base is not None and not _safe_ref(base):
            raise ConfigError(f"{where}.base = {base!r}: expected a branch name such as 'main'")
        given = {"base": base, "merge": reader.choice("merge", MERGE_MODES),
                 "pool": reader.get("pool", str, None), "keep": reader.duration("keep")}
        return GitSettings(base_dir / Path(repo).expanduser(),
                           **{k: v for k, v in given.items() if v is not None})

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

    def patterns(self, key: str) -> tuple[str, ...] | None:
        """A list of regular expressions, each compiled once here so a typo is named now."""
        value = self.str_list(key)
        for pattern in value or ():
            try:
                re.compile(pattern)
            except re.error as error:
                raise self._fail(key, pattern, f"a regular expression ({error})") from error
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
