"""`taskherd doctor`: one line per check of what the daemon will run with under the service.

Exit codes: 0 when no check found a problem (warnings allowed), 1 when any did, including a
config that does not load (reported as a problem line, like every other finding, rather than
as the usage error other commands exit 2 for: doctor's job is to report it).
"""

from __future__ import annotations

import click

from taskherd.cli.common import EXIT_OK, EXIT_REFUSED, json_option, print_json
from taskherd.doctor import PROBLEM, run_checks


@click.command("doctor")
@json_option
@click.pass_context
def doctor_command(ctx: click.Context, as_json: bool) -> None:
    """Check config, database, log dir, each role's command on the service PATH, zone, disk."""
    checks = run_checks(ctx.find_root().params.get("config"))
    problems = sum(check.status == PROBLEM for check in checks)
    if as_json:
        print_json({"ok": not problems, "checks": [check.to_dict() for check in checks]})
    else:
        for check in checks:
            click.echo(check.line())
        click.echo(f"\n{problems} problem(s)" if problems else "\nall good")
    ctx.exit(EXIT_REFUSED if problems else EXIT_OK)
