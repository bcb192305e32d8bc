"""What every command shares: exit codes, loading config and store, printing tables or JSON."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click

from taskherd.config import CONFIG_FILE, Config, ConfigError, load_config
from taskherd.store import (
    RunNotFound,
    Store,
    StoreError,
    TaskNotFound,
    TransitionRefused,
    open_store,
    shown,
)

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
def store_for(ctx: click.Context) -> Iterator[Store]:
    """Open the store and turn its refusals into the CLI's exit codes."""
    config = get_config(ctx)
    try:
        store = open_store(config.daemon.database, durability=config.daemon.durability)
    except (StoreError, OSError) as error:
        raise BadInput(f"cannot open database {shown(config.daemon.database)}: {error}") from error
    try:
        yield store
    except TransitionRefused as error:
        raise Refused(str(error)) from error
    except (TaskNotFound, RunNotFound) as error:
        raise BadInput(str(error)) from error
    except StoreError as error:
        raise Refused(str(error)) from error
    finally:
        store.close()


def now() -> float:
    """The CLI is the edge where the clock is read; everything below takes `now` in."""
    return time.time()


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def format_time(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    # The zone is named: a fleet's times read wrongly on a host in another zone otherwise.
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table: readable in a terminal, a log, or a service manager's journal."""
    cells = [[str(header) for header in headers]] + [
        ["-" if value is None else str(value) for value in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        click.echo("  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip())
        if index == 0:
            click.echo("  ".join("-" * width for width in widths))
