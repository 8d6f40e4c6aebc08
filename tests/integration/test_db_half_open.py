"""A PostgreSQL connection whose server goes silent (every packet dropped, no reset) fails
within seconds: TCP keepalives and `tcp_user_timeout` on every engine (services/persistence/db.py).

The connection goes through a `FaultProxy` (scripts/faults.py) whose port is then silenced
with iptables: the client's packets and the proxy's are dropped, as on a network that lost
the server's host. Without the settings the statement waits for the kernel's retransmission
timeout, about 15 minutes.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, exc, text

from config.settings import Settings
from scripts.faults import FaultProxy
from services.persistence.db import make_engine
from tests.support.binaries import needs

pytestmark = [pytest.mark.slow, needs(shutil.which("iptables"), "iptables")]

#: What the issue asks for; the settings give about 20 s.
FAILS_WITHIN_S = 30
#: How long the test waits before calling the statement hung (far below 15 minutes).
GIVE_UP_S = 90


@pytest.fixture
def proxy(settings: Settings) -> Iterator[FaultProxy]:
    server = FaultProxy(settings.database_url)
    try:
        yield server
    finally:
        server.close()


def _outcome_of(engine: Engine, statement: str, *, silence: FaultProxy, after_s: float) -> tuple[str, float]:
    """Run `statement` on a pooled connection; silence the proxy `after_s` into it. How the
    statement ended ("error: ..." or "answered") and how long after the silence."""
    result: list[str] = []
    silenced_at: list[float] = []

    def run() -> None:
        try:
            with engine.connect() as conn:
                conn.execute(text(statement))
            result.append("answered")
        except exc.DBAPIError as error:
            result.append(f"error: {type(error.orig).__name__}")
        result.append(str(time.monotonic()))

    with engine.connect() as conn:  # open the pooled connection before the silence
        conn.execute(text("SELECT 1"))
    thread = threading.Thread(target=run, daemon=True)
    if after_s:
        thread.start()
        time.sleep(after_s)
        silence.silence()
    else:
        silence.silence()
        thread.start()
    silenced_at.append(time.monotonic())
    thread.join(GIVE_UP_S)
    assert not thread.is_alive(), f"the statement still waits {GIVE_UP_S} s after the server went silent"
    return result[0], float(result[1]) - silenced_at[0]


@pytest.mark.parametrize(
    ("statement", "after_s"),
    [("SELECT 1", 0.0), ("SELECT pg_sleep(600)", 1.0)],
    ids=["sent-into-the-silence", "waiting-for-an-answer"],
)
def test_a_silent_server_fails_the_statement_within_30_s(
    proxy: FaultProxy, statement: str, after_s: float
) -> None:
    engine = make_engine(proxy.url, pool_size=1, max_overflow=0)
    try:
        outcome, took_s = _outcome_of(engine, statement, silence=proxy, after_s=after_s)
    finally:
        proxy.up()
        engine.dispose()
    assert outcome.startswith("error"), outcome
    # The kernel's timers set this (about 20 s); twice the bound leaves room for a
    # loaded machine, and is still far below the 15 minutes without the settings.
    assert took_s < 2 * FAILS_WITHIN_S, took_s
