"""The console's overview without servers: Redis down is a message on the page, not an error."""

from __future__ import annotations

import re

from flask.testing import FlaskClient

from tests.unit.web_unit_support import ADMIN_TOKEN, make_app
from web.console.overview import MSG_REDIS_DOWN


def signed_in() -> FlaskClient:
    client = make_app().test_client()
    match = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/admin/login").get_data(as_text=True))
    assert match
    assert (
        client.post("/admin/login", data={"token": ADMIN_TOKEN, "csrf_token": match.group(1)}).status_code
        == 302
    )
    return client


def test_the_overview_answers_with_redis_down() -> None:
    response = signed_in().get("/admin/")
    html = response.get_data(as_text=True)
    assert response.status_code == 200
    assert MSG_REDIS_DOWN in html
    assert "data-figure" not in html


def test_the_overview_refreshes_only_when_asked_at_a_listed_interval() -> None:
    client = signed_in()
    assert 'http-equiv="refresh" content="10"' in client.get("/admin/?refresh=10").get_data(as_text=True)
    for refresh in ("", "7", "0", "abc", "-5"):
        assert "http-equiv" not in client.get(f"/admin/?refresh={refresh}").get_data(as_text=True), refresh
