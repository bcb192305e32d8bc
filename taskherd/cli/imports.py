"""`taskherd import SOURCE FILE…` and `taskherd export`: schedules people already run, in
(a dry run unless --apply), and a fleet's jobs and roles, out (TOML or JSON)."""

from __future__ import annotations

import sys
from typing import Any

import click

from taskherd.cli.common import BadInput, get_config, json_option, now, print_json, queue_for
from taskherd.importers import SOURCES


@click.command("import")
@click.argument("source", type=click.Choice(SOURCES))
@click.argument("files", nargs=-1, required=True)
@click.option("--apply", "apply", is_flag=True,
              help="Add the jobs (as CLI jobs); without it nothing is written.")
@click.option("--role-map", "role_map", multiple=True, metavar="AGENT=ROLE",
              help="Run an OpenClaw agent's jobs as this role (repeat for several).")
@json_option
@click.pass_context
def import_command(ctx: click.Context, source: str, files: tuple[str, ...], apply: bool,
                   role_map: tuple[str, ...], as_json: bool) -> None:
    """Import OpenClaw, launchd, crontab or systemd schedules as jobs. FILE '-' reads stdin
    (`crontab -l | taskherd import crontab -`). Prints the roles and jobs as TOML, their next
    fires and every source field not carried over; nothing is run, nothing written without
    --apply."""
    from taskherd.ops import BadInput as OpsBadInput
    from taskherd.ops import imports

    mapping = _role_map(role_map)
    contents = [_read(name) for name in files]
    moment = now()
    try:
        plan = imports.plan_import(get_config(ctx), source, contents, mapping, moment)
    except OpsBadInput as error:
        raise BadInput(str(error)) from None
    results = None
    if apply:
        with queue_for(ctx) as queue:
            results = imports.apply_import(queue, plan, moment)
    if as_json:
        applied = {"applied": dict(results)} if results is not None else {}
        print_json(plan.to_dict(moment) | applied)
        return
    _print_plan(plan, moment, applied=results is not None)
    for name, change in results or []:
        click.echo(f"{change} job {name!r}")


def _role_map(pairs: tuple[str, ...]) -> dict[str, str]:
    mapping = {}
    for pair in pairs:
        agent, sep, role = pair.partition("=")
        if not sep or not agent.strip() or not role.strip():
            raise BadInput(f"--role-map {pair!r}: expected AGENT=ROLE, e.g. main=assistant")
        mapping[agent.strip()] = role.strip()
    return mapping


def _read(name: str) -> tuple[str, bytes]:
    if name == "-":
        return "<stdin>", sys.stdin.buffer.read()
    try:
        with open(name, "rb") as handle:
            return name, handle.read()
    except OSError as error:
        raise BadInput(f"{name}: cannot read it: {error.strerror}") from None


def _print_plan(plan: Any, moment: float, applied: bool) -> None:
    from taskherd.cli import tomlout
    from taskherd.ops.imports import job_view

    out: list[str] = ["# Roles and jobs imported from " + plan.source
                      + ("" if applied else " (dry run: nothing written; --apply adds the jobs)")]
    for name, table in plan.roles.items():
        out += ["", *tomlout.table(f"[roles.{tomlout.key(name)}]", table)]
    for name in plan.missing_roles:
        out += ["", (f"# [roles.{tomlout.key(name)}] is needed (an OpenClaw agent): define it "
                    "with its runtime, or --role-map AGENT=ROLE")]
    for job in plan.jobs:
        view = job_view(job, moment)
        out += [""]
        out += [f"# {note}" for note in view["notes"]]
        out += [f"# source: {view['source_rule']}",
                f"# next fires by taskherd: {', '.join(view['next_fires']) or 'none by itself'}"]
        out += _source_lines(view)
        if "source_next_fire" in view:
            out += [f"# the source's own next fire (kept): {view['source_next_fire']}"]
        out += tomlout.table("[[jobs]]", job.table)
    click.echo("\n".join(out))
    if plan.dropped:
        from taskherd.cli.common import print_table

        click.echo("\nNot carried over:")
        print_table(["file", "job", "field", "why"],
                    [[d.file, d.job, d.field, d.why] for d in plan.dropped])


_GAP_SAYS = {"shift": "later by the gap, 02:30 → 03:30", "skip": "not that day",
             "next_valid": "right after the jump, 02:30 → 03:00"}


def _source_lines(view: dict[str, Any]) -> list[str]:
    """The source's own fires beside taskherd's, a difference in capitals, and the job's
    policy for a time the day does not have."""
    lines = []
    if "fires_match" in view:
        by = view["source_fires_by"]
        if view["source_fires"] is None:
            lines.append(f"# next fires by {by}: not known: {view['source_fires_unknown']}")
        else:
            lines.append(f"# next fires by {by}: {', '.join(view['source_fires']) or 'none'}")
        if view["fires_match"] == "same":
            lines.append("# the same fires, DST changes of the coming year included")
        for difference in view["differences"]:
            lines.append(f"# DIFFERS from the source: {difference}")
    if "dst_gap" in view:
        lines.append(f"# a time the day does not have (DST): dst_gap = {view['dst_gap']} "
                     f"({_GAP_SAYS[view['dst_gap']]})")
    return lines


@click.command("export")
@click.option("--format", "fmt", type=click.Choice(["toml", "json"]), default="toml",
              show_default=True)
@click.pass_context
def export_command(ctx: click.Context, fmt: str) -> None:
    """Every job, and the roles they use, as TOML for taskherd.toml (or JSON)."""
    from taskherd.cli import tomlout
    from taskherd.ops import imports

    with queue_for(ctx, writes=False) as queue:
        exported = imports.export(queue)
    if fmt == "json":
        print_json(exported)
        return
    out: list[str] = []
    for name, table in exported["roles"].items():
        out += [*_nested(f"roles.{tomlout.key(name)}", table), ""]
    for job in exported["jobs"]:
        out += [*tomlout.table("[[jobs]]", job), ""]
    click.echo("\n".join(out).rstrip())


def _nested(path: str, table: dict[str, Any]) -> list[str]:
    """A table, its sub-tables as [path.sub] sections after its own keys."""
    from taskherd.cli import tomlout

    plain = {k: v for k, v in table.items() if not isinstance(v, dict)}
    lines = tomlout.table(f"[{path}]", plain)
    for key, value in table.items():
        if isinstance(value, dict):
            lines += ["", *_nested(f"{path}.{tomlout.key(key)}", value)]
    return lines
