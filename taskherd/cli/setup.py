"""`taskherd init`: write a commented starter taskherd.toml."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from taskherd.cli.common import BadInput
from taskherd.config import CONFIG_FILE
from taskherd.policy.walltime import local_timezone

STARTER = """\
# taskherd configuration. Durations read as "90s", "10m", "1h". The main settings, each with
# a comment (a commented-out line shows another choice); every key and its default is in
# docs/configuration.md. `taskherd doctor` checks this file against the service's environment.

[daemon]
# Where the queue lives. A relative path is relative to this file. Several machines
# share one PostgreSQL database instead: "postgresql://user@host/taskherd"
# (needs `pip install 'taskherd[postgres]'`).
database = "taskherd.db"
# Run logs and the daemon's sockets (default: .taskherd/ beside this file; created 0700).
# data_dir = ".taskherd"
# "full" survives power loss; "normal" is faster and survives a crash of taskherd itself.
durability = "full"
# Agents running at once on this machine.
max_concurrent = 3
# Schedules, and "today" in cost sums, use this zone unless a job names its own.
timezone = {timezone}
# PATH the agents (and the service) run with: the shell's PATH is not there under launchd/systemd.
path = {path}
# This daemon's name in leases and runs (default: the host name); unique per database.
# node = "build-box"
# A claim lasts this long without renewal.
lease = "60s"
# Silent this long, a node is declared down by the others and its tasks rescued at once.
node_timeout = "15s"
# What this machine offers; a role with nodes = ["gpu"] runs only on nodes tagged "gpu".
tags = []
# The daemon wakes on events; this is only the fallback look at the queue.
poll_interval = "1s"
# What `taskherd stop` does to running agents: "detach" (the next daemon re-adopts them),
# "wait" (up to shutdown_grace, then kill) or "kill".
on_shutdown = "detach"
shutdown_grace = "30s"   # how long "wait" waits
# Finished tasks, their runs and log files are pruned after this long.
retention = "30d"
# A task's prompt may hold at most this many bytes (1 MiB); a larger one is refused.
max_prompt_bytes = 1048576
# A chain of follow-up tasks stops at this depth (the reason is kept on the last task).
max_depth = 10
# The longest a rate limit pauses a runtime, whatever reset time its text names.
max_rate_limit_pause = "6h"
# Below this much free space (data dir, logs, database) the node starts nothing new, and
# resumes by itself when there is room: a full disk costs no agent a strike.
min_free_disk = "512MiB"
# How long an agent's `taskherd done|heartbeat|…` waits for a restarting daemon ("0s": not).
agent_report_wait = "60s"

# A role is a kind of agent. This one is Claude Code in print mode: taskherd reads its
# stream-json for the summary, cost, tokens and rate limits. It needs ANTHROPIC_API_KEY in
# the service's environment, or a `claude` login of the user the service runs as.
[roles.coder]
runtime = "claude"
# binary = "/usr/local/bin/claude"   # default: `claude` on `path`
# model = "sonnet"
# allowed_tools = ["Bash", "Edit", "Read"]
# permission_mode = "acceptEdits"
# workdir = "/srv/repo"              # default: the folder `taskherd up` runs in
max_concurrent = 2     # on every machine sharing the database together (scope = "node": each)
max_attempts = 3       # strikes (failed, timed out, stalled, crashed) before `dead`
backoff = "15s"        # 15s, 30s, 60s … before a retry, capped at backoff_cap
backoff_cap = "15m"
timeout = "30m"        # hard limit of one run
idle_timeout = "10m"   # no output, heartbeat or CPU for this long: stalled
rate_limit_cooldown = "1h"   # longest pause after a limit that names no reset time
max_log_bytes = "64MiB"      # a run's log keeps its head and latest output, this much in all
# review_by = "qa"     # each successful task waits for a review by role "qa" (define it)
# Each agent in a sandbox (Linux, bubblewrap): the host read-only but its workdir, no view
# of the data dir, this config or ~/.ssh, its own process namespace; caps on its whole
# process tree. `taskherd doctor` says whether this machine can make it (docs/security.md).
[roles.coder.isolation]
mode = {isolation}         # or "off": runs as your user, seeing all you see
network = "host"       # or "none" / "loopback": a network of its own
# writable = ["~/.cache/pip"]   # more paths it may write
# hidden = ["~/secrets"]        # more paths it must not see (besides ~/.ssh, ~/.aws, …)
# memory = "4G"        # its process tree is killed past this: the run fails, naming the cap
# pids = 512           # processes at once: a fork bomb stops here
# cpu = 1.5            # cores
# Follow-ups every coder task creates when it settles (agents cannot skip them):
# [[roles.coder.chain]]
# role = "qa"
# title = "QA: {{parent_title}}"
# prompt = "Check what task {{parent_id}} did: {{parent_summary}} (log: {{parent_log}})"
# Checks run after the agent says it is done, before the task completes:
# [[roles.coder.gates]]
# name = "tests"
# argv = ["python", "-m", "pytest", "-q"]

# Any other program: `command` is an argv list, never a shell string;
# {{task_id}}, {{run_id}}, {{role}}, {{prompt_file}} and {{workdir}} are filled in.
# [roles.script]
# runtime = "command"
# command = ["/usr/local/bin/my-agent", "--task", "{{task_id}}"]
# prompt_via = "stdin"   # or "file" ({{prompt_file}}) or "arg" (command must end with "--")
# [roles.script.isolation]
# mode = {isolation}

# When fewer than low_water tasks are ready, a planner task (P0) asks role "planner" to
# add work with `taskherd task add` (at most max_spawn tasks a run).
# [monitor]
# planner = "planner"
# low_water = 5
# planner_every = "4h"
# max_spawn = 20

# [pools]
# git-main = 1         # at most one task naming pool "git-main" runs at a time, fleet-wide
# gpu = {{ capacity = 1, scope = "node" }}   # one per machine

# The HTTP API, the dashboard (http://127.0.0.1:8765/) and /metrics, served by `taskherd up`
# (needs `pip install 'taskherd[api]'`). Log in with a token: `taskherd token create`.
[api]
listen = "127.0.0.1:8765"
# Another address than loopback needs TLS, or allow_plain_http = true written on purpose.
# tls_cert = "cert.pem"
# tls_key = "key.pem"
# max_body_bytes = 4194304   # a larger request body is refused (413)
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
                          path=json.dumps(unique_path(os.environ.get("PATH", ""))),
                          isolation=json.dumps(starter_isolation()))
    target.write_text(text)
    click.echo(f"wrote {target}: edit the roles, then `taskherd task add` and `taskherd status`")


def starter_isolation() -> str:
    """bwrap where bubblewrap exists (Linux); "off" elsewhere, since a sandbox that cannot
    be made blocks every task (it never runs one unconfined)."""
    return "bwrap" if sys.platform.startswith("linux") else "off"


def unique_path(path: str) -> str:
    """PATH with each folder once, in its first place (shell profiles often add twice)."""
    folders = [folder for folder in path.split(os.pathsep) if folder]
    return os.pathsep.join(dict.fromkeys(folders))
