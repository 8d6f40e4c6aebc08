"""Flask CLI commands: ``flask --app web issue-user-token USER_ID``, ``flask --app web queue ...``,
``flask --app web audit``, ``flask --app web regenerate-matching``, ``flask --app web task ID``
and ``flask --app web drill ...``.

Each command first finds the stack it belongs to (web/cli_stack.py: ``--stack``, MI_STACK,
DATABASE_URL + REDIS_URL, or the ``.state/stack.json`` of a running ``make run``), says on
stderr which servers it talks to, and never falls back on default servers. The queue,
audit and drill commands call the same service functions as the admin API
(services/usecases/operations.py, services/usecases/drill.py) and are audited the same way, as the actor
``cli:<os user>``. Times are ISO 8601, with or without seconds and offset (no offset:
ADMIN_TIMEZONE). Output is plain aligned text; errors exit non-zero with the API's code
and message.
"""

from __future__ import annotations

import functools
import getpass
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, tzinfo
from typing import Any

import click
import redis
from flask import Flask, current_app
from flask.cli import with_appcontext

from config import ConfigError
from config.settings import Settings, environment
from redis_adapters.queue_figures import QUEUE_NAMES, queue_figures
from services.domain.errors import DatabaseUnavailable, ServiceError
from services.domain.limits import MAX_ID, escape_controls
from services.domain.opsmodel import AdminActor, ItemOutcome
from services.usecases import drill, operations, regeneration_tasks
from web.auth import issue_user_token
from web.cli_stack import find_stack
from web.deps import audit_log, current, fault_drill, new_uow, queue_operations, redis_client, task_store

#: Longest cell shown in a table (raw entries and errors are cut with "…").
MAX_CELL = 80
#: App config flag: the app's settings were read from the environment (`flask --app web`),
#: so a command finds its stack first rather than trust the environment's defaults.
SETTINGS_FROM_ENV = "MI_SETTINGS_FROM_ENV"
#: App extension: the factory that built the app, for a command to build one on its stack.
APP_FACTORY = "mi_app_factory"


#: The `--stack` option of every command that finds its stack.
STACK_HELP = (
    "the stack.json of a `make run` (or its state folder); default: MI_STACK, "
    "DATABASE_URL + REDIS_URL, else .state/stack.json of this folder or the checkout"
)


def with_stack(command: Callable[..., None]) -> Callable[..., None]:
    """Run `command` in an app on the stack it belongs to (web/cli_stack.py), after saying which;
    adds the ``--stack PATH`` option. An app built with explicit settings (a test, a program
    embedding the app) is used as it is: those settings are meant."""

    @functools.wraps(command)
    def run(*args: Any, stack_path: str | None = None, **kwargs: Any) -> None:
        if not current_app.config.get(SETTINGS_FROM_ENV) and stack_path is None:
            command(*args, **kwargs)
            return
        target = find_stack(stack_path, environment())
        click.echo(target.describe(), err=True)
        # The factory that built this app (web.create_app; web imports this module, not the reverse).
        create_app: Callable[[Settings], Flask] = current_app.extensions[APP_FACTORY]
        try:
            app = create_app(Settings.from_env(target.environment(environment())))
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from exc
        with app.app_context():
            command(*args, **kwargs)

    option = click.option("--stack", "stack_path", default=None, metavar="PATH", help=STACK_HELP)
    return option(with_appcontext(run))


