"""Submissions through the web app's test client, as the mini-program makes them, and record states."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

from tests.support.envelope import data
from tests.support.web_app import USER_PATH


def answer_sheet(client: FlaskClient, headers: dict[str, str]) -> list[dict[str, int]]:
    """An answer (3 to 5) to every active question."""
    questions = data(client.get(f"{USER_PATH}/questions", headers=headers))
    return [{"questionId": q["id"], "value": 3 + q["id"] % 3} for q in questions]


def retrying(call: Callable[[], Any], deadline: float) -> Any:
    """A user's retry: a step answered 503 (Redis failing over) is tried again until `deadline`."""
    while True:
        try:
            return call()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def submit(client: FlaskClient, headers: dict[str, str], answers: list[dict[str, int]]) -> tuple[int, bool]:
    """Create, start and submit a record; returns its id and whether the submission queued its job."""
    deadline = time.monotonic() + 60
    record_id = int(
        retrying(lambda: data(client.post(f"{USER_PATH}/createRecord", headers=headers))["id"], deadline)
    )
    body = {"recordId": record_id}
    retrying(lambda: data(client.post(f"{USER_PATH}/startAssessment", json=body, headers=headers)), deadline)
    full = {"recordId": record_id, "answers": answers}
    result = retrying(
        lambda: data(client.post(f"{USER_PATH}/submitAnswers", json=full, headers=headers)), deadline
    )
    return record_id, bool(result["enqueued"])
