"""The report page in a real headless Chromium: at phone width, and printed to an A4 PDF.

The app runs on a real HTTP server (werkzeug, in a thread) over the test PostgreSQL and
Redis; the report comes from a real submission and a real generation. Screenshots and
the PDF are kept under ARTIFACTS_DIR (tests/support/browser.py) to be looked at.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from services.domain.questionnaire import load_questionnaire
from services.persistence.uow import UnitOfWork
from services.usecases import reports
from tests.support.browser import ARTIFACTS_DIR, screenshot
from tests.support.envelope import data
from tests.support.web_app import USER_PATH
from web.radar import CENTER_X, CENTER_Y, RADIUS

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, ViewportSize

Headers = Callable[[int], dict[str, str]]
ALICE = 1001
PHONE: ViewportSize = {"width": 390, "height": 844}
#: A profile with a clear shape: strong in people and words, weak in numbers.
ANSWERS_BY_DIMENSION = {
    "linguistic": 5,
    "logical": 2,
    "spatial": 3,
    "bodily": 4,
    "musical": 3,
    "interpersonal": 5,
    "intrapersonal": 4,
    "naturalist": 1,
}


@pytest.fixture
def live_url(app: Flask) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the test server did not stop"


def generated_report(client: FlaskClient, headers: dict[str, str], uow: UnitOfWork) -> dict[str, Any]:
    """A record created, started and submitted over the API, then generated: its report."""
    record_id = data(client.post(f"{USER_PATH}/createRecord", headers=headers))["id"]
    data(client.post(f"{USER_PATH}/startAssessment", json={"recordId": record_id}, headers=headers))
    answers = []
    for dimension in load_questionnaire().dimensions:
        wanted = ANSWERS_BY_DIMENSION[dimension.code]
        for question in dimension.questions:
            answers.append(
                {"questionId": question.id, "value": 6 - wanted if question.reverse_scored else wanted}
            )
    data(
        client.post(
            f"{USER_PATH}/submitAnswers", json={"recordId": record_id, "answers": answers}, headers=headers
        )
    )
    assert reports.generate_report(uow, record_id) == reports.GenerationOutcome.GENERATED
    report: dict[str, Any] = data(
        client.get(f"{USER_PATH}/report", query_string={"recordId": record_id}, headers=headers)
    )
    return report


@pytest.fixture
def phone(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, locale="zh-CN")
    try:
        yield context.new_page()
    finally:
        context.close()


def polygon_scores(points: str) -> list[float]:
    pairs = [tuple(map(float, pair.split(","))) for pair in points.split()]
    return [math.hypot(x - CENTER_X, y - CENTER_Y) / RADIUS * 100 for x, y in pairs]


def test_report_page_on_a_phone(
    phone: Page, live_url: str, client: FlaskClient, user_headers: Headers, uow: UnitOfWork
) -> None:
    report = generated_report(client, user_headers(ALICE), uow)
    response = phone.goto(live_url + report["pageUrl"])
    assert response is not None
    assert response.status == 200

    # The radar's polygon is the scores, axis by axis in questionnaire order.
    chart = phone.locator("svg.radar")
    assert chart.is_visible()
    points = chart.locator("polygon.radar-values").get_attribute("points") or ""
    by_code = {d["code"]: d["score"] for d in report["dimensions"]}
    expected = [by_code[d.code] for d in load_questionnaire().dimensions]
    assert polygon_scores(points) == pytest.approx(expected, abs=0.01)

    # Readable on a phone: nothing wider than the screen, the chart fills its width.
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    box = chart.bounding_box()
    assert box is not None
    assert box["width"] >= PHONE["width"] * 0.8
    # Every dimension with its level, interpretation and suggestions.
    articles = phone.locator("article.dimension")
    assert articles.count() == 8
    first = report["dimensions"][0]
    top = articles.first
    assert first["name"] in top.inner_text()
    assert top.locator(".interpretation").inner_text() == first["interpretation"]
    assert top.locator(".suggestions li").all_inner_texts() == first["suggestions"]
    strengths = phone.locator(".strengths li").all_inner_texts()
    assert [s.split()[0] for s in strengths] == [d["name"] for d in report["strengths"]]
    assert "完成于" in phone.locator(".meta").inner_text()
    assert "UTC+08:00" in phone.locator(".meta").inner_text()

    path = screenshot(phone, "report-phone")
    assert path.stat().st_size > 10_000
    # The first screen, as the user sees it on opening the link (docs/report.png is one).
    screenshot(phone, "report-phone-first-screen", full_page=False)


def test_report_page_prints_on_a4(
    page: Page, live_url: str, client: FlaskClient, user_headers: Headers, uow: UnitOfWork
) -> None:
    report = generated_report(client, user_headers(ALICE), uow)
    page.goto(live_url + report["pageUrl"])
    page.emulate_media(media="print")
    pdf = page.pdf(format="A4", print_background=True, prefer_css_page_size=True)
    assert pdf.startswith(b"%PDF-")
    # Skia writes its page tree uncompressed: the page count, and each page A4 (595 x 842 pt).
    pages = [int(n) for n in re.findall(rb"/Type /Pages\s*/Count (\d+)", pdf)]
    assert pages, "no page tree found"
    assert 1 <= pages[0] <= 4, pages
    assert re.search(rb"/MediaBox \[0 0 59[45](?:\.\d+)? 84[12](?:\.\d+)?\]", pdf)
    out = ARTIFACTS_DIR / "report.pdf"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(pdf)
    # What the print CSS lays out, as an image to look at (A4 width at 96 dpi).
    page.set_viewport_size({"width": 794, "height": 1123})
    screenshot(page, "report-print")
    assert page.locator("svg.radar").is_visible()
