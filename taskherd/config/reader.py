"""The config's values read one by one: each read names its key when the value is wrong,
and every problem is gathered, so one run of the checks names them all."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from taskherd.model.settings import (
    MERGE_MODES,
    NETWORKS,
    ConfigError,
    FollowUp,
    Gate,
    GitSettings,
    IsolationSettings,
    Limits,
    split_listen,
)
from taskherd.model.settings import MODES as ISOLATION_MODES
from taskherd.policy.chains import ChainError, parse_chain
from taskherd.policy.durations import parse_duration
from taskherd.policy.gates import GateError, parse_gates
from taskherd.policy.sizes import ACCEPTED as SIZE_ACCEPTED
from taskherd.policy.sizes import format_size, parse_size

TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


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


def all_problems(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)


def sub_table(raw: Mapping[str, Any], key: str, prefix: str = "") -> Mapping[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{prefix}{key} must be a table, not {type(value).__name__}")
    return value


def no_unknown_keys(raw: Mapping[str, Any], known: set[str], where: str,
                     problems: list[str]) -> None:
    for key in sorted(set(raw) - known):
        dotted = f"{where}.{key}" if where else key
        value = raw[key] if not isinstance(raw[key], dict) else "{…}"
        problems.append(f"unknown key {dotted!r} = {value!r}{did_you_mean(key, known)} "
                        f"(accepted: {', '.join(sorted(known))})")


class Reader:
    """Reads one table's keys, each with a check that names `where.key` when it fails."""

    def __init__(self, raw: Mapping[str, Any], where: str, known: set[str],
                 problems: list[str]):
        no_unknown_keys(raw, known, where, problems)
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
        return read_limits(value, where, Reader(value, where, LIMIT_KEYS, self.problems))

    def git(self, key: str, base_dir: Path) -> GitSettings | None:
        """[roles.NAME.git]: repo (required), base, merge, pool, keep, merge_timeout, hooks."""
        value = self.raw.get(key)
        if value is None:
            return None
        where = f"{self.where}.{key}"
        if not isinstance(value, dict):
            raise self._fail(key, value, 'a table such as { repo = "~/src/app", base = "main" }')
        reader = Reader(value, where, {"repo", "base", "merge", "pool", "keep", "merge_timeout",
                                        "hooks"}, self.problems)
        repo, base = reader.get("repo", str, None), reader.get("base", str, None)
        if not repo:
            raise ConfigError(f"{where}.repo is required (the repository's folder)")
        if base is not None and not safe_ref(base):
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
        reader = Reader(value, where, {"mode", "network", "writable", "hidden", "memory",
                                        "pids", "cpu"}, self.problems)
        paths = {name: tuple(base_dir / Path(text).expanduser()
                             for text in reader.str_list(name) or ())
                 for name in ("writable", "hidden")}
        given: dict[str, Any] = {"mode": reader.choice("mode", ISOLATION_MODES),
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
        return self._convert(key, lambda v: read_duration(v, allow_zero),
                             "a duration like '90s', '10m', '1h'")

    def size(self, key: str, least: int = 0) -> int | None:
        accepted = f"{SIZE_ACCEPTED}, at least {format_size(least)}" if least else SIZE_ACCEPTED
        value = self._convert(key, parse_size, accepted)
        if value is not None and value < least:
            raise self._fail(key, self.raw[key], accepted)
        return value

    def listen(self, key: str) -> str | None:
        value = self._convert(key, read_listen, "'HOST:PORT', e.g. '127.0.0.1:8765'")
        return value

    def timezone(self, key: str) -> str | None:
        return self._convert(key, read_zone, "an IANA time zone such as 'Europe/Paris'")

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
        return value

    def tags(self, key: str) -> tuple[str, ...] | None:
        value = self.str_list(key)
        if value is not None and not all(TAG.fullmatch(tag) for tag in value):
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


def safe_ref(name: str) -> bool:
    """A branch name git accepts and no command line could read as an option."""
    import re

    return (bool(re.fullmatch(r"[A-Za-z0-9._/-]+", name)) and not name.startswith(("-", "/"))
            and ".." not in name and not name.endswith((".lock", "/", ".")))


def read_duration(value: Any, allow_zero: bool) -> float:
    if isinstance(value, bool):
        raise TypeError("a boolean is not a duration")
    seconds = parse_duration(value)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError("must be positive")
    return seconds


def read_listen(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    split_listen(value)
    return value


def read_zone(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # only a config naming a zone needs it

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(str(error)) from error
    return value


LIMIT_KEYS = {"daily_usd", "monthly_usd", "daily_tokens", "monthly_tokens"}


def read_limits(raw: Mapping[str, Any], where: str, reader: Reader) -> Limits:
    values: dict[str, Any] = {key: reader.amount(key) for key in ("daily_usd", "monthly_usd")}
    values |= {key: reader.positive_int(key) for key in ("daily_tokens", "monthly_tokens")}
    return Limits(**values)
