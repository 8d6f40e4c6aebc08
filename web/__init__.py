"""The Flask web tier: ``create_app()`` is the WSGI entry point (``gunicorn 'web:create_app()'``).

Blueprints, one per area: the user API (/api/assessment/), the admin API (/api/admin/),
the health probes and the OpenAPI document. Errors become the JSON envelope in
web/errors.py only.
"""

from __future__ import annotations

import logging

import redis
from flask import Flask

from actors.adapters import RedisAutosaveStore, RedisEventSink, RedisReportQueue
from services.autosave import ActiveQuestions, AutosaveStore
from services.config import Settings
from services.db import session_factory
from services.events import DirectEventWriter, EventSink
from services.queue import ReportQueue
from web import admin_api, deps, health, openapi, user_api
from web.auth import issue_user_token
from web.cli import issue_user_token_command
from web.errors import register_error_handlers
from web.jsonify import JSONProvider
from web.validation import MAX_CONTENT_LENGTH

__all__ = ["create_app", "issue_user_token"]

log = logging.getLogger(__name__)

#: Redis timeouts, in seconds: a request must fail fast rather than hang on a dead server.
REDIS_CONNECT_TIMEOUT_S = 2.0
REDIS_SOCKET_TIMEOUT_S = 5.0


def create_app(
    settings: Settings | None = None,
    *,
    report_queue: ReportQueue | None = None,
    redis_client: redis.Redis | None = None,
    autosave_store: AutosaveStore | None = None,
    event_sink: EventSink | None = None,
) -> Flask:
    """Build the app; settings come from the environment unless given.

    Nothing connects here: the database pool and the Redis connection open at first use,
    so the app (and ``flask --app web ...`` commands) start while a server is down.
    """
    settings = settings or Settings.from_env()
    app = Flask(__name__, static_folder=None)
    app.config.update(MAX_CONTENT_LENGTH=MAX_CONTENT_LENGTH, SECRET_KEY=settings.secret_key or None)
    app.json = JSONProvider(app)

    client = redis_client or redis.Redis.from_url(
        settings.redis_url,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        socket_timeout=REDIS_SOCKET_TIMEOUT_S,
    )
    deps.install(
        app,
        deps.Dependencies(
            settings=settings,
            session_factory=session_factory(settings),
            report_queue=report_queue or RedisReportQueue(client),
            redis=client,
            autosave=autosave_store or RedisAutosaveStore(client),
            # Its fallback while Redis is down: the same database as the rest of the app.
            events=event_sink or RedisEventSink(client, fallback=DirectEventWriter(settings.database_url)),
            questions=ActiveQuestions(),
        ),
    )

    register_error_handlers(app)
    for blueprint in (user_api.bp, admin_api.bp, health.bp, openapi.bp):
        app.register_blueprint(blueprint)
    app.cli.add_command(issue_user_token_command)

    if not settings.secret_key:
        log.warning("SECRET_KEY is empty: every call to the user API is refused (401)")
    if not settings.admin_tokens:
        log.warning("ADMIN_TOKENS is empty: every call to the admin API is refused (401)")
    return app
