"""What the views depend on, built once by the app factory and kept on the app.

Views reach the database, the report queue and Redis only through these helpers, so
tests inject fakes or other servers through `create_app(...)` and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import redis
from flask import Flask, current_app
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from redis_adapters.keyspace import Keyspace
from services.domain.events import EventSink
from services.domain.opsmodel import AuditLog, QueueOperations
from services.persistence.uow import UnitOfWork
from services.usecases.autosave import ActiveQuestions, AutosaveStore
from services.usecases.drill import FaultDrill
from services.usecases.ports import ReportQueue
from services.usecases.regeneration_tasks import TaskStore

EXTENSION_KEY = "mi_assessment"


@dataclass(frozen=True)
class Dependencies:
    settings: Settings
    session_factory: sessionmaker[Session]
    report_queue: ReportQueue
    redis: redis.Redis
    #: Answers saved during an assessment (Redis first, flushed by the hotpath process).
    autosave: AutosaveStore
    #: The event log's producer side (`eventlog:queue`).
    events: EventSink
    #: Active question ids, cached so that a save needs no database round trip.
    questions: ActiveQuestions
    #: The report queue's dead letters and quarantine (operations tooling).
    queue_ops: QueueOperations
    #: Where admin actions are audited (PostgreSQL, directly).
    audit: AuditLog
    #: Every Redis key family, in the layout REDIS_HASH_TAGS chose.
    keys: Keyspace = field(default_factory=Keyspace.of)
    #: Admin tasks and their progress (Redis: redis_adapters/task_store.py).
    tasks: TaskStore | None = None
    #: The fault drill (Redis: redis_adapters/drill_store.py).
    drill: FaultDrill | None = None


def install(app: Flask, dependencies: Dependencies) -> None:
    app.extensions[EXTENSION_KEY] = dependencies


def current() -> Dependencies:
    return cast(Dependencies, current_app.extensions[EXTENSION_KEY])


def keyspace() -> Keyspace:
    return current().keys


def new_uow() -> UnitOfWork:
    """A unit of work for one service call (the service opens and commits it)."""
    return UnitOfWork(current().session_factory)


def report_queue() -> ReportQueue:
    return current().report_queue


def redis_client() -> redis.Redis:
    return current().redis


def autosave_store() -> AutosaveStore:
    return current().autosave


def event_sink() -> EventSink:
    return current().events


def active_questions() -> ActiveQuestions:
    return current().questions


def queue_operations() -> QueueOperations:
    return current().queue_ops


def audit_log() -> AuditLog:
    return current().audit


def fault_drill() -> FaultDrill:
    drill = current().drill
    if drill is None:
        raise RuntimeError("the app was built without a fault drill")
    return drill


def task_store() -> TaskStore:
    tasks = current().tasks
    if tasks is None:
        raise RuntimeError("the app was built without a task store")
    return tasks
