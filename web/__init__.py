"""The Flask web tier: ``create_app()`` is the WSGI entry point (``gunicorn 'web:create_app()'``).

Blueprints, one per area: the user API (/api/assessment/), the admin API (/api/admin/),
the health probes, /metrics, the OpenAPI document, the report page (/reports/<record>)
and the admin console's pages (/admin/, web/console/). API errors become the JSON
envelope in web/errors.py only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis
from flask import Flask
from sqlalchemy.orm import Session, sessionmaker

from config import ConfigError
from config import settings as settings_module
from config.settings import Settings
from redis_adapters.autosave_store import RedisAutosaveStore
from redis_adapters.drill_store import RedisFaultDrill
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.event_spool import spool_at
from redis_adapters.keyspace import Keyspace
from redis_adapters.queue_ops import RedisQueueOperations
from redis_adapters.report_queue import RedisReportQueue
from redis_adapters.task_store import RedisTaskStore
from services.domain.events import EventSink
from services.persistence.db import build_session_factory
from services.persistence.event_store import DirectEventWriter
from services.usecases.audit import DatabaseAuditLog
from services.usecases.autosave import ActiveQuestions, AutosaveStore
from services.usecases.ports import ReportQueue
from web import (
    admin_api,
    console,
    deps,
    health,
    home,
    hosts,
    http_metrics,
    metrics,
    report_page,
    spec,
    user_api,
)
from web.auth import MIN_TOKEN_BITS, issue_user_token, weak_tokens
from web.cli import (
    APP_FACTORY,
    SETTINGS_FROM_ENV,
    audit_command,
    drill_command,
    issue_user_token_command,
    queue_command,
    regenerate_matching_command,
    task_command,
)
from web.envelope import JSONProvider
from web.errors import register_error_handlers
from web.fields import MAX_CONTENT_LENGTH
from web.redis_guard import guarded_redis

__all__ = ["create_app", "issue_user_token"]

log = logging.getLogger(__name__)

PRODUCTION = "production"
#: Shortest SECRET_KEY and admin token accepted in production, in bytes: 256 bits, the
#: strength of the HMAC-SHA256 that signs user tokens; a short admin token is guessable.
MIN_SECRET_BYTES = 32
_HOW_TO_GENERATE = "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def app_env(env: Mapping[str, str] | None = None) -> str:
    """APP_ENV, checked (config/settings.py): of `env`, or of this process's environment.

    The app factory reads it from the environment even when given settings, so the production
    checks cannot be skipped by building the app with settings of another environment."""
    return settings_module.app_env(settings_module.environment() if env is None else env)


def check_production_secrets(settings: Settings, environment: str) -> None:
    """In production, refuse a SECRET_KEY or an admin token shorter than `MIN_SECRET_BYTES`,
    and an admin token that cannot carry `MIN_TOKEN_BITS` (web/auth.py, `token_strength_bits`).

    Elsewhere short secrets are only warned about (tests and `make run` use readable ones).
    The message names the variable and the length, never the secret.
    """
    problems: list[str] = []
    key_bytes = len(settings.secret_key.encode())
    if key_bytes < MIN_SECRET_BYTES:
        problems.append(f"SECRET_KEY is {key_bytes} bytes long, at least {MIN_SECRET_BYTES} are required")
    short = [i for i, token in enumerate(settings.admin_tokens, 1) if len(token.encode()) < MIN_SECRET_BYTES]
    weak = [i for i in weak_tokens(settings.admin_tokens) if i not in short]
    count = len(settings.admin_tokens)
    if short:
        which = ", ".join(f"#{i}" for i in short)
        problems.append(f"ADMIN_TOKENS: token {which} (of {count}) is shorter than {MIN_SECRET_BYTES} bytes")
    if weak:
        which = ", ".join(f"#{i}" for i in weak)
        problems.append(
            f"ADMIN_TOKENS: token {which} (of {count}) cannot carry {MIN_TOKEN_BITS} bits of randomness"
        )
    if not problems:
        return
    if environment == PRODUCTION:
        raise ConfigError(
            f"APP_ENV=production refuses weak secrets: {'; '.join(problems)} ({_HOW_TO_GENERATE})"
        )
    if serving():
        for problem in problems:
            log.warning("%s (refused with APP_ENV=production)", problem)


def create_app(
    settings: Settings | None = None,
    *,
    report_queue: ReportQueue | None = None,
    redis_client: redis.Redis | None = None,
    autosave_store: AutosaveStore | None = None,
    event_sink: EventSink | None = None,
    environment: str | None = None,
    session_factory: sessionmaker[Session] | None = None,
) -> Flask:
    """Build the app; settings come from the environment unless given.

    Nothing connects here: the database pool and the Redis connection open at first use,
    so the app (and ``flask --app web ...`` commands) start while a server is down.
    With APP_ENV=production (or ``environment="production"``) weak secrets raise
    `ConfigError` here, so gunicorn refuses to start rather than serve with them.
    """
    from_env = settings is None
    settings = settings or Settings.from_env()
    environment = environment or app_env()
    check_production_secrets(settings, environment)
    app = Flask(__name__, static_folder=None)
    app.config.update(
        MAX_CONTENT_LENGTH=MAX_CONTENT_LENGTH,
        SECRET_KEY=settings.secret_key or None,
        **{SETTINGS_FROM_ENV: from_env},
    )
    app.json = JSONProvider(app)
    app.extensions[APP_FACTORY] = create_app

    # Short timeouts and a fail-fast guard (web/redis_guard.py): a hung Redis must not
    # hold a request thread for more than about a second.
    client = redis_client or guarded_redis(settings.redis_url)
    keys = Keyspace.of(settings.redis_hash_tags)
    # The session factory and the Redis client are this app's (built in the gunicorn worker that
    # loads it, after the fork: gunicorn runs without --preload).
    factory = session_factory or build_session_factory(settings)
    deps.install(
        app,
        deps.Dependencies(
            settings=settings,
            report_queue=report_queue
            or RedisReportQueue(client, key=keys.report.queue, jobs_key=keys.report.jobs),
            session_factory=factory,
            redis=client,
            autosave=autosave_store or RedisAutosaveStore(client, keys.autosave),
            # Its fallback while Redis is down: the same database as the rest of the app.
            events=event_sink
            or RedisEventSink(
                client,
                keys.eventlog,
                fallback=DirectEventWriter(
                    settings.database_url, transaction_pooling=settings.db_transaction_pooling
                ),
                max_queue=settings.event_log_queue_max,
                spool=spool_at(settings.event_spool_dir),
            ),
            questions=ActiveQuestions(),
            queue_ops=RedisQueueOperations(client, keys.report),
            audit=DatabaseAuditLog(factory),
            keys=keys,
            tasks=RedisTaskStore(client, keys),
            drill=RedisFaultDrill(client, keys.drill),
        ),
    )

    # A mistyped report link or console address answers its area's page, not the API's JSON.
    register_error_handlers(
        app, pages={"/reports": report_page.http_problem, "/admin": console.error_pages.http_error}
    )
    http_metrics.install(app)
    app.before_request(spec.refuse_oversized_body)
    hosts.install(app, trusted_proxies=settings.trusted_proxies)
    for blueprint in (user_api.bp, admin_api.bp, health.bp, home.bp, metrics.bp, spec.bp, report_page.bp):
        app.register_blueprint(blueprint)
    console.init_app(app, production=environment == PRODUCTION)
    app.cli.add_command(issue_user_token_command)
    app.cli.add_command(queue_command)
    app.cli.add_command(audit_command)
    app.cli.add_command(regenerate_matching_command)
    app.cli.add_command(task_command)
    app.cli.add_command(drill_command)

    if serving():
        if not settings.secret_key:
            log.warning("SECRET_KEY is empty: every call to the user API is refused (401)")
        if not settings.admin_tokens:
            log.warning("ADMIN_TOKENS is empty: every call to the admin API is refused (401)")
    return app


def serving() -> bool:
    """False when the app is built for a `flask` CLI command (Flask sets FLASK_RUN_FROM_CLI):
    a command needs no admin token and says itself what it misses, so the warnings meant for
    a server starting up would only be noise there."""
    return settings_module.environment().get("FLASK_RUN_FROM_CLI") != "true"
