"""taskherd.toml → validated, frozen configuration (docs/configuration.md).

Every error names the key, the bad value and what would be accepted; unknown keys are errors,
because a misspelt `max_concurent` silently ignored is a fleet running at the wrong limit.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from taskherd.config.reader import all_problems, no_unknown_keys, sub_table
from taskherd.config.roles import check_workflows, parse_pools, parse_role
from taskherd.config.tables import (
    parse_api,
    parse_backup,
    parse_budgets,
    parse_daemon,
    parse_delivery,
    parse_memory,
    parse_messages,
    parse_monitor,
    parse_prices,
)
from taskherd.model.settings import Config, ConfigError

CONFIG_FILE = "taskherd.toml"
CONFIG_ENV = "TASKHERD_CONFIG"
TOP_LEVEL_KEYS = ("daemon", "roles", "pools", "jobs", "monitor", "api", "backup", "messages",
                  "memory", "delivery", "prices", "budgets")


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
    no_unknown_keys(raw, set(TOP_LEVEL_KEYS), "", problems)
    daemon = parse_daemon(sub_table(raw, "daemon"), base_dir, source is not None, problems)
    tables: dict[str, Any] = {}
    if "api" in raw:
        tables["api"] = parse_api(sub_table(raw, "api"), base_dir, problems)
    if "backup" in raw:
        tables["backup"] = parse_backup(sub_table(raw, "backup"), base_dir, problems)
    pools, pool_scopes = parse_pools(sub_table(raw, "pools"), problems)
    for name, parse in (("messages", parse_messages), ("memory", parse_memory),
                        ("delivery", parse_delivery)):
        if name in raw:
            tables[name] = parse(sub_table(raw, name), problems)
    prices = parse_prices(sub_table(raw, "prices"), problems)
    roles = {}
    for name in sub_table(raw, "roles"):
        role = parse_role(name, sub_table(sub_table(raw, "roles"), name, prefix="roles."), pools,
                           problems, base_dir)
        if role is not None:
            roles[name] = replace(role, timezone=daemon.timezone,
                                  price=prices.get(role.model) if role.model else None)
    budgets = parse_budgets(sub_table(raw, "budgets"), roles, problems)
    check_workflows(roles, pools, problems)
    if "monitor" in raw:
        tables["monitor"] = parse_monitor(sub_table(raw, "monitor"), roles, problems)
    jobs = raw.get("jobs", [])
    if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
        problems.append("jobs must be an array of tables ([[jobs]])")
    elif jobs and daemon.timezone is None:
        problems.append("daemon.timezone is required when jobs are defined (e.g. 'Europe/Paris')")
    if problems:
        raise ConfigError(all_problems(problems))
    config = Config(daemon, roles, pools, tuple(jobs), source, tables=tables, prices=prices,
                    budgets=budgets, pool_scopes=pool_scopes)
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
