"""The agent's commands' way to their run's door: a call, and its errors as exit codes."""

from __future__ import annotations

from typing import Any

import click

from taskherd.agent import door as agent_door
from taskherd.cli.common import EXIT_BAD_INPUT, EXIT_REFUSED


# click declares an exception's exit code on its class (a ClassVar): one class per code.
class DoorRefused(click.ClickException):
    exit_code = EXIT_REFUSED


class DoorBadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


def call_door(op: str, args: dict[str, Any]) -> dict[str, Any]:
    """Do `op` for this agent's run through its daemon; door errors become exit codes."""
    try:
        return agent_door.call(op, args)
    except agent_door.DoorError as error:
        failure = DoorBadInput if error.kind == "bad_input" else DoorRefused
        raise failure(str(error)) from error
