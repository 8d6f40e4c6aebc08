"""The progress flusher: syncs `hotpath:progress:<id>` states to assessment_records.

The states are written by the autosave script (actors/hotpath/autosave.py); the guarded
bulk UPDATE is `services.progress.sync_progress` (a state no newer than the database's
is skipped, in SQL).
"""

from __future__ import annotations

import logging

import redis
from sqlalchemy.orm import Session, sessionmaker

from actors.hotpath.constants import AutosaveKeys
from actors.hotpath.dirty import DirtySetFlusher, Persisted
from services.progress import parse_state, sync_progress

logger = logging.getLogger(__name__)


class ProgressFlusher(DirtySetFlusher):
    name = "progress"

    def __init__(
        self,
        client: redis.Redis,
        session_factory: sessionmaker[Session],
        *,
        keys: AutosaveKeys | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(client, (keys or AutosaveKeys.default()).progress, session_factory, token=token)

    def persist(self, session: Session, hashes: dict[int, dict[bytes, bytes]]) -> Persisted:
        states = []
        for record_id, raw in hashes.items():
            state = parse_state(record_id, raw)
            if state is None:
                logger.warning("progress: skipping the malformed state of record %s: %r", record_id, raw)
            else:
                states.append(state)
        return Persisted(rows=sync_progress(session, states))