class AdminTime(click.ParamType):  # type: ignore[type-arg]
    """An ISO 8601 date or time: `2025-01-15`, `2025-01-15T08:00`, `2025-01-15 08:00:30`,
    `2025-01-15T08:00+08:00`, `...Z`. Without an offset it is read in ADMIN_TIMEZONE."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return datetime.fromisoformat(str(value).strip())
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO 8601 time: e.g. 2025-01-15, 2025-01-15T08:00, "
                "2025-01-15T08:00:00+08:00",
                param,
                ctx,
            )


ADMIN_TIME = AdminTime()


def as_utc(value: datetime | None, zone: tzinfo) -> datetime | None:
    """`value` in UTC; a time typed without an offset is in `zone` (ADMIN_TIMEZONE)."""
    if value is None:
        return None
    return (value if value.tzinfo is not None else value.replace(tzinfo=zone)).astimezone(UTC)


@click.command("issue-user-token")
@click.argument("user_id", type=click.IntRange(1, MAX_ID))
@click.option("--stack", "stack_path", default=None, metavar="PATH", help=STACK_HELP)
@with_appcontext  # needs SECRET_KEY only, no server
def issue_user_token_command(user_id: int, stack_path: str | None) -> None:
    """Print a user token for USER_ID, signed with SECRET_KEY (for tests and demos): the
    environment's, else that of the stack the other commands find (`make run`'s secrets.json)."""
    secret_key = current().settings.secret_key
    if stack_path is not None or (current_app.config.get(SETTINGS_FROM_ENV) and not secret_key):
        target = find_stack(stack_path, environment())
        click.echo(target.describe(), err=True)
        secret_key = target.secret_key or secret_key
    if not secret_key:
        raise click.ClickException(
            "SECRET_KEY is empty: set it (the export line `make run` prints sets it), or point at a "
            "`make run` whose secrets.json holds it (--stack PATH)"
        )
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
@with_stack
def queue_stats() -> None:
    """Queued, delayed, in flight, dead and invalid jobs of every queue (report, admin)."""
    rows = []
    with _as_click_errors():
        for name in QUEUE_NAMES:
            f = queue_figures(redis_client(), name, hash_tag=current().keys.hash_tags)
            rows.append((name, f.queued, f.delayed, f.in_flight, f.dead, f.invalid))
    echo_table(["queue", "queued", "delayed", "in_flight", "dead", "invalid"], rows)


@queue_command.command("delayed")
@_paging
@with_stack
def queue_delayed(offset: int, limit: int) -> None:
    """List delayed retries, soonest due first (ID is the handle for retry-now and delete-delayed)."""
    with _as_click_errors():
        page = operations.list_delayed_retries(new_uow(), queue_operations(), offset=offset, limit=limit)
    rows = [(d.message_id, d.record_id, d.attempts, d.due_at, d.last_error) for d in page.items]
    echo_table(["id", "record", "attempts", "due_at", "last_error"], rows)
    click.echo(f"{len(page.items)} of {page.total} delayed retry(ies) from offset {page.offset}")


@queue_command.command("retry-now")
@click.option("--all", "all_", is_flag=True, help="Every delayed retry (the next 1,000 due).")
@click.argument("ids", nargs=-1)
@with_stack
def queue_retry_now(all_: bool, ids: tuple[str, ...]) -> None:
    """Queue delayed retries now instead of at their due time (RetryCount unchanged)."""
    if all_ == bool(ids):
        raise click.UsageError("give delayed retry IDS or --all (not both)")
    with _as_click_errors():
        items = operations.retry_delayed_now(
            queue_operations(), audit_log(), cli_actor(), None if all_ else list(ids)
        )
    _echo_outcomes(items)


@queue_command.command("delete-delayed")
@click.argument("ids", nargs=-1, required=True)
@with_stack
def queue_delete_delayed(ids: tuple[str, ...]) -> None:
    """Delete delayed retries: no further attempt; their records set to 5 (生成失败)."""
    with _as_click_errors():
        items = operations.delete_delayed_retries(
            new_uow(), queue_operations(), audit_log(), cli_actor(), list(ids)
        )
    _echo_outcomes(items)


@queue_command.command("dead")
@_paging
@with_stack
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
@with_stack
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
@with_stack
def queue_delete_dead(ids: tuple[str, ...]) -> None:
    """Delete dead letters (their records keep their status)."""
    with _as_click_errors():
        items = operations.delete_dead_letters(queue_operations(), audit_log(), cli_actor(), list(ids))
    _echo_outcomes(items)


@queue_command.command("invalid")
@_paging
@with_stack
def queue_invalid(offset: int, limit: int) -> None:
    """List quarantined payloads verbatim (bytes that are not UTF-8 as \\xNN)."""
    with _as_click_errors():
        page = operations.list_invalid(queue_operations(), offset=offset, limit=limit)
    echo_table(["key", "payload"], [(p.key, p.raw) for p in page.items])
    click.echo(f"{len(page.items)} of {page.total} invalid payload(s) from offset {page.offset}")


@queue_command.command("delete-invalid")
@click.argument("keys", nargs=-1, required=True)
@with_stack
def queue_delete_invalid(keys: tuple[str, ...]) -> None:
    """Delete quarantined payloads by key."""
    with _as_click_errors():
        items = operations.delete_invalid(queue_operations(), audit_log(), cli_actor(), list(keys))
    _echo_outcomes(items)


@queue_command.command("purge-invalid")
@click.confirmation_option(prompt="Drop every quarantined payload?")
@with_stack
def queue_purge_invalid() -> None:
    """Drop every quarantined payload."""
    with _as_click_errors():
        count = operations.purge_invalid(queue_operations(), audit_log(), cli_actor())
    click.echo(f"{count} invalid payload(s) purged")


@click.command("audit")
@click.option("--actor", default=None, help='e.g. "admin:1a2b3c4d5e6f" or "cli:root"')
@click.option("--action", default=None, help="e.g. requeue, batch_regenerate, purge_invalid")
@click.option("--since", type=ADMIN_TIME, default=None, help="ISO 8601; no offset: ADMIN_TIMEZONE")
@click.option("--until", type=ADMIN_TIME, default=None, help="ISO 8601; no offset: ADMIN_TIMEZONE")
@_paging
@with_stack
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
            since=as_utc(since, zone),
            until=as_utc(until, zone),
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
    "--from",
    "from_",
    type=ADMIN_TIME,
    default=None,
    help="submitted at or after (ISO 8601; no offset: ADMIN_TIMEZONE)",
)
@click.option(
    "--to", type=ADMIN_TIME, default=None, help="submitted before (ISO 8601; no offset: ADMIN_TIMEZONE)"
)
@click.option("--user", type=click.IntRange(1, MAX_ID), default=None, help="only this user's records")
@with_stack
def regenerate_matching_command(
    status: str, from_: datetime | None, to: datetime | None, user: int | None
) -> None:
    """Regenerate every record matching the filter, in the background (prints the task id)."""
    zone = current().settings.admin_zone
    match = regeneration_tasks.MatchFilter(
        status=int(status),
        submitted_from=as_utc(from_, zone),
        submitted_to=as_utc(to, zone),
        user_id=user,
    )
    with _as_click_errors():
        started = regeneration_tasks.start_regenerate_matching(
            new_uow(), task_store(), match, actor=cli_actor(), audit=audit_log()
        )
    click.echo(f"task {started.task_id}: {started.matched} record(s) matched, queued")


@click.command("task")
@click.argument("task_id")
@with_stack
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


@click.group("drill")
def drill_command() -> None:
    """The fault drill: make chosen records' report generation fail, to rehearse failures."""


