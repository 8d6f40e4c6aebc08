"""The admin console's door: sign-in, the session cookie and its server-side session, CSRF, and
every route of the URL map refused to the anonymous and to user tokens (on the real Redis,
which holds the sessions and the sign-in limit; the database is not needed to get past the
guard)."""

from __future__ import annotations

import re

import pytest
import redis
from flask import Flask
from werkzeug.routing import Rule

from config.settings import Settings
from redis_adapters.keyspace import Keyspace
from tests.support.console import csrf_token, sign_in
from tests.support.web_unit import ADMIN_AUTH, ADMIN_TOKEN, UNIT_SETTINGS, bearer, make_app, user_auth
from web import create_app
from web.auth import token_fingerprint
from web.console.signin import MSG_BAD_TOKEN, MSG_USER_TOKEN

#: Only to list the URL map (no request reaches a server through it).
APP = make_app()
SECOND_TOKEN = "second-admin-token"
#: Closed consoles answer before any server is asked: the unit app (closed ports) shows it.
APP_WITHOUT = {"secret_key": make_app(secret_key=""), "admin_tokens": make_app(admin_tokens=())}


@pytest.fixture
def app(settings: Settings, redis_client: redis.Redis) -> Flask:
    """The console on the real Redis, with two admin tokens."""
    return real_app(settings, redis_client)


def real_app(settings: Settings, client: redis.Redis, **overrides: object) -> Flask:
    # The unit settings' key: user_auth() signs the user tokens with it.
    changes: dict[str, object] = {
        "admin_tokens": (ADMIN_TOKEN, SECOND_TOKEN),
        "secret_key": UNIT_SETTINGS.secret_key,
        **overrides,
    }
    return create_app(settings.with_overrides(**changes), redis_client=client)


#: Open without a session, by design: the sign-in page and its style sheet.
PUBLIC_ENDPOINTS = {"console.sign_in", "console.static"}
IMPLICIT_METHODS = {"HEAD", "OPTIONS"}


def _path(rule: Rule) -> str:
    """The rule with its variables filled in (a record id, the style sheet's name)."""
    path = re.sub(r"<int:[^>]+>", "1", rule.rule)
    return re.sub(r"<(?:path:)?[^>]+>", "console.css", path)


def console_routes(app: Flask = APP) -> list[tuple[str, str, str]]:
    """(endpoint, path, method) of every console rule, from the URL map."""
    found: list[tuple[str, str, str]] = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("console."):
            methods = sorted((rule.methods or set()) - IMPLICIT_METHODS)
            found.extend((rule.endpoint, _path(rule), method) for method in methods)
    return sorted(found)


GUARDED = [route for route in console_routes() if route[0] not in PUBLIC_ENDPOINTS]


def test_the_console_has_its_pages_and_forms() -> None:
    endpoints = {endpoint for endpoint, _, _ in GUARDED}
    assert {"console.overview", "console.records", "console.record", "console.sign_out"} <= endpoints
    assert {method for _, _, method in GUARDED} == {"GET", "POST"}
    assert {endpoint for endpoint, _, _ in console_routes()} - endpoints == PUBLIC_ENDPOINTS


@pytest.mark.parametrize(("endpoint", "path", "method"), GUARDED)
def test_anonymous_pages_redirect_to_sign_in_and_forms_get_401(
    endpoint: str, path: str, method: str, app: Flask
) -> None:
    response = app.test_client().open(path, method=method)
    if method == "GET":
        assert response.status_code == 302, endpoint
        assert response.headers["Location"].startswith("/admin/login?next=")
    else:
        assert response.status_code == 401, endpoint
        assert "请先登录" in response.get_data(as_text=True)


@pytest.mark.parametrize(("endpoint", "path", "method"), console_routes())
def test_a_user_token_is_refused_everywhere(endpoint: str, path: str, method: str, app: Flask) -> None:
    response = app.test_client().open(path, method=method, headers=user_auth())
    assert response.status_code == 403, endpoint
    assert MSG_USER_TOKEN in response.get_data(as_text=True)


@pytest.mark.parametrize(("endpoint", "path", "method"), GUARDED)
def test_an_admin_bearer_token_is_not_a_session(endpoint: str, path: str, method: str, app: Flask) -> None:
    """The console takes its session only: a header would bypass the sign-in and its CSRF."""
    response = app.test_client().open(path, method=method, headers=ADMIN_AUTH)
    assert response.status_code == (302 if method == "GET" else 401), endpoint


