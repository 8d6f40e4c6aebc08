"""The Flask web tier: ``create_app()`` is the WSGI entry point (``gunicorn 'web:create_app()'``).

Blueprints, one per area: the user API (/api/assessment/), the admin API (/api/admin/),
the health probes and the OpenAPI document. Errors become the JSON envelope in
web/errors.py only.
"""

from __future__ import annotations

import logging

import redis
from flask import Flask

from actors.hotpath.autosave import RedisAutosaveStore
from actors.hotpath.eventlog import RedisEventSink
from actors.producer import RedisReportQueue
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
from web.redis_guard import guarded_redis
from web.validation import MAX_CONTENT_LENGTH

__all__ = ["create_app", "issue_user_token"]

log = logging.getLogger(__name__)


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

    # Short timeouts and a fail-fast guard (web/redis_guard.py): a hung Redis must not
    # hold a request thread for more than about a second.
    client = redis_client or guarded_redis(settings.redis_url)
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
