"""What every command shares: exit codes, loading config and store, printing tables or JSON."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from taskherd.policy.timefmt import is_time, iso_time

# The config, the store and their drivers are imported where used, not here: an agent's
# `taskherd heartbeat` runs many times a run and should cost little more than Python's start.
if TYPE_CHECKING:
    from taskherd import ops
    from taskherd.model.settings import Config
    from taskherd.store import Store

EXIT_OK = 0
EXIT_REFUSED = 1  # the request was understood but the queue says no (wrong state, …)
EXIT_BAD_INPUT = 2  # bad usage, bad input, bad config: nothing was changed


class Refused(click.ClickException):
    exit_code = EXIT_REFUSED


class BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


def json_option(command: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        command
    )


def get_config(ctx: click.Context) -> Config:
    """The config named by --config (or found), loaded once per invocation."""
    root = ctx.find_root()
    root.ensure_object(dict)
    if "config" not in root.obj:
        from taskherd.config import CONFIG_FILE, load_config
        from taskherd.model.settings import ConfigError
        from taskherd.store import shown

        try:
            root.obj["config"] = config = load_config(root.params.get("config"))
        except ConfigError as error:
            raise BadInput(str(error)) from error
        if config.source is None:
            # Said on stderr, so a script reading stdout (or --json) is not disturbed.
            click.echo(f"note: no {CONFIG_FILE} here or in a folder above; using the database "
                       f"{shown(config.daemon.database)}", err=True)
    return root.obj["config"]


@contextmanager
def store_for(ctx: click.Context, writes: bool = True) -> Iterator[Store]:
    """Open the store and turn its refusals into the CLI's exit codes. A command that
    `writes` needs a database someone chose (`refuse_unchosen_database`)."""
    from taskherd import ops
    from taskherd.policy.chains import workflow_of
    from taskherd.store import (
        RunNotFound,
        StoreError,
        TaskNotFound,
        TransitionRefused,
        open_store,
        shown,
    )
    from taskherd.store.errors import environment_fault

    config = get_config(ctx)
    if writes:
        refuse_unchosen_database(config)
    try:
        store = open_store(config.daemon.database, durability=config.daemon.durability,
                           workflow=workflow_of(config), **_busy_timeout(ctx))
    except (StoreError, OSError) as error:
        where = f"cannot open database {shown(config.daemon.database)}"
        fault = environment_fault(error)  # the machine's fault (exit 1), not the config's
        if fault is not None:
            raise Refused(f"{where}: {fault}") from error
        raise BadInput(f"{where}: {error}") from error
    try:
        yield store
    except ops.BadInput as error:
        raise BadInput(str(error)) from error
    except TransitionRefused as error:
        raise Refused(str(error)) from error
    except (TaskNotFound, RunNotFound) as error:
        raise BadInput(str(error)) from error
    except StoreError as error:
        raise Refused(environment_fault(error) or str(error)) from error
    except Exception as error:
        # A driver's own error past the store (a database locked past busy_timeout, a full
        # disk, a lost connection): one line saying what to do, never a traceback.
        fault = environment_fault(error)
        if fault is None:
            raise
        raise Refused(fault) from error
    finally:
        store.close()


def _busy_timeout(ctx: click.Context) -> dict[str, Any]:
    seconds = ctx.find_root().params.get("busy_timeout")
    return {} if seconds is None else {"busy_timeout": seconds}


def fault_line(error: BaseException) -> str | None:
    """`main`'s last word on an error no command turned into an exit code: the database's or
    the disk's fault on one line, or None (a bug, whose traceback is worth reading)."""
    from taskherd.store.errors import StoreError, environment_fault

    fault = environment_fault(error)
    if fault is None and isinstance(error, StoreError):
        fault = str(error)
    return fault