def test_sign_in_sets_a_hardened_session_cookie_without_the_token(
    app: Flask, redis_client: redis.Redis
) -> None:
    client = app.test_client()
    response = client.post(
        "/admin/login", data={"token": ADMIN_TOKEN, "name": "张三", "csrf_token": csrf_token(client)}
    )
    assert response.status_code == 302
    assert response.headers["Location"] == "/admin/"
    (cookie,) = [c for c in response.headers.getlist("Set-Cookie") if c.startswith("mi_admin_session=")]
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    assert "Path=/admin" in cookie
    assert "Secure" not in cookie  # development: plain HTTP on 127.0.0.1
    assert ADMIN_TOKEN not in cookie
    # The cookie names a session; the session itself (who, which token) is in Redis.
    with client.session_transaction("/admin/") as session:
        assert set(session) >= {"sid"}
        assert "admin" not in session
    (key,) = redis_client.keys(Keyspace.of().console.session("*"))
    stored = redis_client.hgetall(key)
    assert stored[b"admin"] == token_fingerprint(ADMIN_TOKEN).encode()
    assert stored[b"name"] == "张三".encode()
    assert 0 < redis_client.ttl(key) <= 8 * 3600


def test_in_production_the_cookie_is_secure(settings: Settings, redis_client: redis.Redis) -> None:
    admin_token = "adm_Vq3x9LrT0bWk7ZsN2yHc5uJd8MeFpGaR"
    strong = settings.with_overrides(secret_key="s" * 40, admin_tokens=(admin_token,))
    client = create_app(strong, environment="production", redis_client=redis_client).test_client()
    response = client.post("/admin/login", data={"token": admin_token, "csrf_token": csrf_token(client)})
    assert response.status_code == 302
    cookies = response.headers.getlist("Set-Cookie")
    assert len(cookies) == 1
    assert all("Secure" in cookie for cookie in cookies)


@pytest.mark.parametrize(
    ("token", "message"),
    [("wrong-token", MSG_BAD_TOKEN), ("", MSG_BAD_TOKEN), (ADMIN_TOKEN + "x", MSG_BAD_TOKEN)],
)
def test_a_wrong_token_does_not_sign_in(token: str, message: str, app: Flask) -> None:
    client = app.test_client()
    response = client.post("/admin/login", data={"token": token, "csrf_token": csrf_token(client)})
    assert response.status_code == 401
    assert message in response.get_data(as_text=True)
    assert client.get("/admin/").status_code == 302


def test_a_user_token_typed_into_the_form_does_not_sign_in(app: Flask) -> None:
    client = app.test_client()
    user_token = user_auth()["Authorization"].removeprefix("Bearer ")
    response = client.post("/admin/login", data={"token": user_token, "csrf_token": csrf_token(client)})
    assert response.status_code == 401
    assert MSG_USER_TOKEN in response.get_data(as_text=True)
    assert client.get("/admin/").status_code == 302


def test_the_sign_in_form_needs_its_csrf_token(app: Flask) -> None:
    client = app.test_client()
    client.get("/admin/login")
    response = client.post("/admin/login", data={"token": ADMIN_TOKEN})
    assert response.status_code == 400
    assert "CSRF" in response.get_data(as_text=True)
    assert client.get("/admin/").status_code == 302


@pytest.mark.parametrize(("endpoint", "path", "method"), [r for r in GUARDED if r[2] == "POST"])
def test_a_signed_in_form_post_without_its_csrf_token_is_refused(
    endpoint: str, path: str, method: str, app: Flask
) -> None:
    client = app.test_client()
    assert sign_in(client) == 302
    response = client.open(path, method=method, data={"ids": ["1"], "token": ADMIN_TOKEN})
    assert response.status_code == 400, endpoint
    assert "CSRF" in response.get_data(as_text=True)
    forged = client.open(path, method=method, data={"ids": ["1"], "csrf_token": "forged"})
    assert forged.status_code == 400, endpoint


def test_sign_out_ends_the_session(app: Flask) -> None:
    client = app.test_client()
    assert sign_in(client) == 302
    # The overview answers with Redis down (the unit app's is a closed port) and has the sign-out form.
    response = client.post("/admin/logout", data={"csrf_token": csrf_token(client, "/admin/")})
    assert response.status_code == 302
    assert response.headers["Location"] == "/admin/login"
    assert client.get("/admin/").status_code == 302
    assert "已退出登录" in client.get("/admin/login").get_data(as_text=True)


