"""A real headless Chromium for the page tests: Debian's `chromium`, driven by Playwright.

Playwright never downloads a browser here: it launches the executable named by CHROMIUM
(default /usr/bin/chromium, which `make test` installs with apt). Without it the page tests
are skipped locally and fail under `make test` (MI_REQUIRE_SERVICES=1), as the integration
tests do without their servers.

Screenshots go to ARTIFACTS_DIR (default build/artifacts): `screenshot(page, "name")` saves
`<ARTIFACTS_DIR>/screenshots/name.png` and returns the path, so a reviewer can look at them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS_DIR = Path(os.environ.get("ARTIFACTS_DIR", ROOT / "build" / "artifacts"))
DEFAULT_CHROMIUM = "/usr/bin/chromium"

# The flags that keep Chromium quiet on a machine with no network beyond loopback: without
# them it keeps trying Google's hosts in the background.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium_path() -> str | None:
    configured = os.environ.get("CHROMIUM", DEFAULT_CHROMIUM)
    return configured if Path(configured).exists() else shutil.which("chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One Chromium for the whole run; each test opens its own context (cookies apart)."""
    executable = chromium_path()
    if executable is None:
        message = "chromium not found (set CHROMIUM or install Debian's chromium)"
        if os.environ.get("MI_REQUIRE_SERVICES") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=list(CHROMIUM_ARGS))
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context and page at a desktop width; closed after the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    try:
        yield context.new_page()
    finally:
        context.close()


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save a PNG of the page under ARTIFACTS_DIR/screenshots; the path, to look at."""
    path = ARTIFACTS_DIR / "screenshots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    return path
