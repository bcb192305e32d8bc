"""Session ids read from an agent's output, before one goes back into a command line.

A retry of a `resume` role continues its last attempt's session: the id the runtime's stream
named goes into the next run's argv. The stream is the agent's output, and an agent (a
prompt-injected one, a tool that writes to the log) can print any line there: a
`"session_id": "--mcp-config=/tmp/x.json"` put after `--resume` made Claude Code read that
file as its MCP config. So an id is kept only in the form the CLIs write: Claude Code's
session ids and Codex's thread ids are both UUIDs (`748f6d6d-1011-44bc-8f20-b2a056f07221`,
`01a207fd-014c-7fc1-8878-0f5f983161a5`); anything else is no session, and the retry starts
a fresh one.
"""

from __future__ import annotations

import re

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_SHOWN = 80  # of a rejected value, in the daemon's log


def valid_session_id(value: object) -> str | None:
    """`value` if it is a session id as the CLIs write one, else None."""
    return value if isinstance(value, str) and _UUID.fullmatch(value) else None


def shown(value: object) -> str:
    """A rejected value as the daemon's log shows it: quoted, escaped, cut short."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"
