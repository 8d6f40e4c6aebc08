"""The answer flusher: persists what the autosave store (redis_adapters/autosave_store.py) saved.

`AnswersFlusher` persists the dirty records (hotpath/dirty.py) with
`services.usecases.autosave.persist_autosaved`, which only writes records still in status 2.
A field that is not a valid answer (`services.usecases.autosave.decode_saved`) or that the
database refuses is set aside in `hotpath:answers:invalid`; the others are written.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis
from sqlalchemy.orm import Session, sessionmaker

from hotpath.dirty import DirtySetFlusher, Persisted
from redis_adapters.keyspace import AutosaveKeys
from services.domain.saved_answers import SavedAnswer, decode_saved
from services.persistence.answers_sql import persist_autosaved

logger = logging.getLogger(__name__)


class AnswersFlusher(DirtySetFlusher):
    """Persists autosaved answers in bulk; drops the autosave of records no longer in status 2."""

    name = "answers"

    def __init__(
        self,
        client: redis.Redis,
        session_factory: sessionmaker[Session],
        *,
        keys: AutosaveKeys | None = None,
        token: str | None = None,
    ) -> None:
        self.autosave_keys = keys or AutosaveKeys.default()
        super().__init__(client, self.autosave_keys.answers, session_factory, token=token)

    def persist(self, session: Session, hashes: dict[int, dict[bytes, bytes]]) -> Persisted:
        answers: dict[int, dict[int, SavedAnswer]] = {}
        invalid: list[tuple[int, bytes, bytes]] = []
        for record_id, raw in hashes.items():
            answers[record_id], bad = decode_saved(raw)
            invalid += [(record_id, name, value) for name, value in bad]
        result = persist_autosaved(session, answers)
        for record_id, question_id in result.refused:
            name = str(question_id).encode()
            invalid.append((record_id, name, hashes[record_id].get(name, b"")))
        return Persisted(rows=result.written, discard=sorted(set(hashes) - result.live), invalid=invalid)

    def discard(self, record_ids: Sequence[int]) -> None:
        # Submitted, deleted or missing: these answers can never be written. Dropping the
        # cached status too makes the next save of a deleted record check the database.
        keys = [self.autosave_keys.answers.item(r) for r in record_ids]
        keys += [self.autosave_keys.record(r) for r in record_ids]
        self.client.delete(*keys)
        logger.info("answers: dropped the autosave of %d record(s) no longer in progress", len(record_ids))
