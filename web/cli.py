"""Flask CLI commands: ``flask --app web issue-user-token USER_ID``, ``flask --app web queue ...``,
``flask --app web audit``, ``flask --app web regenerate-matching`` and ``flask --app web task ID``.

The queue and audit commands call the same service functions as the admin API
(services/operations.py) and are audited the same way, as the actor ``cli:<os user>``.
Output is plain aligned text; errors exit non-zero with the API's code and message.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import click
import redis
from flask.cli import with_appcontext

from actors.adapters import queue_figures
from services import operations, regeneration_tasks
from services.errors import DatabaseUnavailable, ServiceError
from services.limits import MAX_ID, escape_controls
from services.opsmodel import AdminActor, ItemOutcome
from web.auth import issue_user_token
from web.deps import audit_log, current, new_uow, queue_operations, redis_client, task_store

#: Longest cell shown in a table (raw entries and errors are cut with "…").
MAX_CELL = 80


@click.command("issue-user-token")
@click.argument("user_id", type=click.IntRange(1, MAX_ID))
@with_appcontext
def issue_user_token_command(user_id: int) -> None:
    """Print a user token for USER_ID, signed with SECRET_KEY (for tests and demos)."""
    secret_key = current().settings.secret_key
    if not secret_key:
        raise click.ClickException("SECRET_KEY is empty: set it to issue user tokens")
    click.echo(issue_user_token(secret_key, user_id))


def cli_actor() -> AdminActor:
    """Who runs the CLI: the OS account on this host (the shell is the credential)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return AdminActor(name=f"cli:{user}", credential=f"shell {user}@{socket.gethostname()}"[:200])


@contextmanager
def _as_click_errors() -> Iterator[None]:
    try:
        yield
    except ServiceError as exc:
        raise click.ClickException(f"{exc.code} {exc.message}") from exc
    except DatabaseUnavailable as exc:
        raise click.ClickException(f"database unavailable, nothing done: {exc}") from exc
    except redis.RedisError as exc:
        raise click.ClickException(f"Redis unavailable: {exc}") from exc


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        value = value.astimezone(current().settings.admin_zone).isoformat(timespec="seconds")
    # Stored texts (names, errors) may hold escapes a terminal would obey: shown escaped.
    text = escape_controls(str(value))
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Columns aligned on their widest cell (wide CJK characters count as one)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _echo_outcomes(items: Sequence[ItemOutcome]) -> None:
    echo_table(["id", "outcome", "code", "reason"], [(i.id, i.outcome, i.code, i.reason) for i in items])


def _paging(command: Callable[..., None]) -> Callable[..., None]:
    command = click.option("--limit", type=click.IntRange(1, operations.MAX_PAGE_SIZE), default=50)(command)
    return click.option("--offset", type=click.IntRange(0, MAX_ID), default=0)(command)


@click.group("queue")
def queue_command() -> None:
    """The report queue: figures, dead letters, quarantined payloads."""


@queue_command.command("stats")
@with_appcontext
def queue_stats() -> None:
    """Queued, delayed, in flight, dead and invalid jobs of report:queue."""
    with _as_click_errors():
        figures = queue_figures(redis_client(), hash_tag=current().keys.hash_tags)
    echo_table(
        ["queued", "delayed", "in_flight", "dead", "invalid"],
        [(figures.queued, figures.delayed, figures.in_flight, figures.dead, figures.invalid)],
    )


@queue_command.command("dead")
@_paging
@with_appcontext
def queue_dead(offset: int, limit: int) -> None:
    """List dead letters, newest first (ID is the handle for requeue and delete-dead)."""
    with _as_click_errors():
        page = operations.list_dead_letters(queue_operations(), offset=offset, limit=limit)
    rows = [(d.message_id, d.record_id, d.attempts, d.dead_at, d.last_error) for d in page.items]
    echo_table(["id", "record", "attempts", "dead_at", "last_error"], rows)
    click.echo(f"{len(page.items)} of {page.total} dead letter(s) from offset {page.offset}")


@queue_command.command("requeue")
@click.option("--all", "all_", is_flag=True, help="Requeue every dead letter.")
@click.argument("ids", nargs=-1)
@with_appcontext
def queue_requeue(all_: bool, ids: tuple[str, ...]) -> None:
    """Requeue dead letters: RetryCount 0, record back to status 3 (生成中)."""
    if all_ == bool(ids):
        raise click.UsageError("give dead letter IDS or --all (not both)")
    with _as_click_errors():
        items = operations.requeue_dead_letters(
            new_uow(), queue_operations(), audit_log(), cli_actor(), None if all_ else list(ids)
        )
    _echo_outcomes(items)


