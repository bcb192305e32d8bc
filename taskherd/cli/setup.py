"""`taskherd init`: write a commented starter taskherd.toml."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from taskherd.cli.common import BadInput
from taskherd.config import CONFIG_FILE

STARTER = """\
# taskherd configuration. Durations read as "90s", "10m", "1h".

[daemon]
# Where the queue lives. A relative path is relative to this file. Several machines
# share one PostgreSQL database instead: "postgresql://user@host/taskherd"
# (needs `pip install 'taskherd[postgres]'`).
database = "taskherd.db"
# "full" survives power loss; "normal" is faster and survives a crash of taskherd itself.
durability = "full"
# Agents running at once on this machine.
max_concurrent = 3
# Schedules run in this zone unless a job names its own. Stated, never guessed.
timezone = {timezone}
# PATH the agents (and the service) run with: the shell's PATH is not there under launchd/systemd.
path = {path}

# A role is a kind of agent. `command` is an argv list, never a shell string:
# {{task_id}}, {{run_id}}, {{role}}, {{prompt_file}} and {{workdir}} are filled in.
[roles.coder]
runtime = "command"
command = ["claude", "-p", "--output-format", "stream-json", "--verbose"]
prompt_via = "stdin"
max_concurrent = 2
max_attempts = 3
backoff = "15s"        # 15s, 30s, 60s … capped at backoff_cap
backoff_cap = "15m"
timeout = "30m"        # hard limit of one run
idle_timeout = "10m"   # no output, heartbeat or CPU for this long: stalled

# [pools]
# git-main = 1         # at most one task naming pool "git-main" runs at a time
"""


@click.command("init")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.argument("directory", type=click.Path(file_okay=False), default=".")
def init_command(force: bool, directory: str) -> None:
    """Write a commented starter taskherd.toml in DIRECTORY (default: here)."""
    target = Path(directory) / CONFIG_FILE
    if target.exists() and not force:
        raise BadInput(f"{target} already exists (use --force to overwrite it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    # JSON string syntax is valid TOML: a PATH holding a quote or a backslash stays one string.
    text = STARTER.format(timezone=json.dumps(local_timezone()),
                          path=json.dumps(os.environ.get("PATH", "")))
    target.write_text(text)
    click.echo(f"wrote {target}: edit the roles, then `taskherd task add` and `taskherd status`")


def local_timezone() -> str:
    """This machine's IANA zone, from $TZ or /etc/localtime; UTC if neither names one."""
    if os.environ.get("TZ", "").count("/") >= 1:
        return os.environ["TZ"].lstrip(":")
    try:
        link = os.readlink("/etc/localtime")
    except OSError:
        return "UTC"
    marker = "zoneinfo/"
    return link.split(marker, 1)[1] if marker in link else "UTC"
