"""The options `task log` and `runs log` share, apart from the log's reading and rendering
(`cli/logs.py`): `task add`, in the same command group, is run by scripts many times and
should not import them."""

from __future__ import annotations

from typing import Any

import click

from taskherd.cli.common import BadInput, json_option


def log_options(command: Any) -> Any:
    """The options `task log` and `runs log` share."""
    for option in reversed([
        click.option("--lines", "-n", type=int, help="Only the last N lines."),
        click.option("--follow", "-f", is_flag=True,
                     help="Keep printing what the agent writes until its run ends."),
        click.option("--raw", is_flag=True,
                     help="A Claude Code run's stream-json events as written, not as text."),
        json_option,
    ]):
        command = option(command)
    return command


def check_log_options(lines: int | None, follow: bool, as_json: bool) -> None:
    if follow and as_json:
        raise BadInput("--follow prints the log as it grows; it cannot be combined with --json")
    if lines is not None and lines < 0:
        raise BadInput(f"--lines {lines}: must be 0 or more")