@queue_command.command("delete-dead")
@click.argument("ids", nargs=-1, required=True)
@with_appcontext
def queue_delete_dead(ids: tuple[str, ...]) -> None:
    """Delete dead letters (their records keep their status)."""
    with _as_click_errors():
        items = operations.delete_dead_letters(queue_operations(), audit_log(), cli_actor(), list(ids))
    _echo_outcomes(items)


@queue_command.command("invalid")
@_paging
@with_appcontext
def queue_invalid(offset: int, limit: int) -> None:
    """List quarantined payloads verbatim (bytes that are not UTF-8 as \\xNN)."""
    with _as_click_errors():
        page = operations.list_invalid(queue_operations(), offset=offset, limit=limit)
    echo_table(["key", "payload"], [(p.key, p.raw) for p in page.items])
    click.echo(f"{len(page.items)} of {page.total} invalid payload(s) from offset {page.offset}")


@queue_command.command("delete-invalid")
@click.argument("keys", nargs=-1, required=True)
@with_appcontext
def queue_delete_invalid(keys: tuple[str, ...]) -> None:
    """Delete quarantined payloads by key."""
    with _as_click_errors():
        items = operations.delete_invalid(queue_operations(), audit_log(), cli_actor(), list(keys))
    _echo_outcomes(items)


@queue_command.command("purge-invalid")
@click.confirmation_option(prompt="Drop every quarantined payload?")
@with_appcontext
def queue_purge_invalid() -> None:
    """Drop every quarantined payload."""
    with _as_click_errors():
        count = operations.purge_invalid(queue_operations(), audit_log(), cli_actor())
    click.echo(f"{count} invalid payload(s) purged")


@click.command("audit")
@click.option("--actor", default=None, help='e.g. "admin:1a2b3c4d5e6f" or "cli:root"')
@click.option("--action", default=None, help="e.g. requeue, batch_regenerate, purge_invalid")
@click.option("--since", type=click.DateTime(), default=None, help="naive times are ADMIN_TIMEZONE")
@click.option("--until", type=click.DateTime(), default=None)
@_paging
@with_appcontext
def audit_command(
    *,
    actor: str | None,
    action: str | None,
    since: datetime | None,
    until: datetime | None,
    offset: int,
    limit: int,
) -> None:
    """The audit trail of admin actions, newest first."""
    zone = current().settings.admin_zone
    with _as_click_errors():
        page = operations.list_audit(
            new_uow(),
            actor=actor,
            action=action,
            since=since.replace(tzinfo=zone).astimezone(UTC) if since else None,
            until=until.replace(tzinfo=zone).astimezone(UTC) if until else None,
            offset=offset,
            limit=limit,
        )
    rows = [
        (e.at, e.actor, e.credential, e.action, ",".join(map(str, e.ids)), e.outcome, e.detail)
        for e in page.items
    ]
    echo_table(["at", "actor", "credential", "action", "ids", "outcome", "detail"], rows)
    click.echo(f"{len(page.items)} of {page.total} audit entries from offset {page.offset}")


@click.command("regenerate-matching")
@click.option("--status", type=click.Choice(["3", "5"]), required=True, help="3 生成中 or 5 生成失败")
@click.option(
    "--from", "from_", type=click.DateTime(), default=None, help="submitted at or after (ADMIN_TIMEZONE)"
)
@click.option("--to", type=click.DateTime(), default=None, help="submitted before (ADMIN_TIMEZONE)")
@click.option("--user", type=click.IntRange(1, MAX_ID), default=None, help="only this user's records")
@with_appcontext
def regenerate_matching_command(
    status: str, from_: datetime | None, to: datetime | None, user: int | None
) -> None:
    """Regenerate every record matching the filter, in the background (prints the task id)."""
    zone = current().settings.admin_zone
    match = regeneration_tasks.MatchFilter(
        status=int(status),
        submitted_from=from_.replace(tzinfo=zone).astimezone(UTC) if from_ else None,
        submitted_to=to.replace(tzinfo=zone).astimezone(UTC) if to else None,
        user_id=user,
    )
    with _as_click_errors():
        started = regeneration_tasks.start_regenerate_matching(
            new_uow(), task_store(), match, actor=cli_actor(), audit=audit_log()
        )
    click.echo(f"task {started.task_id}: {started.matched} record(s) matched, queued")


@click.command("task")
@click.argument("task_id")
@with_appcontext
def task_command(task_id: str) -> None:
    """An admin task's progress."""
    with _as_click_errors():
        task = regeneration_tasks.get_task(task_store(), task_id)
    echo_table(
        ["task", "state", "filter", "matched", "pages", "regenerated", "skipped", "started", "finished"],
        [
            (
                task.task_id,
                task.state,
                regeneration_tasks.describe(task.filter),
                task.matched,
                task.pages,
                task.regenerated,
                task.skipped,
                task.started_at,
                task.finished_at,
            )
        ],
    )
    if task.error:
        click.echo(f"error: {task.error}")
