"""Tests that need a server binary besides PostgreSQL and Redis (redis-sentinel, pgbouncer).

Skipped locally when it is missing; under `make test` (MI_REQUIRE_SERVICES=1, whose bootstrap
installs them) they run and fail, as the integration tests do without their servers: a
missing binary must not turn a CI run green by skipping what it was meant to prove.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_SERVICES = os.environ.get("MI_REQUIRE_SERVICES") == "1"


def needs(binary: str | None, name: str) -> pytest.MarkDecorator:
    """Skip the test when `binary` (its path, None when not found) is missing, unless required."""
    return pytest.mark.skipif(binary is None and not REQUIRE_SERVICES, reason=f"{name} is not installed")
