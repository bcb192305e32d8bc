"""The config's other tables: `[daemon]`, `[api]`, `[backup]`, `[messages]`, `[memory]`,
`[delivery]`, `[monitor]`, `[budgets]` and `[prices]`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from taskherd.config.reader import LIMIT_KEYS, Reader, no_unknown_keys, read_limits
from taskherd.model.settings import (
    S3_SCHEME,
    ApiConfig,
    BackupConfig,
    Budgets,
    DaemonConfig,
    DeliveryConfig,
    EmbeddingsConfig,
    MemoryConfig,
    MessagesConfig,
    MonitorConfig,
    Price,
    RoleConfig,
)

HOME_ENV = "TASKHERD_HOME"  # the data dir; set for agents, and an override for tests

ON_SHUTDOWN = ("detach", "wait", "kill")


# Keys people put in [backup] that must come from the environment or the AWS credential chain:
# a secret in the config file ends up in backups of the file, in its repository, in logs.
CREDENTIAL_KEYS = frozenset({"access_key", "secret_key", "access_key_id", "secret_access_key",
                             "aws_access_key_id", "aws_secret_access_key", "session_token",
                             "aws_session_token", "password", "secret"})


def default_data_dir() -> Path:
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV])
    # Imported here: a config file or TASKHERD_HOME names the data dir for nearly every
    # command, and platformdirs costs a command ~5% of its start.
    import platformdirs

    return Path(platformdirs.user_data_dir("taskherd", appauthor=False))


def parse_daemon(raw: Mapping[str, Any], base_dir: Path, from_file: bool,
                  problems: list[str]) -> DaemonConfig:
    reader = Reader(raw, "daemon", {f.name for f in fields(DaemonConfig)}, problems)
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


def parse_api(raw: Mapping[str, Any], base_dir: Path, problems: list[str]) -> ApiConfig:
    reader = Reader(raw, "api", {f.name for f in fields(ApiConfig)}, problems)
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


def parse_backup(raw: Mapping[str, Any], base_dir: Path,
                  problems: list[str]) -> BackupConfig:
    for key in sorted(set(raw) & CREDENTIAL_KEYS):
        problems.append(f"backup.{key}: credentials are never read from the config file; set "
                        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the daemon's environment "
                        "(or use a profile, AWS_PROFILE, or an instance role)")
    raw = {key: value for key, value in raw.items() if key not in CREDENTIAL_KEYS}
    reader = Reader(raw, "backup", {f.name for f in fields(BackupConfig)}, problems)
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


def parse_messages(raw: Mapping[str, Any], problems: list[str]) -> MessagesConfig:
    reader = Reader(raw, "messages", {f.name for f in fields(MessagesConfig)}, problems)
    values = {"inbox_messages": reader.positive_int("inbox_messages"),
              "inbox_bytes": reader.positive_int("inbox_bytes")}
    return MessagesConfig(**{k: v for k, v in values.items() if v is not None})


def parse_memory(raw: Mapping[str, Any], problems: list[str]) -> MemoryConfig:
    reader = Reader(raw, "memory", {"short_term_lines", "embeddings"}, problems)
    lines = reader.positive_int("short_term_lines")
    embeddings = None
    if "embeddings" in raw:
        table = raw["embeddings"]
        if not isinstance(table, dict):
            problems.append("memory.embeddings must be a table: { base_url = '…', model = '…' }")
        else:
            inner = Reader(table, "memory.embeddings", {"base_url", "model", "api_key_env"},
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


def parse_delivery(raw: Mapping[str, Any], problems: list[str]) -> DeliveryConfig:
    reader = Reader(raw, "delivery", {f.name for f in fields(DeliveryConfig)}, problems)
    values: dict[str, Any] = {"timeout": reader.duration("timeout"),
              "max_attempts": reader.positive_int("max_attempts"),
              "backoff": reader.duration("backoff"), "backoff_cap": reader.duration("backoff_cap")}
    return DeliveryConfig(**{k: v for k, v in values.items() if v is not None})


def parse_monitor(raw: Mapping[str, Any], roles: Mapping[str, RoleConfig],
                   problems: list[str]) -> MonitorConfig:
    reader = Reader(raw, "monitor", {f.name for f in fields(MonitorConfig)}, problems)
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


ESTIMATE_KEYS = {"unknown_run_usd", "run_estimate_usd"}


def parse_budgets(raw: Mapping[str, Any], roles: Mapping[str, RoleConfig],
                   problems: list[str]) -> Budgets:
    """[budgets]: the fleet's limits and the estimates; each role's own `budget` table."""
    reader = Reader(raw, "budgets", LIMIT_KEYS | ESTIMATE_KEYS, problems)
    if "fleet" in roles and roles["fleet"].budget:
        problems.append("roles.fleet.budget: 'fleet' names the whole fleet's budget "
                        "([budgets]); give the role another name to budget it alone")
    fleet = read_limits(raw, "budgets", reader)
    estimates = {key: reader.amount(key) for key in ESTIMATE_KEYS}
    return Budgets(fleet, {name: role.budget for name, role in roles.items()}, **estimates)


PRICE_KEYS = {"input", "output", "cached_input"}


def parse_prices(raw: Mapping[str, Any], problems: list[str]) -> dict[str, Price]:
    """[prices."MODEL"] input = …, output = …, cached_input = … (USD per million tokens)."""
    prices = {}
    for model, table in raw.items():
        where = f"prices.{model}"
        if not isinstance(table, dict):
            problems.append(f"{where} must be a table (input = 1.25, output = 10.0 in USD per "
                            "million tokens)")
            continue
        no_unknown_keys(table, PRICE_KEYS, where, problems)
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