def test_a_session_of_a_token_no_longer_configured_is_signed_out(
    app: Flask, settings: Settings, redis_client: redis.Redis
) -> None:
    client = app.test_client()
    assert sign_in(client, token=SECOND_TOKEN) == 302
    with client.session_transaction("/admin/") as session:
        cookie_session = dict(session)
    for admin_tokens, status in (((ADMIN_TOKEN, SECOND_TOKEN), 200), ((ADMIN_TOKEN,), 302)):
        other = real_app(settings, redis_client, admin_tokens=admin_tokens).test_client()
        with other.session_transaction("/admin/") as session:
            session.update(cookie_session)
        assert other.get("/admin/").status_code == status, admin_tokens


@pytest.mark.parametrize(
    "target", ["https://evil.example/", "//evil.example/admin/", "/api/admin/queue/stats"]
)
def test_sign_in_never_redirects_out_of_the_console(target: str, app: Flask) -> None:
    client = app.test_client()
    token = csrf_token(client)
    response = client.post("/admin/login", data={"token": ADMIN_TOKEN, "csrf_token": token, "next": target})
    assert response.status_code == 302
    assert response.headers["Location"] == "/admin/"


def test_the_api_keeps_its_bearer_tokens_and_needs_no_csrf(app: Flask) -> None:
    """CSRF is the console's: the JSON admin API is called with a bearer token, no form."""
    response = app.test_client().post(
        "/api/admin/assessmentRecord/regenerateReport", json={"id": "x"}, headers=bearer(ADMIN_TOKEN)
    )
    assert response.status_code == 400  # a bad id, past auth and without a CSRF token
    assert response.json is not None
    assert response.json["code"] == 1001


@pytest.mark.parametrize("overrides", [{"secret_key": ""}, {"admin_tokens": ()}])
@pytest.mark.parametrize(
    ("endpoint", "path", "method"), [r for r in console_routes() if r[0] != "console.static"]
)
def test_without_secret_key_or_admin_tokens_the_console_is_closed(
    overrides: dict[str, object], endpoint: str, path: str, method: str
) -> None:
    response = (
        APP_WITHOUT[next(iter(overrides))]
        .test_client()
        .open(path, method=method, data={"token": ADMIN_TOKEN})
    )
    assert response.status_code == 503, endpoint
    assert "管理后台未启用" in response.get_data(as_text=True)


def test_with_redis_down_the_console_answers_503_and_changes_nothing(settings: Settings) -> None:
    """docs/reliability.md row 17: no session store, no sign-in limit: 503, never a page served unchecked."""
    from tests.support.urls import CLOSED_REDIS_URL

    down = create_app(settings.with_overrides(redis_url=CLOSED_REDIS_URL, admin_tokens=(ADMIN_TOKEN,)))
    client = down.test_client()
    assert client.get("/admin/login").status_code == 200  # the sign-in page itself needs no server
    response = client.post("/admin/login", data={"token": ADMIN_TOKEN, "csrf_token": csrf_token(client)})
    assert response.status_code == 503
    assert "服务暂时不可用" in response.get_data(as_text=True)
    assert client.get("/admin/").status_code == 302  # not signed in: to the sign-in page


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://localhost"},
    ],
    ids=["origin", "null-origin", "fetch-cross-site", "fetch-same-site"],
)
def test_a_console_post_from_another_site_is_refused_even_with_a_valid_csrf_token(
    app: Flask, headers: dict[str, str]
) -> None:
    client = app.test_client()
    assert sign_in(client) == 302
    token = csrf_token(client, "/admin/")
    answer = client.post("/admin/logout", data={"csrf_token": token}, headers=headers)
    assert answer.status_code == 403
    assert client.get("/admin/").status_code == 200  # still signed in: the post did nothing
    stranger = app.test_client()
    form = {"token": ADMIN_TOKEN, "csrf_token": csrf_token(stranger)}
    assert stranger.post("/admin/login", data=form, headers=headers).status_code == 403


@pytest.mark.parametrize(
    "headers",
    [{}, {"Origin": "http://localhost"}, {"Sec-Fetch-Site": "same-origin", "Origin": "https://localhost"}],
)
def test_a_console_post_from_its_own_pages_is_accepted(app: Flask, headers: dict[str, str]) -> None:
    client = app.test_client()
    assert sign_in(client) == 302
    answer = client.post("/admin/logout", data={"csrf_token": csrf_token(client, "/admin/")}, headers=headers)
    assert answer.status_code == 302
    assert client.get("/admin/").status_code == 302  # signed out