def refuse_unchosen_database(config: Config) -> None:
    """Without a config file and without TASKHERD_HOME, a command would write to the
    platform's default database, which nobody chose (a forgotten `cd`, a typo'd folder):
    refused, saying how to choose one. Reads go on, with a note on stderr."""
    import os

    from taskherd.config import CONFIG_FILE
    from taskherd.config.tables import HOME_ENV
    from taskherd.store import shown

    if config.source is None and not os.environ.get(HOME_ENV):
        raise BadInput(f"no {CONFIG_FILE} here or in a folder above, and {HOME_ENV} is not set: "
                       f"this command would write to the default database "
                       f"{shown(config.daemon.database)}. Run `taskherd init` to make a config "
                       f"here, or pass --config FILE or set {HOME_ENV}; nothing was changed")


@contextmanager
def queue_for(ctx: click.Context, writes: bool = True) -> Iterator[ops.Queue]:
    """The queue the config names, for an operation; its refusals become exit codes."""
    from taskherd import ops

    with store_for(ctx, writes=writes) as store:
        yield ops.Queue(get_config(ctx), store)


def say_if_unserved(store: Store, roles: Iterable[str], now: float) -> None:
    """After a write that gives work: say on stderr when nothing will run it, so a task
    added to a queue no daemon serves, or for a role no running node can run (none defines
    it, or has the tags it needs), is not a silent wait."""
    up = [node for node in store.list_nodes() if node.status(now) == "up"]
    if not up:
        click.echo("note: no taskherd daemon is up for this database: tasks wait until "
                   "`taskherd up` runs", err=True)
        return
    for role in sorted(set(roles)):
        if not any(node.runs(role) for node in up):
            names = ", ".join(node.name for node in up)
            click.echo(f"note: no running node can run role {role!r} (none defines it or has "
                       f"the tags it needs; up: {names}): its tasks wait until one does",
                       err=True)


def since_moment(text: str | None, started: float) -> float | None:
    """A `--since` duration ('7d') as the moment that long before `started`."""
    if text is None:
        return None
    from taskherd.policy.durations import parse_duration

    try:
        return started - parse_duration(text, field="--since")
    except ValueError as error:
        raise BadInput(str(error)) from error


def now() -> float:
    """The CLI is the edge where the clock is read; everything below takes `now` in."""
    return time.time()


# Fields that hold a moment (unix seconds in the store, taskherd.policy.timefmt): JSON shows them as
# ISO 8601 with the offset, which every language parses and a person reads; `<name>_epoch`
# keeps the number.
MONEY_DIGITS = 5  # dollars to a thousandth of a cent: per-call costs are fractions of a cent


def print_json(data: Any) -> None:
    json.dump(for_json(data), sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def for_json(data: Any) -> Any:
    """`data` as --json prints it: times as ISO 8601 beside their epoch, money rounded."""
    if isinstance(data, list | tuple):
        return [for_json(item) for item in data]
    if not isinstance(data, dict):
        return data
    shown: dict[str, Any] = {}
    for key, value in data.items():
        if is_time(key, value):
            shown[key] = iso_time(value)
            shown[f"{key}_epoch"] = value
        elif key.startswith("cost") and isinstance(value, float):
            shown[key] = round(value, MONEY_DIGITS)
        else:
            shown[key] = for_json(value)
    return shown


def format_time(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    # The zone is named: a fleet's times read wrongly on a host in another zone otherwise.
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def liveness_words(liveness: dict[str, Any]) -> str:
    """An open run's verdict and what falls next: 'quiet since 10:32:05 · stalled at 10:42:05'."""
    words = liveness["verdict"]
    if liveness.get("next_at") is not None:
        clock = datetime.fromtimestamp(liveness["next_at"]).astimezone().strftime("%H:%M:%S")
        words += f" · {liveness['next']} at {clock}"
    return words


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table (shared with the demo, so it lives in views; imported here when
    used, as views loads the process layer an agent's `taskherd done` does not need)."""
    from taskherd.ops.views import print_table as table

    table(headers, rows)
