"""`taskherd token create|list|revoke`: tokens for the HTTP API (people, peers, scrapers)."""

from __future__ import annotations

import click

from taskherd.cli.common import format_time, json_option, now, print_json, print_table, queue_for


@click.group("token")
def token_group() -> None:
    """Tokens for the HTTP API and the dashboard, each with one scope."""


@token_group.command("create")
@click.option("--name", required=True, help="What the token is for (unique, kept forever).")
@click.option("--scope", required=True, type=click.Choice(["admin", "operator", "read", "intake"]),
              help="read: see everything; operator: also act on tasks; admin: also manage "
                   "jobs and tokens; intake: only add tasks.")
@click.option("--expires", help="Lifetime, e.g. 30d or 12h (default: until revoked).")
@click.option("--role", "roles", multiple=True,
              help="intake only: a role it may add tasks for (repeat; default: any role).")
@click.option("--rate", type=int, help="intake only: at most this many requests a minute.")
@json_option
@click.pass_context
def create_command(ctx: click.Context, name: str, scope: str, expires: str | None,
                   roles: tuple[str, ...], rate: int | None, as_json: bool) -> None:
    """Make a token and print it. It is shown this once: only its hash is kept."""
    from taskherd.ops import tokens

    with queue_for(ctx) as queue:
        made = tokens.create_token(queue, name, scope, now(), expires=expires, roles=roles,
                                   rate_per_minute=rate)
    if as_json:
        print_json(made.record.to_dict() | {"token": made.token})
        return
    click.echo(made.token)
    until = format_time(made.record.expires_at) if made.record.expires_at else "until revoked"
    click.echo(f"token {name!r} (scope {scope}, valid {until}): store it now, it is not "
               "shown again", err=True)


@token_group.command("list")
@json_option
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """Every token: name, scope, bounds, when it expires, whether it is live."""
    from taskherd.ops import tokens

    with queue_for(ctx, writes=False) as queue:
        found = tokens.list_tokens(queue)
    moment = now()
    if as_json:
        print_json([token.to_dict() | {"status": token.status(moment)} for token in found])
        return
    if not found:
        click.echo("no API tokens (make one with `taskherd token create`)")
        return
    print_table(["name", "scope", "status", "created", "expires", "roles", "rate/min"],
                [[t.name, t.scope, t.status(moment), format_time(t.created_at),
                  format_time(t.expires_at), ",".join(t.roles or ()) or "-",
                  t.rate_per_minute or "-"] for t in found])


@token_group.command("revoke")
@click.argument("name")
@click.option("--even-last-admin", is_flag=True,
              help="Revoke it even if it is the last live admin token (a leaked one).")
@click.pass_context
def revoke_command(ctx: click.Context, name: str, even_last_admin: bool) -> None:
    """Revoke the token NAME at once (the last live admin token only with
    --even-last-admin)."""
    from taskherd.ops import tokens

    with queue_for(ctx) as queue:
        tokens.revoke_token(queue, name, now(), even_last_admin=even_last_admin)
    click.echo(f"token {name!r} revoked")
