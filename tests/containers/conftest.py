"""Fixtures of the container tests: the images, built once per run (or found in podman's cache)."""

from __future__ import annotations

import os

import pytest

from tests.containers import engine
from tests.support.binaries import REQUIRE_SERVICES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that is first to need the images waits for their build: on a fresh machine under
    load debootstrap and the wheels take longer than the suite's 300 s per test, so the tests
    here get the build's own deadline on top of it."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.timeout(engine.BUILD_TIMEOUT_S + 300))


@pytest.fixture(scope="session")
def images() -> dict[str, float]:
    """Every image the container tests run, by tag, with the seconds its build took (0: the
    cache had it). Skipped where no container engine can run, unless `make test` requires it."""
    reason = engine.unavailable()
    if reason is not None:
        if REQUIRE_SERVICES:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    engine.remove_orphans()
    timings = engine.build_images()
    print("image builds:", ", ".join(f"{tag} {s:.1f} s" for tag, s in timings.items()))
    return timings


@pytest.fixture(scope="session")
def owner_label() -> str:
    """The label of everything this run starts (`engine.remove_orphans` removes it once we are gone)."""
    return f"{engine.OWNER_LABEL}={os.getpid()}"
