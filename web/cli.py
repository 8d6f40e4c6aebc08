"""Flask CLI commands: ``flask --app web issue-user-token USER_ID``."""

from __future__ import annotations

import click
from flask.cli import with_appcontext

from services.limits import MAX_ID
from web.auth import issue_user_token
from web.deps import current


@click.command("issue-user-token")
@click.argument("user_id", type=click.IntRange(1, MAX_ID))
@with_appcontext
def issue_user_token_command(user_id: int) -> None:
    """Print a user token for USER_ID, signed with SECRET_KEY (for tests and demos)."""
    secret_key = current().settings.secret_key
    if not secret_key:
        raise click.ClickException("SECRET_KEY is empty: set it to issue user tokens")
    click.echo(issue_user_token(secret_key, user_id))
