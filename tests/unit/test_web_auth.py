"""web/auth.py: the two kinds of credentials, on every endpoint of the URL map (no servers)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from flask import Flask
from flask.cli import locate_app
from flask.testing import FlaskClient
from itsdangerous import URLSafeTimedSerializer

from services.domain.limits import MAX_ID
from tests.support.web_unit import (
    ADMIN_AUTH,
    ADMIN_TOKEN,
    SECRET_KEY,
    bearer,
    make_app,
    routes,
    user_auth,
)
from web import auth

APP = make_app()
ADMIN_ROUTES = routes(APP, "admin_api") + routes(APP, "metrics")
USER_ROUTES = routes(APP, "user_api")
PUBLIC_ROUTES = routes(APP, "health") + routes(APP, "openapi")
#: A body each endpoint would accept, so that only the credential can be the reason to refuse.
BODY = {"id": 1, "ids": [1], "recordId": 1, "answers": [{"questionId": 1, "value": 3}]}


def call(
    client: FlaskClient, path: str, method: str, headers: dict[str, str]
) -> tuple[int, dict[str, object]]:
    response = client.open(path, method=method, headers=headers, json=BODY if method == "POST" else None)
    assert response.json is not None
    return response.status_code, response.json


def test_the_url_map_has_both_apis() -> None:
    assert len(ADMIN_ROUTES) >= 5
    assert len(USER_ROUTES) >= 7


# -- tokens -----------------------------------------------------------------------------


def test_user_token_round_trip() -> None:
    for user_id in (1, 42, 2**63 - 1):
        assert auth.verify_user_token(SECRET_KEY, auth.issue_user_token(SECRET_KEY, user_id)) == user_id


def test_user_token_is_bound_to_key_and_salt() -> None:
    token = auth.issue_user_token(SECRET_KEY, 5)
    assert auth.verify_user_token("another-key", token) is None
    assert auth.verify_user_token("", token) is None
    other_salt = URLSafeTimedSerializer(SECRET_KEY, salt="something-else").dumps({"uid": 5})
    assert auth.verify_user_token(SECRET_KEY, other_salt) is None
    assert auth.verify_user_token(SECRET_KEY, token[:-2] + ("AA" if token[-2:] != "AA" else "BB")) is None
    for garbage in ("", ".", "a.b.c", "é" * 10, "x" * 5000):
        assert auth.verify_user_token(SECRET_KEY, garbage) is None


@pytest.mark.parametrize(
    "payload", [{"uid": True}, {"uid": 0}, {"uid": -1}, {"uid": 2**63}, {"uid": "5"}, [5], 5, {}]
)
def test_user_token_payload_must_be_a_user_id(payload: object) -> None:
    token = URLSafeTimedSerializer(SECRET_KEY, salt=auth.USER_TOKEN_SALT).dumps(payload)
    assert auth.verify_user_token(SECRET_KEY, token) is None


def test_user_token_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    token = auth.issue_user_token(SECRET_KEY, 5)
    monkeypatch.setattr(auth, "USER_TOKEN_MAX_AGE_S", -1)
    assert auth.verify_user_token(SECRET_KEY, token) is None


def _clock_at(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    monkeypatch.setattr(auth, "time", SimpleNamespace(time=lambda: seconds))


def test_a_remembered_token_still_expires_on_time(monkeypatch: pytest.MonkeyPatch) -> None:
    token = auth.issue_user_token(SECRET_KEY, 7)
    signed_at = int(time.time())
    assert auth.verify_user_token(SECRET_KEY, token) == 7
    hits = auth._verified_user_token.cache_info().hits
    assert auth.verify_user_token(SECRET_KEY, token) == 7
    assert auth._verified_user_token.cache_info().hits == hits + 1  # the signature not checked again
    _clock_at(monkeypatch, signed_at + auth.USER_TOKEN_MAX_AGE_S + 2)
    assert auth.verify_user_token(SECRET_KEY, token) is None
    _clock_at(monkeypatch, signed_at - 2)  # signed "in the future": refused, as itsdangerous does
    assert auth.verify_user_token(SECRET_KEY, token) is None


def test_a_remembered_token_is_not_accepted_under_another_secret() -> None:
    token = auth.issue_user_token(SECRET_KEY, 8)
    assert auth.verify_user_token(SECRET_KEY, token) == 8
    assert auth.verify_user_token(SECRET_KEY + "-rotated", token) is None


def test_the_longest_user_token_fits_and_a_longer_string_is_refused() -> None:
    longest = auth.issue_user_token(SECRET_KEY, MAX_ID)
    assert len(longest) < auth.MAX_USER_TOKEN_CHARS
    assert auth.verify_user_token(SECRET_KEY, longest) == MAX_ID
    assert auth.verify_user_token(SECRET_KEY, longest + "." + "x" * auth.MAX_USER_TOKEN_CHARS) is None


def test_a_forged_token_stays_refused_when_asked_again() -> None:
    token = auth.issue_user_token(SECRET_KEY, 9)
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert auth.verify_user_token(SECRET_KEY, forged) is None
    assert auth.verify_user_token(SECRET_KEY, forged) is None
    assert auth.verify_user_token(SECRET_KEY, token) == 9


@pytest.mark.parametrize(
    ("secret", "user_id"), [("", 1), (SECRET_KEY, 0), (SECRET_KEY, True), (SECRET_KEY, 2**63)]
)
def test_issue_user_token_refuses(secret: str, user_id: int) -> None:
    with pytest.raises(ValueError, match=r"SECRET_KEY|user id"):
        auth.issue_user_token(secret, user_id)


def test_admin_token_comparison() -> None:
    tokens = ("first", "second")
    assert auth.is_admin_token(tokens, "second")
    assert not auth.is_admin_token(tokens, "secon")
    assert not auth.is_admin_token(tokens, "")
    assert not auth.is_admin_token((), "first")
    assert not auth.is_admin_token(tokens, "sécond")  # non-ASCII must not raise


# -- the matrix over the URL map --------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> FlaskClient:
    return APP.test_client()


ADMIN_REFUSALS = [
    ("anonymous", {}, 401),
    ("user token", user_auth(7), 403),
    ("wrong admin token", bearer("not-" + ADMIN_TOKEN), 401),
    ("admin token as Basic", {"Authorization": f"Basic {ADMIN_TOKEN}"}, 401),
    ("empty bearer", {"Authorization": "Bearer "}, 401),
    ("user token of another key", user_auth(7, "another-key"), 401),
]


@pytest.mark.parametrize(("path", "method"), ADMIN_ROUTES)
@pytest.mark.parametrize("refusal", ADMIN_REFUSALS, ids=[r[0] for r in ADMIN_REFUSALS])
def test_admin_endpoints_refuse(
    client: FlaskClient, path: str, method: str, refusal: tuple[str, dict[str, str], int]
) -> None:
    who, headers, status = refusal
    got, body = call(client, path, method, headers)
    assert (got, body["code"], body["data"]) == (status, status, None), who
    assert body["message"]


USER_REFUSALS = [
    ("anonymous", {}, 401),
    ("admin token", ADMIN_AUTH, 403),
    ("second admin token", bearer("second-admin-token"), 403),
    ("garbage", bearer("garbage"), 401),
    ("user token of another key", user_auth(7, "another-key"), 401),
    ("user token as Basic", {"Authorization": user_auth(7)["Authorization"].replace("Bearer", "Basic")}, 401),
]


@pytest.mark.parametrize(("path", "method"), USER_ROUTES)
@pytest.mark.parametrize("refusal", USER_REFUSALS, ids=[r[0] for r in USER_REFUSALS])
def test_user_endpoints_refuse(
    client: FlaskClient, path: str, method: str, refusal: tuple[str, dict[str, str], int]
) -> None:
    who, headers, status = refusal
    got, body = call(client, path, method, headers)
    assert (got, body["code"], body["data"]) == (status, status, None), who


def test_401_names_the_scheme(client: FlaskClient) -> None:
    response = client.get("/api/admin/queue/stats")
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert response.json is not None
    assert response.json["message"] == auth.MSG_MISSING


@pytest.mark.parametrize(("path", "method"), ADMIN_ROUTES)
def test_admin_api_without_configured_tokens_refuses_everyone(path: str, method: str) -> None:
    client = make_app(admin_tokens=()).test_client()
    for headers in ({}, ADMIN_AUTH, bearer("")):
        got, body = call(client, path, method, headers)
        assert (got, body["code"]) == (401, 401)
    got, body = call(client, path, method, ADMIN_AUTH)
    assert body["message"] == auth.MSG_ADMIN_AUTH_DISABLED


@pytest.mark.parametrize(("path", "method"), USER_ROUTES)
def test_user_api_without_secret_key_refuses_everyone(path: str, method: str) -> None:
    client = make_app(secret_key="").test_client()
    for headers in ({}, user_auth(7), user_auth(7, "another-key"), ADMIN_AUTH):
        got, body = call(client, path, method, headers)
        assert (got, body["code"], body["message"]) == (401, 401, auth.MSG_USER_AUTH_DISABLED)


#: Public, but answer 503 when what they check is not there (no server, no worker beating).
PROBES = ("/readyz", "/healthz/workers")


@pytest.mark.parametrize(("path", "method"), [r for r in PUBLIC_ROUTES if r[0] not in PROBES])
def test_public_endpoints_need_no_credential(client: FlaskClient, path: str, method: str) -> None:
    assert client.open(path, method=method).status_code == 200


# -- issuing tokens from the command line -----------------------------------------------


def test_cli_issues_a_verifiable_token() -> None:
    result = APP.test_cli_runner().invoke(args=["issue-user-token", "42"])
    assert result.exit_code == 0, result.output
    assert auth.verify_user_token(SECRET_KEY, result.output.strip()) == 42


@pytest.mark.parametrize("user_id", ["0", "-1", "abc", str(2**63)])
def test_cli_refuses_a_bad_user_id(user_id: str) -> None:
    result = APP.test_cli_runner().invoke(args=["issue-user-token", "--", user_id])
    assert result.exit_code != 0


def test_cli_refuses_without_secret_key() -> None:
    result = make_app(secret_key="").test_cli_runner().invoke(args=["issue-user-token", "42"])
    assert result.exit_code != 0
    assert "SECRET_KEY" in result.output


def test_flask_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented command: ``flask --app web issue-user-token USER_ID``, in process: the app
    found as ``--app web`` finds it (the create_app factory, settings from the environment)."""
    monkeypatch.setenv("SECRET_KEY", "cli-secret")
    monkeypatch.setenv("ADMIN_TOKENS", "")
    app = locate_app("web", None)
    result = app.test_cli_runner().invoke(args=["issue-user-token", "9"])
    assert result.exit_code == 0, result.output
    assert auth.verify_user_token("cli-secret", result.output.strip()) == 9


def test_app_is_not_open_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """From an environment without secrets, both APIs refuse every call."""
    for name in ("SECRET_KEY", "ADMIN_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    app: Flask = __import__("web").create_app()
    client = app.test_client()
    assert client.get("/api/admin/queue/stats", headers=ADMIN_AUTH).status_code == 401
    assert client.get("/api/assessment/records", headers=user_auth(7)).status_code == 401
