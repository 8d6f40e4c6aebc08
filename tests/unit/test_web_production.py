"""APP_ENV=production refuses weak secrets at app creation (web/__init__.py)."""

from __future__ import annotations

import logging

import pytest

from config import ConfigError
from tests.support.web_unit import UNIT_SETTINGS
from web import MIN_SECRET_BYTES, app_env, create_app

STRONG = "k" * MIN_SECRET_BYTES
STRONG_ADMIN = "adm_Vq3x9LrT0bWk7ZsN2yHc5uJd8MeFpGaR"  # as `make run` generates one


@pytest.mark.parametrize(
    ("secret_key", "admin_tokens", "named"),
    [
        ("a", (STRONG_ADMIN,), "SECRET_KEY"),
        ("", (STRONG_ADMIN,), "SECRET_KEY"),
        ("k" * (MIN_SECRET_BYTES - 1), (STRONG_ADMIN,), "SECRET_KEY"),
        (STRONG, ("x",), "ADMIN_TOKENS"),
        (STRONG, (STRONG_ADMIN, "short-admin-token"), "ADMIN_TOKENS: token #2 (of 2)"),
        (STRONG, ("a" * 40,), "ADMIN_TOKENS: token #1 (of 1) cannot carry 128 bits"),
        (STRONG, ("1234" * 10,), "ADMIN_TOKENS: token #1 (of 1) cannot carry 128 bits"),
    ],
)
def test_production_refuses_a_short_secret_with_a_clear_message(
    secret_key: str, admin_tokens: tuple[str, ...], named: str
) -> None:
    settings = UNIT_SETTINGS.with_overrides(secret_key=secret_key, admin_tokens=admin_tokens)
    with pytest.raises(ConfigError) as raised:
        create_app(settings, environment="production")
    message = str(raised.value)
    assert named in message
    assert (
        f"at least {MIN_SECRET_BYTES}" in message
        or f"shorter than {MIN_SECRET_BYTES}" in message
        or "128 bits of randomness" in message
    )
    assert "secrets.token_urlsafe" in message  # how to make a good one
    for secret in (secret_key, *admin_tokens):
        if len(secret) > 2:
            assert secret not in message  # a log line must never carry the secret


def test_production_accepts_strong_secrets_and_no_admin_token() -> None:
    create_app(
        UNIT_SETTINGS.with_overrides(secret_key=STRONG, admin_tokens=(STRONG_ADMIN,)),
        environment="production",
    )
    create_app(UNIT_SETTINGS.with_overrides(secret_key=STRONG, admin_tokens=()), environment="production")
    # Multi-byte characters count as bytes: 11 CJK characters are 33 bytes.
    create_app(UNIT_SETTINGS.with_overrides(secret_key="密" * 11, admin_tokens=()), environment="production")


def test_app_env_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    weak = UNIT_SETTINGS.with_overrides(secret_key="a", admin_tokens=("x",))
    monkeypatch.setenv("APP_ENV", "production")
    with pytest.raises(ConfigError, match="APP_ENV=production"):
        create_app(weak)
    monkeypatch.setenv("APP_ENV", "development")
    create_app(weak)
    monkeypatch.delenv("APP_ENV")
    create_app(weak)


def test_outside_production_a_weak_secret_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="web"):
        create_app(
            UNIT_SETTINGS.with_overrides(secret_key="a", admin_tokens=("x",)), environment="development"
        )
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "SECRET_KEY is 1 bytes long" in warned
    assert "ADMIN_TOKENS: token #1" in warned


@pytest.mark.parametrize(
    ("raw", "value"),
    [(None, "development"), ("", "development"), (" production ", "production"), ("test", "test")],
)
def test_app_env_values(raw: str | None, value: str) -> None:
    assert app_env({} if raw is None else {"APP_ENV": raw}) == value


@pytest.mark.parametrize("raw", ["prod", "Production", "staging"])
def test_an_unknown_app_env_is_refused_rather_than_skipping_the_checks(raw: str) -> None:
    with pytest.raises(ConfigError, match="APP_ENV must be one of"):
        app_env({"APP_ENV": raw})