@drill_command.command("start")
@click.option(
    "--minutes",
    type=click.IntRange(1, drill.MAX_DRILL_MINUTES),
    default=drill.DEFAULT_DRILL_MINUTES,
    show_default=True,
    help="how long the drill lasts; it ends by itself",
)
@click.argument("record_ids", nargs=-1, required=True, type=click.IntRange(1, MAX_ID))
@with_stack
def drill_start(minutes: int, record_ids: tuple[int, ...]) -> None:
    """Make every generation attempt of RECORD_IDS fail (retries, then the dead letter)."""
    with _as_click_errors():
        started = drill.start_fault_drill(
            fault_drill(), audit_log(), cli_actor(), list(record_ids), minutes=minutes
        )
    echo_table(["record", "until"], [(d.record_id, d.until) for d in started])


@drill_command.command("stop")
@click.option("--all", "all_", is_flag=True, help="End the drill of every record.")
@click.argument("record_ids", nargs=-1, type=click.IntRange(1, MAX_ID))
@with_stack
def drill_stop(all_: bool, record_ids: tuple[int, ...]) -> None:
    """End the drill of RECORD_IDS (or of all with --all)."""
    if all_ == bool(record_ids):
        raise click.UsageError("give RECORD_IDS or --all (not both)")
    with _as_click_errors():
        stopped = drill.stop_fault_drill(
            fault_drill(), audit_log(), cli_actor(), None if all_ else list(record_ids)
        )
    click.echo(f"drill ended for {len(stopped)} record(s): {', '.join(map(str, stopped)) or '-'}")


@drill_command.command("list")
@with_stack
def drill_list() -> None:
    """The records in the drill now, with the drill's end."""
    with _as_click_errors():
        drilled = drill.list_fault_drill(fault_drill())
    echo_table(["record", "until"], [(d.record_id, d.until) for d in drilled])
    click.echo(f"{len(drilled)} record(s) in the drill")
