"""The progress flusher: syncs `hotpath:progress:<id>` states to assessment_records.

The states are written by the autosave script (redis_adapters/autosave_store.py); the guarded
bulk UPDATE is `services.persistence.progress.sync_progress` (a state no newer than the database's
is skipped, in SQL). A state that cannot be decoded (`services.persistence.progress.decode_state`)
or that the database refuses is set aside, all its fields, in `hotpath:progress:invalid`.
"""

from __future__ import annotations

import logging

import redis
from sqlalchemy.orm import Session, sessionmaker

from hotpath.dirty import DirtySetFlusher, Persisted
from redis_adapters.keyspace import AutosaveKeys
from services.persistence.progress import ProgressState, decode_state, sync_progress_isolating

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
        states: list[ProgressState] = []
        invalid: list[tuple[int, bytes, bytes]] = []
        for record_id, raw in hashes.items():
            state, bad = decode_state(record_id, raw)
            invalid += [(record_id, name, value) for name, value in bad]
            if state is not None:
                states.append(state)
        rows, refused = sync_progress_isolating(session, states)
        for state in refused:
            # The whole state was refused: all its fields go, as read.
            raw = hashes[state.record_id]
            invalid += [(state.record_id, bytes(k), bytes(v)) for k, v in sorted(raw.items())]
        return Persisted(rows=rows, invalid=invalid)
